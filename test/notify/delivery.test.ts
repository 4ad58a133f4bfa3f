// Delivery with real parts: a webhook receiver on loopback that checks
// cf-webhook-auth and verifies the Standard Webhooks signature, a real SMTP
// server (smtp-server) whose messages mailparser reads, the .eml spool, and a
// worker process killed with SIGKILL mid-delivery. The schedule runs on a
// clock the test moves: a receiver down for an hour, a 503 with Retry-After
// and a receiver that never recovers play out in milliseconds.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import { createServer as createNetServer } from 'node:net';
import { join } from 'node:path';
import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMailer, DeliveryWorker, type Mailer } from '../../src/notify/index.js';
import { newId } from '../../src/store/index.js';
import { ROOT } from '../support/cli.js';
import { Receiver } from './receiver.js';
import { healthEvent, notifyFixture } from './support.js';

const SECRET = 'a shared secret';
const S = 1000;
const M = 60 * S;
const H = 60 * M;

let f: ReturnType<typeof notifyFixture>;
let receiver: Receiver;
const workers: DeliveryWorker[] = [];
beforeEach(async () => {
  f = notifyFixture();
  receiver = new Receiver(SECRET);
  await receiver.up();
});
afterEach(async () => {
  for (const w of workers.splice(0)) await w.stop();
  await receiver.down();
  f.dispose();
});

function worker(mailer?: Mailer, leaseMs?: number): DeliveryWorker {
  const w = new DeliveryWorker({
    store: f.asyncStore,
    mailer: mailer ?? createMailer({ spoolDir: join(f.dir, 'mail-spool'), from: 'Moat <moat@example.com>' }),
    clock: f.clock,
    // No jitter: the waits are the schedule's own.
    random: () => 0.5,
    allowPrivateWebhooks: true,
    leaseMs,
  });
  workers.push(w);
  return w;
}

/** A webhook policy to the receiver and one pool event; returns the destination id. */
function webhookPolicy(): string {
  const hook = f.alerting.insertWebhook(f.accountId, { name: 'receiver', url: new URL(receiver.url), secret: SECRET });
  f.alerting.createPolicy(f.accountId, { name: 'pager', alert_type: 'load_balancing_health_alert', enabled: true, mechanisms: { webhooks: [{ id: hook }] } });
  return hook;
}

function history(): { outcome: string; attempt: number; sent: string; status_code: number | null; error: string | null }[] {
  return f.store.db.prepare('SELECT outcome, attempt, sent, status_code, error FROM alert_history ORDER BY rowid').all() as never;
}

const stamp = (ms: number) => new Date(ms).toISOString().replace('Z', '000Z');

