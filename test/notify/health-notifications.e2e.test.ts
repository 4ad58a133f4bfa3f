// The whole chain of pool health notifications with real parts (#18 item 13):
// a built `moat serve` process probing local HTTP origins that the test
// switches between 200 and 503, a real SMTP server in this process (read back
// with mailparser), a local webhook receiver verifying cf-webhook-auth and the
// Standard Webhooks signature, and Cloudflare's SDK for every call it covers.
// Then delivery across a SIGKILL: the receiver refuses while an edge happens,
// the server is killed and restarted, the receiver comes back, and the
// notification arrives under the id of its failed attempts, once; and a
// SIGKILL while the receiver holds deliveries open, resent at once on restart.
import { type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite from 'better-sqlite3';
import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from '../support/cli.js';
import { printedCredentials, sdkClient, serveProcess, type ServeProcess } from '../support/api.js';
import { Receiver } from './receiver.js';

const SECRET = 'e2e hook secret';
const HEALTH = 'load_balancing_health_alert';
const POLICY_ADDRESS = 'ops@example.com';
const LEGACY_ADDRESS = 'legacy@example.com';

/** A local origin whose answer the test sets. */
class Origin {
  status = 200;
  constructor(readonly host: string) {}
  readonly server: Server = createServer((_req, res) => res.writeHead(this.status).end(this.status === 200 ? 'ok' : 'down'));
  async listen(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, this.host, r));
  }
  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }
}

const dir = mkdtempSync(join(tmpdir(), 'moat-e2e-health-notify-'));
const children: ChildProcess[] = [];
const receiver = new Receiver(SECRET);
const originA = new Origin('127.0.0.1');
// Another loopback address: the health API keys origins by address, as Cloudflare's does.
const originB = new Origin('127.0.0.2');
const mails: ParsedMail[] = [];
const smtp = new SMTPServer({
  authOptional: true,
  disabledCommands: ['STARTTLS'],
  logger: false,
  onData(stream, _session, callback) {
    simpleParser(stream).then(
      (m) => {
        mails.push(m);
        callback();
      },
      (err: Error) => callback(err),
    );
  },
});
let smtpPort = 0;

beforeAll(async () => {
  ensureBuilt();
  await Promise.all([originA.listen(), originB.listen(), receiver.up(), new Promise<void>((r) => smtp.listen(0, '127.0.0.1', r))]);
  smtpPort = (smtp.server.address() as AddressInfo).port;
}, 120_000);

afterAll(async () => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
  await receiver.down();
  originA.server.close();
  originB.server.close();
  await new Promise<void>((r) => smtp.close(r));
  rmSync(dir, { recursive: true, force: true });
});

function serve(): Promise<ServeProcess> {
  return serveProcess(dir, ['--monitor-min-interval', '1', '--smtp-url', `smtp://127.0.0.1:${smtpPort}`, '--mail-from', 'alerts@example.com', '--allow-private-webhooks']).then((s) => {
    children.push(s.child);
    return s;
  });
}

