// The notification outbox shared by `moat serve --database` replicas (real
// processes on a throwaway PostgreSQL cluster) delivering to a real, slow
// webhook receiver: a replica killed with SIGKILL in the middle of deliveries
// loses none of them (another sends them again after the lease, under the same
// id), no notification is in flight from two replicas at once, and a replica
// starting beside a live one frees only the rows of a dead process of its own
// pid space (never a live replica's, even one in another pid namespace).
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { describe, expect, it } from 'vitest';
import { printedCredentials, sdkClient, type ServeProcess } from '../support/api.js';
import { useServeReplicas } from '../support/serve-replicas.js';
import { databaseOf, requirePostgres, usePostgres } from '../support/postgres.js';

const run = requirePostgres();
const cluster = usePostgres(run);
const replicas = useServeReplicas('moat-outbox-replicas-');

/** One request the receiver got: the notification's webhook-id, when it arrived and when it ended (answered, or its connection dropped). */
interface Delivery {
  id: string;
  seq: number;
  start: number;
  end: number;
}

/** A webhook receiver that answers 200 after `delayMs`: deliveries stay in flight that long. */
async function slowReceiver(delayMs: number): Promise<{ url: string; deliveries: Delivery[]; close: () => Promise<void> }> {
  const deliveries: Delivery[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as { seq?: number };
      const d: Delivery = { id: String(req.headers['webhook-id']), seq: body.seq ?? -1, start: Date.now(), end: Number.POSITIVE_INFINITY };
      deliveries.push(d);
      const timer = setTimeout(() => res.end('ok'), delayMs);
      res.on('close', () => {
        clearTimeout(timer);
        d.end = Date.now();
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    deliveries,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** A real SMTP server (smtp-server) that accepts each message `delayMs` after its data: sends stay in flight that long. */
async function slowSmtp(delayMs: number): Promise<{ port: number; deliveries: Delivery[]; close: () => Promise<void> }> {
  const deliveries: Delivery[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onData(stream, _session, cb) {
      const start = Date.now();
      simpleParser(stream)
        .then((m) => {
          const id = /^<([0-9a-f]{32})@notifications\.moat>$/.exec(m.messageId ?? '')?.[1] ?? String(m.messageId);
          const d: Delivery = { id, seq: Number(/^n(\d+)$/.exec(m.subject ?? '')?.[1] ?? -1), start, end: Number.POSITIVE_INFINITY };
          deliveries.push(d);
          setTimeout(() => {
            d.end = Date.now();
            cb();
          }, delayMs);
        })
        .catch(cb);
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.server.address() as AddressInfo).port;
  return { port, deliveries, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

async function serve(url: string, leaseSeconds: number, wrapper: readonly string[] = [], extra: readonly string[] = []): Promise<ServeProcess> {
  return replicas.start(['--database', url, '--allow-private-webhooks', '--notification-lease', String(leaseSeconds), ...extra], { wrapper });
}

async function kill(s: ServeProcess): Promise<void> {
  s.child.kill('SIGKILL');
  await s.exited;
}

/** Queues `n` webhook notifications to destination `target` as the notifier does (one outbox row each, due now); returns their ids by seq. */
async function queue(url: string, accountId: string, target: string, n: number, mechanism: 'webhook' | 'email' = 'webhook'): Promise<string[]> {
  const ids = Array.from({ length: n }, () => randomBytes(16).toString('hex'));
  const now = Date.now();
  const created = new Date(now).toISOString();
  const values: string[] = [];
  const params: unknown[] = [];
  ids.forEach((id, seq) => {
    const payload = { name: 'replicas', description: '', alert_type: 'load_balancing_health_alert', text: `n${seq}`, subject: `n${seq}`, body: { seq, text: `n${seq}` } };
    params.push(id, accountId, `event-${seq}`, mechanism, target, JSON.stringify(payload), created, now);
    const b = params.length - 8;
    values.push(`($${b + 1}, $${b + 2}, NULL, $${b + 3}, $${b + 4}, $${b + 5}, $${b + 6}, $${b + 7}, 'pending', $${b + 8})`);
  });
  await cluster().admin(`INSERT INTO alert_outbox (id, account_id, policy_id, event_id, mechanism_type, target, payload, created, status, next_attempt_ms) VALUES ${values.join(', ')}`, params, databaseOf(url));
  return ids;
}

/** Rows of the outbox still pending under a lease, by owner. */
async function leased(url: string): Promise<{ id: string; lease_owner: string }[]> {
  return cluster().admin("SELECT id, lease_owner FROM alert_outbox WHERE status = 'pending' AND lease_owner IS NOT NULL", [], databaseOf(url));
}

async function until<T>(what: string, f: () => Promise<T | undefined>, timeoutMs: number, everyMs = 25): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

const ownedBy = (s: ServeProcess) => (owner: string) => owner.split(':').at(-2) === String(s.child.pid);

/** Two requests for one notification overlapping in time (both in flight at once). */
function overlapping(deliveries: readonly Delivery[]): [Delivery, Delivery][] {
  const out: [Delivery, Delivery][] = [];
  for (let i = 0; i < deliveries.length; i++) {
    for (let j = i + 1; j < deliveries.length; j++) {
      const a = deliveries[i]!;
      const b = deliveries[j]!;
      if (a.id === b.id && a.start < b.end && b.start < a.end) out.push([a, b]);
    }
  }
  return out;
}


describe.runIf(run)('the notification outbox across replicas killed mid-delivery', () => {
  it('delivers every notification at least once under its id when a replica is killed with SIGKILL mid-send, never twice at once, the dead replica\'s rows taken over after their lease', async () => {
    const url = await cluster().createDatabase('outbox');
    const receiver = await slowReceiver(600);
    try {
      const a = await serve(url, 3);
      const creds = printedCredentials(a);
      const hook = await sdkClient(a.url, creds).alerting.destinations.webhooks.create({ account_id: creds.accountId, name: 'slow', url: receiver.url });
      await serve(url, 3);
      await serve(url, 3);
      const ids = await queue(url, creds.accountId, hook.id!, 60);
      const seqOf = new Map(ids.map((id, seq) => [id, seq]));

      // Kill A while it holds notifications it is sending.
      const held = await until('replica A to hold notifications', async () => {
        const rows = (await leased(url)).filter((r) => ownedBy(a)(r.lease_owner));
        return rows.length > 0 ? rows : undefined;
      }, 15_000, 10);
      await kill(a);
      const killedAt = Date.now();

      const all = await until('every notification delivered', async () => {
        const [r] = await cluster().admin<{ n: string }>("SELECT count(*) AS n FROM alert_outbox WHERE status = 'delivered'", [], databaseOf(url));
        return Number(r!.n) === ids.length ? true : undefined;
      }, 30_000, 100);
      expect(all).toBe(true);
      await until('the receiver to see the last answer', async () => (receiver.deliveries.every((d) => d.end !== Number.POSITIVE_INFINITY) ? true : undefined), 5_000);

      const mine = receiver.deliveries.filter((d) => seqOf.has(d.id));
      // None lost: every notification reached the receiver, each time with its own id and body.
      expect(new Set(mine.map((d) => d.id))).toEqual(new Set(ids));
      for (const d of mine) expect(d.seq).toBe(seqOf.get(d.id));
      // Never in flight from two replicas at once.
      expect(overlapping(mine)).toEqual([]);
      // The rows A held were sent again by B or C, only after their lease (3 s) ran out, under the same id.
      const heldIds = new Set(held.map((r) => r.id));
      const history = await cluster().admin<{ notification_id: string; outcome: string; attempt: string; error: string | null }>(
        'SELECT notification_id, outcome, attempt, error FROM alert_history WHERE notification_id = ANY($1::text[]) ORDER BY rowid',
        [[...heldIds]],
        databaseOf(url),
      );
      for (const id of heldIds) {
        const h = history.filter((r) => r.notification_id === id);
        expect(h.map((r) => r.outcome)).toEqual(['failed', 'delivered']);
        expect(h[0]!.error).toMatch(new RegExp(`attempt interrupted: the process delivering it \\(.*:${a.child.pid}:`));
        const again = mine.filter((d) => d.id === id && d.start >= killedAt);
        expect(again).toHaveLength(1);
        expect(again[0]!.start - killedAt).toBeGreaterThan(1500);
      }
    } finally {
      await receiver.close();
    }
  }, 90_000);

  it('frees at start only the rows of a dead replica of its own pid space: not a live replica\'s on the same host, nor any from another pid namespace', async () => {
    const url = await cluster().createDatabase('orphans');
    // Answers take 8 s (B still sends its rows while the test looks); the lease (20 s) is far longer than the wait for an early release.
    const receiver = await slowReceiver(8000);
    try {
      const a = await serve(url, 20);
      const creds = printedCredentials(a);
      const hook = await sdkClient(a.url, creds).alerting.destinations.webhooks.create({ account_id: creds.accountId, name: 'slow', url: receiver.url });
      const b = await serve(url, 20);
      const ids = await queue(url, creds.accountId, hook.id!, 16);
      // Both replicas hold rows they are sending (8 each: a claim takes as many as a replica sends at once).
      const held = await until('both replicas to hold rows', async () => {
        const rows = await leased(url);
        return rows.filter((r) => ownedBy(a)(r.lease_owner)).length > 0 && rows.filter((r) => ownedBy(b)(r.lease_owner)).length > 0 ? rows : undefined;
      }, 15_000, 10);
      const ofA = held.filter((r) => ownedBy(a)(r.lease_owner)).map((r) => r.id);
      const ofB = held.filter((r) => ownedBy(b)(r.lease_owner)).map((r) => r.id);
      await kill(a);

      // A replica in another pid namespace cannot tell whether A or B lives: it frees nothing.
      const other = await serve(url, 20, ['unshare', '--pid', '--fork', '--kill-child']);
      await new Promise((r) => setTimeout(r, 1500));
      const stillHeld = await leased(url);
      expect(stillHeld.filter((r) => ofA.includes(r.id) && ownedBy(a)(r.lease_owner)).map((r) => r.id).sort()).toEqual([...ofA].sort());
      expect(stillHeld.filter((r) => ofB.includes(r.id) && ownedBy(b)(r.lease_owner)).map((r) => r.id).sort()).toEqual([...ofB].sort());
      await kill(other);

      // A replica of the same pid space frees A's rows at once (long before their lease) and sends them; B's stay B's.
      const startedAt = Date.now();
      await serve(url, 20);
      await until("A's rows sent again", async () => (ofA.every((id) => receiver.deliveries.some((d) => d.id === id && d.start >= startedAt)) ? true : undefined), 10_000);
      expect(Date.now() - startedAt).toBeLessThan(10_000);
      await until('every notification delivered', async () => {
        const [r] = await cluster().admin<{ n: string }>("SELECT count(*) AS n FROM alert_outbox WHERE status = 'delivered'", [], databaseOf(url));
        return Number(r!.n) === ids.length ? true : undefined;
      }, 20_000, 100);
      // B's rows were sent once each, by B: never freed, never sent twice.
      for (const id of ofB) expect(receiver.deliveries.filter((d) => d.id === id)).toHaveLength(1);
      expect(overlapping(receiver.deliveries)).toEqual([]);
    } finally {
      await receiver.close();
    }
  }, 90_000);

  it('sends every email at least once, with its Message-ID, when a replica is killed with SIGKILL mid-SMTP, never two replicas at once', async () => {
    const url = await cluster().createDatabase('smtp');
    const sink = await slowSmtp(600);
    try {
      const smtp = ['--smtp-url', `smtp://127.0.0.1:${sink.port}`];
      const a = await serve(url, 3, [], smtp);
      const creds = printedCredentials(a);
      await serve(url, 3, [], smtp);
      const ids = await queue(url, creds.accountId, 'ops@example.com', 40, 'email');
      const seqOf = new Map(ids.map((id, seq) => [id, seq]));
      await until('replica A to hold emails', async () => ((await leased(url)).some((r) => ownedBy(a)(r.lease_owner)) ? true : undefined), 15_000, 10);
      await kill(a);
      await until('every email sent', async () => {
        const [r] = await cluster().admin<{ n: string }>("SELECT count(*) AS n FROM alert_outbox WHERE status = 'delivered'", [], databaseOf(url));
        return Number(r!.n) === ids.length ? true : undefined;
      }, 30_000, 100);
      expect(new Set(sink.deliveries.map((d) => d.id))).toEqual(new Set(ids));
      for (const d of sink.deliveries) expect(d.seq).toBe(seqOf.get(d.id));
      expect(overlapping(sink.deliveries)).toEqual([]);
      const [h] = await cluster().admin<{ n: string }>("SELECT count(*) AS n FROM alert_history WHERE error LIKE '%attempt interrupted%'", [], databaseOf(url));
      expect(Number(h!.n)).toBeGreaterThan(0);
    } finally {
      await sink.close();
    }
  }, 90_000);
});