describe('webhook delivery', () => {
  it('POSTs the payload with cf-webhook-auth and a verifiable Standard Webhooks signature, and records the success', async () => {
    const hook = webhookPolicy();
    await f.emit(healthEvent(f.accountId, { id: newId(), name: 'web' }));
    const [row] = f.outbox();
    expect(await worker().runOnce()).toBe(1);
    expect(receiver.received).toHaveLength(1);
    const got = receiver.received[0]!;
    expect(got.headers['cf-webhook-auth']).toBe(SECRET);
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers['webhook-id']).toBe(row!.id);
    expect(got.signed).toBe(true);
    expect(JSON.parse(got.body)).toEqual(JSON.parse(row!.payload).body);
    expect(JSON.parse(got.body)).toMatchObject({ name: 'pager', alert_event: 'ALERT_STATE_EVENT_START', data: { pool_name: 'web', new_health: 'Unhealthy' } });
    expect(f.outbox()[0]!.status).toBe('delivered');
    expect(f.alerting.webhook(f.accountId, hook)).toMatchObject({ last_success: stamp(f.clock.t), last_failure: null });
    expect(history()).toEqual([{ outcome: 'delivered', attempt: 1, sent: stamp(f.clock.t), status_code: 200, error: null }]);
    // Delivered rows are not sent again.
    f.clock.advance(48 * H);
    expect(await worker().runOnce()).toBe(0);
    expect(receiver.received).toHaveLength(1);
  });

  it('retries a receiver that is down for an hour on the schedule (0, 5 s, 5 min, 30 min, 2 h later), and delivers once, with the same id', async () => {
    const hook = webhookPolicy();
    await receiver.down();
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    const id = f.outbox()[0]!.id;
    const t0 = f.clock.t;
    const w = worker();
    const attemptsAt: number[] = [];
    // The receiver comes back an hour after the event; walk the clock to each due time.
    for (let i = 0; i < 6 && f.outbox()[0]!.status === 'pending'; i++) {
      const due = (f.store.db.prepare('SELECT next_attempt_ms FROM alert_outbox').get() as { next_attempt_ms: number }).next_attempt_ms;
      // Just before it is due, nothing is sent.
      f.clock.t = due - 1;
      expect(await w.runOnce()).toBe(0);
      f.clock.t = due;
      if (due - t0 >= H && receiver.port !== 0) await receiver.up();
      attemptsAt.push(due - t0);
      expect(await w.runOnce()).toBe(1);
    }
    expect(attemptsAt).toEqual([0, 5 * S, 5 * S + 5 * M, 5 * S + 35 * M, 5 * S + 35 * M + 2 * H]);
    expect(receiver.received.map((r) => r.headers['webhook-id'])).toEqual([id]);
    expect(history().map((h) => [h.outcome, h.attempt, h.sent])).toEqual([
      ['failed', 1, stamp(t0)],
      ['failed', 2, stamp(t0 + 5 * S)],
      ['failed', 3, stamp(t0 + 5 * S + 5 * M)],
      ['failed', 4, stamp(t0 + 5 * S + 35 * M)],
      ['delivered', 5, stamp(t0 + 5 * S + 35 * M + 2 * H)],
    ]);
    expect(history()[0]!.error).toMatch(/^error 9400: connect ECONNREFUSED 127\.0\.0\.1:\d+$/);
    expect(f.alerting.webhook(f.accountId, hook)).toMatchObject({ last_failure: stamp(t0 + 5 * S + 35 * M), last_success: stamp(t0 + 5 * S + 35 * M + 2 * H) });
  });

  it("waits for a 503's Retry-After when it is longer than the schedule's step, and resends the same id", async () => {
    webhookPolicy();
    receiver.answer = { status: 503, retryAfter: '600' };
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    const t0 = f.clock.t;
    const w = worker();
    expect(await w.runOnce()).toBe(1);
    // The schedule says 5 s; the receiver asked for 600.
    f.clock.t = t0 + 599 * S;
    expect(await w.runOnce()).toBe(0);
    receiver.answer = { status: 200 };
    f.clock.t = t0 + 600 * S;
    expect(await w.runOnce()).toBe(1);
    expect(receiver.received).toHaveLength(2);
    expect(new Set(receiver.received.map((r) => r.headers['webhook-id'])).size).toBe(1);
    // Each attempt is signed anew (its own timestamp), and both verify.
    expect(receiver.received.every((r) => r.signed)).toBe(true);
    expect(history().map((h) => [h.outcome, h.status_code])).toEqual([
      ['failed', 503],
      ['delivered', 200],
    ]);
  });

  it('counts only 2xx as success (a 302 is retried) and gives up after the tenth attempt, about three days on', async () => {
    webhookPolicy();
    receiver.answer = { status: 302 };
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    const t0 = f.clock.t;
    const w = worker();
    for (let i = 0; i < 12; i++) {
      const row = f.store.db.prepare('SELECT status, next_attempt_ms FROM alert_outbox').get() as { status: string; next_attempt_ms: number };
      if (row.status !== 'pending') break;
      f.clock.t = row.next_attempt_ms;
      await w.runOnce();
    }
    expect(receiver.received).toHaveLength(10);
    expect(f.outbox()[0]).toMatchObject({ status: 'failed', attempts: 10 });
    const h = history();
    expect(h.map((x) => x.outcome)).toEqual([...Array<string>(10).fill('failed'), 'gave_up']);
    expect(h[10]!.error).toBe('error 9402: given up after 10 attempts; last: error 9400: HTTP 302');
    expect(Date.parse(h[10]!.sent) - t0).toBe(75 * H + 35 * M + 5 * S);
    f.clock.advance(30 * 24 * H);
    expect(await w.runOnce()).toBe(0);
  });

  it('gives up at once on 410 Gone', async () => {
    webhookPolicy();
    receiver.answer = { status: 410 };
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    await worker().runOnce();
    expect(history().map((h) => h.outcome)).toEqual(['failed', 'gave_up']);
    expect(f.outbox()[0]!.status).toBe('failed');
  });

  it('refuses to deliver to a loopback receiver without --allow-private-webhooks (9403), and retries', async () => {
    webhookPolicy();
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    const strict = new DeliveryWorker({ store: f.asyncStore, mailer: createMailer({ spoolDir: join(f.dir, 'spool'), from: 'm@example.com' }), clock: f.clock });
    workers.push(strict);
    await strict.runOnce();
    expect(receiver.received).toHaveLength(0);
    expect(history()[0]!.error).toBe('error 9403: 127.0.0.1 is a loopback address');
    expect(f.outbox()[0]!.status).toBe('pending');
  });
});