/** Polls `check` every 100 ms until it returns a value (not undefined), or fails after `ms`. */
async function until<T>(what: string, check: () => T | undefined | Promise<T | undefined>, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface HookBody {
  name: string;
  text: string;
  data: { pool_id: string; event_source: string; origin_name: string | null; new_health: string; old_health: string };
  ts: number;
  account_id: string;
  policy_id: string;
  policy_name: string;
  alert_type: string;
  alert_correlation_id: string;
  alert_event: 'ALERT_STATE_EVENT_START' | 'ALERT_STATE_EVENT_END';
}

/** Health notifications received (not the destination's test POST), with their answer-independent parts. */
function hooks() {
  return receiver.received
    .map((r) => ({ id: String(r.headers['webhook-id']), auth: r.headers['cf-webhook-auth'], signed: r.signed, raw: r.body, body: JSON.parse(r.body) as HookBody }))
    .filter((h) => h.body.alert_type === HEALTH);
}

/** Health events recorded in the server's database (read-only, beside the running server). */
function healthEventCount(): number {
  const db = new BetterSqlite(join(dir, 'moat.db'), { readonly: true, fileMustExist: true });
  try {
    return (db.prepare('SELECT count(*) AS n FROM health_events').get() as { n: number }).n;
  } finally {
    db.close();
  }
}

const to = (m: ParsedMail) => (Array.isArray(m.to) ? m.to : m.to === undefined ? [] : [m.to]).flatMap((a) => a.value.map((v) => v.address));
/** Notifications among `list`: retries of one (the same Message-ID) count once. */
const distinct = (list: ParsedMail[]) => new Set(list.map((m) => m.messageId)).size;
const mailsTo = (address: string, subject: RegExp) => mails.filter((m) => to(m).includes(address) && subject.test(m.subject ?? ''));

/** Rethrows a timeout with what the server holds and what arrived, to tell a wiring fault from a slow machine. */
function diagnose(s: ServeProcess): (err: Error) => never {
  return (err) => {
    const db = new BetterSqlite(join(dir, 'moat.db'), { readonly: true });
    const rows = db.prepare('SELECT mechanism_type, target, status, attempts, last_error, next_attempt_ms, lease_owner, lease_until_ms FROM alert_outbox').all();
    db.close();
    throw new Error(`${err.message} (at ${Date.now()}): mails ${JSON.stringify(mails.map((m) => [to(m), m.subject]))}; outbox ${JSON.stringify(rows)}; stderr ${s.stderr()}`);
  };
}

describe('pool health notifications end to end (moat serve, SMTP, webhooks, SIGKILL)', () => {
  it('notifies an unhealthy origin and pool by webhook and email, recovers with END, and delivers across a SIGKILL once', async () => {
    let s = await serve();
    const cred = printedCredentials(s);
    const account_id = cred.accountId;
    let sdk = sdkClient(s.url, cred);

    const monitor = await sdk.loadBalancers.monitors.create({ account_id, type: 'http', interval: 1, timeout: 1, retries: 0, consecutive_down: 1, consecutive_up: 1, expected_codes: '200', path: '/' });
    const pool = await sdk.loadBalancers.pools.create({
      account_id,
      name: 'web',
      monitor: monitor.id,
      minimum_origins: 2,
      notification_email: LEGACY_ADDRESS,
      origins: [
        { name: 'a', address: '127.0.0.1', port: originA.port },
        { name: 'b', address: '127.0.0.2', port: originB.port },
      ],
    });
    const hook = await sdk.alerting.destinations.webhooks.create({ account_id, name: 'pager', url: receiver.url, secret: SECRET });
    const policy = await sdk.alerting.policies.create({
      account_id,
      name: 'web health',
      alert_type: HEALTH,
      enabled: true,
      filters: { pool_id: [pool.id!], new_health: ['Healthy', 'Unhealthy'], event_source: ['pool', 'origin'] },
      mechanisms: { email: [{ id: POLICY_ADDRESS }], webhooks: [{ id: hook.id! }] },
    });
    // The destination's test POST arrived, signed; it is not a health notification.
    expect(receiver.received).toHaveLength(1);
    expect(receiver.received[0]!.signed).toBe(true);

    // Settling from unknown to healthy is not an edge: nothing is sent.
    await until('pool healthy', async () => ((await sdk.loadBalancers.pools.get(pool.id!, { account_id })) as { healthy?: boolean }).healthy || undefined);
    expect(healthEventCount()).toBe(0);

    // Origin a fails: with minimum_origins 2 the pool fails too.
    originA.status = 503;
    const switched = Date.now();
    const starts = await until('two START webhooks', () => (hooks().length >= 2 ? hooks() : undefined));
    // Within a few probe intervals (1 s each) of the switch.
    const latency = Date.now() - switched;
    expect(latency).toBeLessThan(5000);
    console.log(`e2e: unhealthy origin to both START webhooks in ${latency} ms`);
    expect(starts).toHaveLength(2);
    for (const h of starts) {
      expect(h.signed).toBe(true);
      expect(h.auth).toBe(SECRET);
      expect(Object.keys(h.body).sort()).toEqual(['account_id', 'alert_correlation_id', 'alert_event', 'alert_type', 'data', 'name', 'policy_id', 'policy_name', 'text', 'ts'].sort());
      expect(h.body).toMatchObject({ name: 'web health', account_id, policy_id: policy.id, policy_name: 'web health', alert_type: HEALTH, alert_event: 'ALERT_STATE_EVENT_START' });
      expect(h.body.data).toMatchObject({ pool_id: pool.id, new_health: 'Unhealthy', old_health: 'Healthy' });
      expect(Math.abs(h.body.ts - Date.now() / 1000)).toBeLessThan(30);
    }
    const bySource = new Map(starts.map((h) => [h.body.data.event_source, h]));
    expect(bySource.get('origin')!.body.data.origin_name).toBe('a');
    expect(bySource.get('origin')!.body.text).toMatch(/^Origin a \(127\.0\.0\.1\) of pool web is Unhealthy: /);
    expect(bySource.get('pool')!.body.text).toMatch(/^Pool web is Unhealthy: 1 healthy origin, fewer than minimum_origins \(2\)/);

    const health = (await sdk.loadBalancers.pools.health.get(pool.id!, { account_id })) as unknown as { pool_id: string; pop_health: Record<string, { healthy: boolean; origins: Record<string, { healthy: boolean; failure_reason: string; response_code: number }>[] }> };
    expect(health.pool_id).toBe(pool.id);
    const pops = Object.values(health.pop_health);
    expect(pops.length).toBeGreaterThan(0);
    const origins = Object.assign({}, ...pops[0]!.origins) as Record<string, unknown>;
    expect(pops[0]!.healthy).toBe(false);
    expect(origins['127.0.0.1']).toMatchObject({ healthy: false, response_code: 503 });
    expect(origins['127.0.0.2']).toMatchObject({ healthy: true, response_code: 200, failure_reason: 'No failures' });

    // Emails: the policy's address and the legacy address, each for the origin and the pool, and a deprecation notice.
    await until('four health emails and a deprecation notice', () =>
      mailsTo(POLICY_ADDRESS, /is Unhealthy/).length >= 2 && mailsTo(LEGACY_ADDRESS, /is Unhealthy/).length >= 2 && mailsTo(LEGACY_ADDRESS, /deprecated/).length >= 1 ? true : undefined,
    ).catch(diagnose(s));
    expect(mailsTo(POLICY_ADDRESS, /is Unhealthy/).map((m) => m.subject).sort()).toEqual(['[Moat] Origin a (127.0.0.1) of pool web is Unhealthy', '[Moat] Pool web is Unhealthy']);
    expect(mailsTo(LEGACY_ADDRESS, /is Unhealthy/).map((m) => m.subject).sort()).toEqual(['[Moat] Origin a (127.0.0.1) of pool web is Unhealthy', '[Moat] Pool web is Unhealthy']);
    expect(mailsTo(LEGACY_ADDRESS, /deprecated/)[0]!.text).toContain('web');

    // Recovery: END with the correlation id of its START.
    originA.status = 200;
    const ends = await until('two END webhooks', () => (hooks().length >= 4 ? hooks().slice(2) : undefined));
    for (const e of ends) {
      expect(e.body.alert_event).toBe('ALERT_STATE_EVENT_END');
      expect(e.signed).toBe(true);
      expect(e.body.alert_correlation_id).toBe(bySource.get(e.body.data.event_source)!.body.alert_correlation_id);
      expect(e.body.data.new_health).toBe('Healthy');
    }
    expect(new Set(starts.map((h) => h.body.alert_correlation_id)).size).toBe(2);
    expect(healthEventCount()).toBe(4);

    // The history lists every delivery: 4 webhooks, 4 policy and 4 legacy emails, the deprecation notice.
    await until('recovery emails', () => (mails.filter((m) => /is Healthy/.test(m.subject ?? '')).length >= 4 ? true : undefined));
    const history: { mechanism_type?: string; alert_type?: string }[] = [];
    await until('history of 13 deliveries', async () => {
      history.length = 0;
      for await (const h of sdk.alerting.history.list({ account_id, per_page: 50 })) history.push(h);
      return history.length >= 13 ? true : undefined;
    });
    expect(history.filter((h) => h.mechanism_type === 'webhook')).toHaveLength(4);
    expect(history.filter((h) => h.mechanism_type === 'email' && h.alert_type === HEALTH)).toHaveLength(8);
    expect(history.filter((h) => h.alert_type === 'notification_email_deprecation')).toHaveLength(1);

    // The receiver refuses (503, Retry-After 1) while origin b fails.
    const firstIds = new Set(hooks().map((h) => h.id));
    receiver.answer = { status: 503, retryAfter: '1' };
    const before = receiver.received.length;
    originB.status = 503;
    await until('two refused attempts', () => (receiver.received.length >= before + 2 ? true : undefined));
    const refused = hooks().slice(4);
    expect(refused.map((h) => h.body.alert_event)).toEqual(['ALERT_STATE_EVENT_START', 'ALERT_STATE_EVENT_START']);
    const eventsBeforeKill = healthEventCount();
    expect(eventsBeforeKill).toBe(6);
    // Killed once the refusals are recorded (an attempt whose answer the server never recorded is only in the history as its resend).
    await until('the refusals in the history', async () => {
      let failed = 0;
      for await (const h of sdk.alerting.history.list({ account_id, per_page: 50 })) if ((h as { outcome?: string }).outcome === 'failed') failed++;
      return failed >= 2 ? true : undefined;
    });

    // SIGKILL with the retries pending; restart; the receiver accepts again.
    s.child.kill('SIGKILL');
    await s.exited;
    receiver.answer = { status: 200 };
    s = await serve();
    sdk = sdkClient(s.url, cred);
    const refusedIds = new Set(refused.map((h) => h.id));
    await until(
      'the refused notifications, delivered after the restart',
      () => {
        const ok = receiver.received.slice(before + 2).filter((r) => refusedIds.has(String(r.headers['webhook-id'])));
        return new Set(ok.map((r) => String(r.headers['webhook-id']))).size === 2 ? true : undefined;
      },
      20_000,
    );
    // A few probe intervals after the restart: origin b is still unhealthy, and that is no new edge.
    await new Promise((r) => setTimeout(r, 3000));
    expect(healthEventCount()).toBe(eventsBeforeKill);

    const all = hooks();
    // Only retries of one id repeat, with the same body; no notification of the first phase came again.
    const bodies = new Map<string, string>();
    for (const h of all) {
      if (bodies.has(h.id)) expect(h.raw).toBe(bodies.get(h.id));
      bodies.set(h.id, h.raw);
      expect(h.signed).toBe(true);
    }
    expect(all.filter((h) => firstIds.has(h.id))).toHaveLength(4);
    expect([...bodies.keys()].filter((id) => !firstIds.has(id)).sort()).toEqual([...refusedIds].sort());
    // An email comes again only as a retry of its notification (its Message-ID is the outbox id): same recipient, same subject.
    const byMessageId = new Map<string, string>();
    for (const m of mails) {
      const key = `${to(m).join(',')} ${m.subject}`;
      expect(byMessageId.get(m.messageId!) ?? key).toBe(key);
      byMessageId.set(m.messageId!, key);
    }
    // The emails of origin b's failure went out too, once each; the deprecation notice did not come again after the restart.
    await until('origin b emails', () => (mailsTo(POLICY_ADDRESS, /Origin b .* is Unhealthy/).length >= 1 && mailsTo(LEGACY_ADDRESS, /Origin b .* is Unhealthy/).length >= 1 ? true : undefined)).catch(diagnose(s));
    expect(distinct(mailsTo(POLICY_ADDRESS, /Origin b .* is Unhealthy/))).toBe(1);
    expect(distinct(mailsTo(LEGACY_ADDRESS, /deprecated/))).toBe(1);
    // Every email of the test: 4 + 4 (a's failure and recovery, policy and legacy), 1 deprecation notice, 4 of b's failure.
    await until('the emails of b failing', () => (distinct(mails) >= 13 ? true : undefined)).catch(diagnose(s));
    expect(distinct(mails)).toBe(13);
    // The history has, for each refused notification, its failed attempts (503) and then its delivery, under one notification id.
    const afterHistory: { notification_id: string; outcome: string; attempt: number; status_code: number | null }[] = [];
    for await (const h of sdk.alerting.history.list({ account_id, per_page: 50 })) afterHistory.push(h as never);
    for (const id of refusedIds) {
      const attempts = afterHistory.filter((h) => h.notification_id === id).sort((a, b) => a.attempt - b.attempt);
      expect(attempts[0]).toMatchObject({ attempt: 1, outcome: 'failed', status_code: 503 });
      expect(attempts.at(-1)).toMatchObject({ outcome: 'delivered', status_code: 200 });
      expect(attempts.slice(0, -1).every((a) => a.outcome === 'failed')).toBe(true);
      expect(attempts.length).toBe(receiver.received.filter((r) => r.headers['webhook-id'] === id).length);
    }
    // The destination remembers its last success after its last failure.
    const dest = (await sdk.alerting.destinations.webhooks.get(hook.id!, { account_id })) as { last_success?: string; last_failure?: string };
    expect(Date.parse(dest.last_success!)).toBeGreaterThan(Date.parse(dest.last_failure!));

    // Origin b recovers while the receiver holds the POSTs open; the server is SIGKILLed mid-delivery and restarted.
    receiver.answer = 'hang';
    const held = receiver.received.length;
    originB.status = 200;
    await until('two END webhooks held open', () => (receiver.received.length >= held + 2 ? true : undefined));
    const heldIds = new Set(receiver.received.slice(held).map((r) => String(r.headers['webhook-id'])));
    expect(heldIds.size).toBe(2);
    s.child.kill('SIGKILL');
    await s.exited;
    receiver.answer = { status: 200 };
    const restarted = Date.now();
    s = await serve();
    // The new process sees that the lease holder is dead: resent at once (not after the 60 s lease), with the same ids.
    await until('the held notifications, resent after the restart', () => (new Set(receiver.received.slice(held + 2).map((r) => String(r.headers['webhook-id']))).size === 2 ? true : undefined), 10_000).catch(diagnose(s));
    console.log(`e2e: notifications held at the SIGKILL resent ${Date.now() - restarted} ms after the restart began`);
    const resent = receiver.received.slice(held + 2).map((r) => ({ id: String(r.headers['webhook-id']), body: JSON.parse(r.body) as HookBody }));
    expect(new Set(resent.map((r) => r.id))).toEqual(heldIds);
    // END closes the incident opened before the previous restart: the correlation id survived two SIGKILLs.
    for (const r of resent) {
      expect(r.body.alert_event).toBe('ALERT_STATE_EVENT_END');
      expect(r.body.alert_correlation_id).toBe(refused.find((h) => h.body.data.event_source === r.body.data.event_source)!.body.alert_correlation_id);
    }
    expect(healthEventCount()).toBe(eventsBeforeKill + 2);
  }, 90_000);
});