describe('sharing the outbox', () => {
  it('gives each due row to one claimant: two workers claiming at once get disjoint rows, all of them between them', async () => {
    f.alerting.createPolicy(f.accountId, {
      name: 'many',
      alert_type: 'load_balancing_health_alert',
      enabled: true,
      mechanisms: { email: Array.from({ length: 10 }, (_, i) => ({ id: `u${i}@example.com` })) },
    });
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    const [a, b] = [worker(), worker()];
    const first = (await a.outbox.claim(a.owner, f.clock.t, 60_000, 6)).map((r) => r.id);
    const second = (await b.outbox.claim(b.owner, f.clock.t, 60_000, 6)).map((r) => r.id);
    expect(first).toHaveLength(6);
    expect(second).toHaveLength(4);
    expect(new Set([...first, ...second]).size).toBe(10);
    // Until the leases run out, nobody else gets them.
    expect(await a.outbox.claim('third', f.clock.t + 59_999, 60_000, 10)).toEqual([]);
    expect(await a.outbox.claim('third', f.clock.t + 60_000, 60_000, 10)).toHaveLength(10);
  });

  it('gives up a webhook whose destination was deleted after the notification was queued', async () => {
    const hook = webhookPolicy();
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    for (const p of f.alerting.policies(f.accountId)) f.alerting.deletePolicy(f.accountId, p.id);
    f.alerting.deleteWebhook(f.accountId, hook);
    await worker().runOnce();
    expect(receiver.received).toHaveLength(0);
    expect(history().map((h) => [h.outcome, h.error])).toEqual([
      ['failed', `error 9400: webhook destination ${hook} was deleted`],
      ['gave_up', `error 9402: given up after 1 attempt; last: error 9400: webhook destination ${hook} was deleted`],
    ]);
  });
});

describe('history retention', () => {
  it('forgets history and finished notifications after 90 days, and keeps pending ones', async () => {
    webhookPolicy();
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    const w = worker();
    await w.runOnce();
    await receiver.down();
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    f.clock.advance(90 * 24 * H - 1);
    const kept = new DeliveryWorker({ store: f.asyncStore, mailer: createMailer({ spoolDir: join(f.dir, 's'), from: 'm@example.com' }), clock: f.clock, allowPrivateWebhooks: true });
    workers.push(kept);
    await kept.runOnce();
    expect(history().map((h) => h.outcome)).toEqual(['delivered', 'failed']);
    f.clock.advance(2);
    const later = new DeliveryWorker({ store: f.asyncStore, mailer: createMailer({ spoolDir: join(f.dir, 's'), from: 'm@example.com' }), clock: f.clock, allowPrivateWebhooks: true });
    workers.push(later);
    await later.outbox.prune(f.clock.now());
    // The first delivery (90 days and 1 ms ago) is gone; the pending notification and its recent attempt stay.
    expect(history().map((h) => h.outcome)).toEqual(['failed']);
    expect(f.outbox().map((r) => r.status)).toEqual(['pending']);
  });
});

describe('a worker killed with SIGKILL during a delivery', () => {
  beforeAll(() => {
    // The worker process runs from dist/ (built by `npx tsc -p tsconfig.json`).
    if (!existsSync(join(ROOT, 'dist/test/notify/delivery-child.js'))) throw new Error('build dist/ first: npx tsc -p tsconfig.json');
  });

  it('loses nothing: once its lease expires another worker sends the notification again, with the same id, and it is delivered', async () => {
    webhookPolicy();
    receiver.answer = 'hang';
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    const id = f.outbox()[0]!.id;
    const child = spawn(process.execPath, [join(ROOT, 'dist/test/notify/delivery-child.js'), f.dir, '3000'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    try {
      await receiver.next();
      // The child holds the row: another worker does not take it while the lease runs.
      const lease = f.store.db.prepare('SELECT lease_owner, lease_until_ms FROM alert_outbox').get() as { lease_owner: string; lease_until_ms: number };
      expect(lease.lease_owner).toMatch(new RegExp(`:${child.pid}:`));
      f.clock.t = Date.now();
      expect(await worker().runOnce()).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
    expect(await exited).toBe('SIGKILL');
    expect(f.outbox()[0]!.status).toBe('pending');
    // After the lease: claimed again and delivered, with the id of the first try.
    receiver.answer = { status: 200 };
    const lease = (f.store.db.prepare('SELECT lease_until_ms FROM alert_outbox').get() as { lease_until_ms: number }).lease_until_ms;
    f.clock.t = lease;
    expect(await worker().runOnce()).toBe(1);
    expect(receiver.received.map((r) => r.headers['webhook-id'])).toEqual([id, id]);
    expect(f.outbox()[0]!.status).toBe('delivered');
    // Both attempts are in the history: the one the killed process never recorded, then the delivery.
    const rows = history().sort((a, b) => a.attempt - b.attempt);
    expect(rows.map((h) => [h.attempt, h.outcome, h.status_code])).toEqual([
      [1, 'failed', null],
      [2, 'delivered', 200],
    ]);
    expect(rows[0]!.error).toMatch(new RegExp(`^error 9400: attempt interrupted: the process delivering it \\(.*:${child.pid}:.*\\) stopped before its outcome was recorded`));
  });

  it('is replaced at once by a worker of the same host once its process is gone (a restart), while its lease still runs', async () => {
    webhookPolicy();
    receiver.answer = 'hang';
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    const id = f.outbox()[0]!.id;
    const child = spawn(process.execPath, [join(ROOT, 'dist/test/notify/delivery-child.js'), f.dir, String(H)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    try {
      await receiver.next();
    } finally {
      child.kill('SIGKILL');
    }
    expect(await exited).toBe('SIGKILL');
    const lease = f.store.db.prepare('SELECT lease_owner, lease_until_ms FROM alert_outbox').get() as { lease_owner: string; lease_until_ms: number };
    // The owner's pid space: host name, boot id and pid namespace (a pid says nothing outside them).
    const space = `${hostname()}/${readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').slice(0, 8)}/${/\d+/.exec(readlinkSync('/proc/self/ns/pid'))![0]}`;
    expect(lease.lease_owner).toBe(`${space}:${child.pid}:${lease.lease_owner.split(':').at(-1)}`);
    // An hour of lease left: a worker of another host waits for it; one of this host sees the owner is dead and sends now.
    f.clock.t = Date.now();
    f.store.db.prepare("UPDATE alert_outbox SET lease_owner = 'elsewhere:' || substr(lease_owner, instr(lease_owner, ':') + 1)").run();
    expect(await worker().runOnce()).toBe(0);
    f.store.db.prepare('UPDATE alert_outbox SET lease_owner = ?').run(lease.lease_owner);
    receiver.answer = { status: 200 };
    expect(await worker().runOnce()).toBe(1);
    expect(receiver.received.map((r) => r.headers['webhook-id'])).toEqual([id, id]);
    expect(f.outbox()[0]!.status).toBe('delivered');
  });
});

describe('email delivery', () => {
  async function smtpSink(fail = false): Promise<{ port: number; mails: ParsedMail[]; close: () => Promise<void> }> {
    const mails: ParsedMail[] = [];
    const server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      logger: false,
      onData(stream, _session, cb) {
        simpleParser(stream)
          .then((m) => {
            if (fail) return cb(Object.assign(new Error('mailbox unavailable'), { responseCode: 550 }));
            mails.push(m);
            cb();
          })
          .catch(cb);
      },
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.server.address() as { port: number }).port;
    return { port, mails, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  }

  it('sends policy and legacy pool emails through SMTP, each with a Message-ID stable for its notification', async () => {
    const sink = await smtpSink();
    try {
      f.alerting.createPolicy(f.accountId, { name: 'ops mail', alert_type: 'load_balancing_health_alert', enabled: true, mechanisms: { email: [{ id: 'ops@example.com' }] } });
      await f.emit(healthEvent(f.accountId, { id: newId(), name: 'api', notificationEmail: 'legacy@example.com' }, { eventSource: 'origin', origin: { name: 'o1', address: '192.0.2.7' } }));
      const ids = f.outbox().map((r) => r.id);
      const mailer = createMailer({ smtpUrl: `smtp://127.0.0.1:${sink.port}`, spoolDir: join(f.dir, 'unused'), from: 'Moat <moat@example.com>' });
      expect(await worker(mailer).runOnce()).toBe(2);
      const byTo = new Map(sink.mails.map((m) => [(m.to as { text: string }).text, m]));
      expect([...byTo.keys()].sort()).toEqual(['legacy@example.com', 'ops@example.com']);
      const ops = byTo.get('ops@example.com')!;
      expect(ops.subject).toBe('[Moat] Origin o1 (192.0.2.7) of pool api is Unhealthy');
      expect(ops.from?.value[0]).toMatchObject({ name: 'Moat', address: 'moat@example.com' });
      expect(ops.text).toContain('Origin o1 (192.0.2.7) of pool api is Unhealthy: HTTP 503 (was Healthy');
      expect(ops.text).toContain('Notification policy: ops mail');
      expect(ops.messageId).toBe(`<${ids[0]}@notifications.moat>`);
      const legacy = byTo.get('legacy@example.com')!;
      expect(legacy.messageId).toBe(`<${ids[1]}@notifications.moat>`);
      expect(legacy.text).toContain('pool api lists your address in notification_email, which is deprecated');
      expect(history().map((h) => h.outcome)).toEqual(['delivered', 'delivered']);
      // Sent side by side: the history is in order of completion, so read it by address.
      expect(f.store.db.prepare('SELECT name, policy_id IS NULL AS legacy, mechanism FROM alert_history ORDER BY mechanism').all()).toEqual([
        { name: 'Legacy pool notification', legacy: 1, mechanism: 'legacy@example.com' },
        { name: 'ops mail', legacy: 0, mechanism: 'ops@example.com' },
      ]);
    } finally {
      await sink.close();
    }
  });

  it('gives up an SMTP exchange that stalls after stallMs (the worker gives a quarter of its lease), instead of nodemailer\'s minutes', async () => {
    // A server that accepts the connection and never greets.
    const sockets: import('node:net').Socket[] = [];
    const silent = createNetServer((sock) => sockets.push(sock));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as { port: number }).port;
    const mailer = createMailer({ smtpUrl: `smtp://127.0.0.1:${port}`, spoolDir: join(f.dir, 'unused'), from: 'Moat <moat@example.com>', stallMs: 300 });
    try {
      const t0 = Date.now();
      const outcome = await mailer.send({ id: newId(), to: 'ops@example.com', subject: 's', text: 't' });
      const took = Date.now() - t0;
      expect(outcome.ok).toBe(false);
      expect(outcome.code).toBe(9401);
      expect(took).toBeGreaterThanOrEqual(250);
      expect(took).toBeLessThan(5000);
    } finally {
      mailer.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('retries an email the SMTP server refuses (9401)', async () => {
    const sink = await smtpSink(true);
    try {
      await f.emit(healthEvent(f.accountId, { id: newId(), notificationEmail: 'legacy@example.com' }));
      const mailer = createMailer({ smtpUrl: `smtp://127.0.0.1:${sink.port}`, spoolDir: join(f.dir, 'unused'), from: 'moat@example.com' });
      await worker(mailer).runOnce();
      expect(history()[0]).toMatchObject({ outcome: 'failed', status_code: 550 });
      expect(history()[0]!.error).toMatch(/^error 9401: .*mailbox unavailable/);
      expect(f.outbox()[0]).toMatchObject({ status: 'pending', attempts: 1 });
    } finally {
      await sink.close();
    }
  });

  it('without SMTP, writes each email as an owner-only .eml file in the spool', async () => {
    await f.emit(healthEvent(f.accountId, { id: newId(), name: 'db', notificationEmail: 'a@example.com' }, { newHealth: 'healthy', oldHealth: 'unhealthy', reason: '' }));
    const id = f.outbox()[0]!.id;
    await worker().runOnce();
    const spool = join(f.dir, 'mail-spool');
    expect(readdirSync(spool)).toEqual([`${id}.eml`]);
    expect(statSync(join(spool, `${id}.eml`)).mode & 0o777).toBe(0o600);
    const mail = await simpleParser(readFileSync(join(spool, `${id}.eml`)));
    expect([(mail.to as { text: string }).text, mail.subject, mail.messageId]).toEqual(['a@example.com', '[Moat] Pool db is Healthy', `<${id}@notifications.moat>`]);
  });
});
