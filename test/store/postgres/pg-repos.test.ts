// The PostgreSQL repositories of lists, load balancing, alerting and the
// outbox against a throwaway cluster, each call inside one db.write with a
// context built here, and the same calls on a SQLite store side by side: the
// oracle is SQLite's answer (ids and stamps, random or timed, are compared by
// where they first appear, so a row that should carry the id of another
// does). Then what only concurrency shows: two claimers of the outbox never
// get one row; a bulk operation whose connection is killed mid-way leaves
// nothing half-done and runs whole when resumed.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MoatError } from '../../../src/errors/index.js';
import { FieldErrors, PgAlertingRepo, PgOutboxRepo, sqliteNotifyRepos } from '../../../src/notify/index.js';
import {
  Database,
  newId,
  PgDatabase,
  PgListsRepo,
  PgLoadBalancingRepo,
  SqliteStore,
  type HealthEvent,
  type OriginHealthRow,
  type PgClient,
  type PgRepoContext,
  type ProbeRecord,
  type Repos,
  type TxHealthEventListener,
} from '../../../src/store/index.js';
import { requirePostgres, usePostgres } from '../../support/postgres.js';

const RUN = requirePostgres();
const cluster = usePostgres(RUN);

/** The four repositories under test, over one transaction's client. */
type Four = Pick<Repos, 'lists' | 'loadBalancing' | 'alerting' | 'outbox'>;

interface Side {
  run<T>(fn: (r: Four) => Promise<T>): Promise<T>;
  onHealthEvent(l: TxHealthEventListener): void;
  onPoolsWritten(l: () => void): void;
}

/** A context for one transaction: the four repositories, their listeners, callbacks run after commit. */
function context(client: PgClient, health: TxHealthEventListener[], pools: (() => void)[], after: (() => void)[]): { ctx: PgRepoContext; repos: Four } {
  const repos = {} as { -readonly [K in keyof Four]: Four[K] };
  const ctx: PgRepoContext = { client, tx: repos as unknown as Repos, healthListeners: health, afterCommit: (fn) => after.push(fn) };
  repos.lists = new PgListsRepo(ctx);
  repos.loadBalancing = new PgLoadBalancingRepo(ctx, pools);
  repos.alerting = new PgAlertingRepo(ctx);
  repos.outbox = new PgOutboxRepo(ctx);
  return { ctx, repos };
}

function pgSide(db: PgDatabase): Side {
  const health: TxHealthEventListener[] = [];
  const pools: (() => void)[] = [];
  return {
    async run(fn) {
      let after: (() => void)[] = [];
      const v = await db.write((client) => {
        after = [];
        return fn(context(client, health, pools, after).repos);
      });
      for (const f of after) f();
      return v;
    },
    onHealthEvent: (l) => health.push(l),
    onPoolsWritten: (l) => pools.push(l),
  };
}

function sqliteSide(store: SqliteStore): Side {
  return { run: (fn) => store.write((tx) => fn(tx)), onHealthEvent: (l) => store.onHealthEvent(l), onPoolsWritten: (l) => store.onPoolsWritten(l) };
}

/**
 * Ids (32 hex) become #1, #2 ... in order of first appearance, stamps become
 * STAMP, wherever they are in a string: two transcripts are equal when they
 * have the same shape and the same identities in the same places.
 */
function normalise(v: unknown): unknown {
  const ids = new Map<string, string>();
  const text = (s: string) =>
    s
      .replace(/[0-9a-f]{32}/g, (id) => {
        if (!ids.has(id)) ids.set(id, `#${ids.size + 1}`);
        return ids.get(id)!;
      })
      .replace(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z/g, 'STAMP');
  const walk = (x: unknown): unknown => {
    if (typeof x === 'string') return text(x);
    if (Array.isArray(x)) return x.map(walk);
    if (x instanceof Map) return { map: [...x.entries()].map(([k, val]) => [walk(k), walk(val)]) };
    if (x instanceof Set) return { set: [...x].map(walk).sort() };
    if (Buffer.isBuffer(x)) return { buffer: x.toString('hex') };
    if (x instanceof Error) return { thrown: text(x.message) };
    if (x !== null && typeof x === 'object') return Object.fromEntries(Object.entries(x).map(([k, val]) => [k, walk(val)]));
    return x;
  };
  return walk(v);
}

/** What a call gave: its value, or its error's code, message and pointer (FieldErrors: each). */
async function outcome(p: Promise<unknown>): Promise<unknown> {
  try {
    return { ok: await p };
  } catch (err) {
    if (err instanceof FieldErrors) return { fieldErrors: err.errors.map((e) => ({ code: e.code, message: e.message, pointer: e.pointer })) };
    // A driver's own error (a constraint, not a registry code) is one on either backend: the API answers 500 for both.
    if (!(err instanceof MoatError)) return { driverError: true };
    return { error: { code: err.code, message: err.message, pointer: err.pointer } };
  }
}

const ACCOUNT = 'a'.repeat(32);
const pool = (name: string, email = '') => ({ name, origins: [{ name: 'a', address: '192.0.2.1', enabled: true }], minimum_origins: 1, notification_email: email, notification_filter: null });

async function listsScript(s: Side): Promise<unknown[]> {
  const t: unknown[] = [];
  const step = async (fn: (r: Four) => Promise<unknown>) => t.push(await outcome(s.run(fn)));
  await step((r) => r.lists.create(ACCOUNT, { name: 'blocked', kind: 'ip', description: 'd' }, 3));
  await step((r) => r.lists.create(ACCOUNT, { name: 'allowed', kind: 'ip', description: '' }, 3));
  await step((r) => r.lists.create(ACCOUNT, { name: 'blocked', kind: 'ip', description: '' }, 3));
  await step((r) => r.lists.create(ACCOUNT, { name: 'third', kind: 'ip', description: '' }, 2));
  const [l1] = (await s.run((r) => r.lists.all(ACCOUNT)));
  const id = l1!.id;
  await step((r) => r.lists.contentKey(ACCOUNT, 'blocked'));
  const append = [
    { ip: '10.0.0.0/8', comment: 'ten' },
    { ip: '192.0.2.7' },
    { ip: '2001:db8::/32', comment: 'v6' },
    { ip: '192.0.2.7', comment: 'given twice' },
    { ip: '198.51.100.0/24' },
    { ip: '203.0.113.9', comment: 'last' },
  ];
  const op1 = await s.run((r) => r.lists.enqueue(ACCOUNT, id, 'append', append));
  await step((r) => r.lists.operation(ACCOUNT, op1));
  await step((r) => r.lists.nextOperation());
  await step((r) => r.lists.markRunning(op1));
  await step((r) => r.lists.operation(ACCOUNT, op1));
  await step((r) => r.lists.applyOperation(op1, 100));
  await step((r) => r.lists.operation(ACCOUNT, op1));
  await step((r) => r.lists.nextOperation());
  await step((r) => r.lists.contentKey(ACCOUNT, 'blocked'));
  // Pages forwards and backwards, a search, a bad cursor.
  const p1 = await s.run((r) => r.lists.items(ACCOUNT, id, { perPage: 2 }));
  t.push(p1);
  const p2 = await s.run((r) => r.lists.items(ACCOUNT, id, { perPage: 2, cursor: p1.after }));
  t.push(p2);
  t.push(await s.run((r) => r.lists.items(ACCOUNT, id, { perPage: 2, cursor: p2.after })));
  t.push(await s.run((r) => r.lists.items(ACCOUNT, id, { perPage: 2, cursor: p2.before })));
  await step((r) => r.lists.items(ACCOUNT, id, { perPage: 10, search: '192.' }));
  await step((r) => r.lists.items(ACCOUNT, id, { perPage: 10, cursor: 'bm90IG91cnM' }));
  await step((r) => r.lists.item(ACCOUNT, id, p1.items[0]!.id));
  await step((r) => r.lists.item(ACCOUNT, id, newId()));
  await step((r) => r.lists.entries(ACCOUNT, 'blocked'));
  // Replace keeps the ids of what stays; a bad item fails the operation and changes nothing; so does one past the cap.
  const op2 = await s.run((r) => r.lists.enqueue(ACCOUNT, id, 'replace', [{ ip: '192.0.2.7', comment: 'kept' }, { ip: '192.0.2.8' }]));
  await step((r) => r.lists.applyOperation(op2, 100));
  await step((r) => r.lists.items(ACCOUNT, id, { perPage: 10 }));
  const op3 = await s.run((r) => r.lists.enqueue(ACCOUNT, id, 'append', [{ ip: '192.0.2.9' }, { ip: '10.0.0.1/8' }]));
  await step((r) => r.lists.applyOperation(op3, 100));
  await step((r) => r.lists.operation(ACCOUNT, op3));
  const op4 = await s.run((r) => r.lists.enqueue(ACCOUNT, id, 'append', [{ ip: '192.0.2.10' }, { ip: '192.0.2.11' }]));
  await step((r) => r.lists.applyOperation(op4, 3));
  await step((r) => r.lists.operation(ACCOUNT, op4));
  const items = (await s.run((r) => r.lists.items(ACCOUNT, id, { perPage: 10 }))).items;
  const op5 = await s.run((r) => r.lists.enqueue(ACCOUNT, id, 'delete', [items[0]!.id, newId()]));
  await step((r) => r.lists.applyOperation(op5, 100));
  await step((r) => r.lists.entries(ACCOUNT, 'blocked'));
  await step((r) => r.lists.updateDescription(ACCOUNT, id, 'new words'));
  await step((r) => r.lists.updateDescription(ACCOUNT, newId(), 'x'));
  await step((r) => r.lists.contentKey(ACCOUNT, 'blocked'));
  await step((r) => r.lists.all(ACCOUNT));
  await step(async (r) => [...(await r.lists.accountListNames(ACCOUNT))].sort());
  // Managed lists.
  await step((r) => r.lists.loadManaged('$cf.malware', ['192.0.2.0/24', '10.0.0.1', '10.0.0.1', '2001:db8::..2001:db8::ff'], 'malware'));
  await step((r) => r.lists.managedEntries('svc.malware'));
  await step((r) => r.lists.contentKey(ACCOUNT, '$cf.malware'));
  await step((r) => r.lists.loadManaged('$cf.malware', ['192.0.2.0/24'], 'again'));
  await step((r) => r.lists.contentKey(ACCOUNT, '$cf.malware'));
  await step((r) => r.lists.loadManaged('nope', [], ''));
  // A queued operation fails when its list is deleted.
  const op6 = await s.run((r) => r.lists.enqueue(ACCOUNT, id, 'append', [{ ip: '192.0.2.50' }]));
  await step((r) => r.lists.delete(ACCOUNT, id));
  await step((r) => r.lists.operation(ACCOUNT, op6));
  await step((r) => r.lists.get(ACCOUNT, id));
  await step((r) => r.lists.entries(ACCOUNT, 'blocked'));
  await step((r) => r.lists.operation(ACCOUNT, newId()));
  return t;
}

/** A probe that turns origin "a" of `poolId` unhealthy: an origin event, then the pool's, at one stamp. */
function probeDown(poolId: string): ProbeRecord {
  return {
    poolId,
    decide: (origins, before) => {
      const origin: OriginHealthRow = { poolId, originName: 'a', address: '192.0.2.1', health: 'unhealthy', ups: 0, downs: (origins.get('a')?.downs ?? 0) + 1, failureReason: 'HTTP 503', responseCode: 503, rttMs: 1.5, checkedOn: '2026-01-01T00:00:00.000000Z' };
      const base = { accountId: ACCOUNT, pool: { id: poolId, name: 'p', notificationEmail: '', notificationFilter: null }, newHealth: 'unhealthy' as const, reason: 'HTTP 503', at: '2026-01-01T00:00:00.000000Z' };
      const events: HealthEvent[] = [
        { ...base, id: newId(), eventSource: 'origin', origin: { name: 'a', address: '192.0.2.1' }, oldHealth: origins.get('a')?.health ?? null },
        { ...base, id: newId(), eventSource: 'pool', oldHealth: before },
      ];
      return { origin, poolHealth: 'unhealthy', events };
    },
  };
}

async function loadBalancingScript(s: Side): Promise<unknown[]> {
  const t: unknown[] = [];
  let written = 0;
  s.onPoolsWritten(() => written++);
  s.onHealthEvent(async (e, tx) => {
    if (e.eventSource === 'pool') await tx.outbox.startIncident(e.accountId, e.pool.id, e.id);
    if (e.pool.name === 'p' && e.oldHealth === 'unhealthy') throw new Error('listener refuses');
  });
  const step = async (fn: (r: Four) => Promise<unknown>) => t.push(await outcome(s.run(fn)));
  const m = await s.run((r) => r.loadBalancing.createMonitor(ACCOUNT, { type: 'http', path: '/' }));
  t.push(m);
  await step((r) => r.loadBalancing.monitors(ACCOUNT));
  await step((r) => r.loadBalancing.updateMonitor(ACCOUNT, m.id, (b) => ({ ...b, path: '/health' })));
  await step((r) => r.loadBalancing.updateMonitor(ACCOUNT, newId(), (b) => b));
  const pB = await s.run((r) => r.loadBalancing.createPool(ACCOUNT, 'b-pool', m.id, pool('b-pool', 'ops@example.com')));
  const pA = await s.run((r) => r.loadBalancing.createPool(ACCOUNT, 'B-pool', null, pool('B-pool')));
  const pC = await s.run((r) => r.loadBalancing.createPool(ACCOUNT, 'a-pool', m.id, { ...pool('a-pool'), enabled: false }));
  t.push(pB, pA, pC, written);
  await step((r) => r.loadBalancing.createPool(ACCOUNT, 'x', newId(), pool('x')));
  await step((r) => r.loadBalancing.pools(ACCOUNT, 0, 2));
  await step((r) => r.loadBalancing.pools(ACCOUNT, 2, 2));
  await step((r) => r.loadBalancing.pools(ACCOUNT, 0, 10, m.id));
  await step((r) => r.loadBalancing.poolExists(ACCOUNT, pA.id));
  await step((r) => r.loadBalancing.poolExists(newId(), pA.id));
  await step((r) => r.loadBalancing.updatePool(ACCOUNT, pA.id, (c) => ({ name: 'B-pool', monitorId: m.id, body: { ...c.body, description: 'now monitored' } })));
  await step((r) => r.loadBalancing.updatePool(ACCOUNT, pA.id, (c) => ({ name: c.name, monitorId: newId(), body: c.body })));
  await step((r) => r.loadBalancing.legacyPools());
  await step((r) => r.loadBalancing.bulkSetNotificationEmail(ACCOUNT, 1, 1, 'noc@example.com'));
  await step((r) => r.loadBalancing.legacyPools());
  await step((r) => r.loadBalancing.changeFingerprint());
  // Sorted by name here: the repository orders them by id, which is random, so differs between the two runs.
  await step(async (r) => (await r.loadBalancing.monitoredPools()).sort((x, y) => (x.pool.name < y.pool.name ? -1 : 1)));
  await step((r) => r.loadBalancing.deleteMonitor(ACCOUNT, m.id));
  // Probes: p's second probe is refused by the listener and rolled back alone.
  const p = await s.run((r) => r.loadBalancing.createPool(ACCOUNT, 'p', null, pool('p')));
  await step((r) => r.loadBalancing.recordProbes([probeDown(p.id), probeDown(pB.id), probeDown(newId())]));
  await step((r) => r.loadBalancing.recordProbes([probeDown(p.id), probeDown(pA.id)]));
  await step((r) => r.loadBalancing.originHealth(p.id));
  await step((r) => r.loadBalancing.poolHealth(p.id));
  await step((r) => r.loadBalancing.poolHealth(pC.id));
  await step((r) => r.outbox.openIncident(ACCOUNT, p.id));
  await step((r) => r.outbox.openIncident(ACCOUNT, pA.id));
  await step((r) => r.loadBalancing.healthEvents(ACCOUNT));
  await step((r) => r.loadBalancing.markStale());
  await step((r) => r.loadBalancing.originHealth(pB.id));
  await step((r) => r.loadBalancing.deletePool(ACCOUNT, pC.id));
  await step((r) => r.loadBalancing.deletePool(ACCOUNT, pC.id));
  await step((r) => r.loadBalancing.monitor(ACCOUNT, m.id));
  t.push(written);
  return t;
}

async function alertingScript(s: Side): Promise<unknown[]> {
  const t: unknown[] = [];
  const step = async (fn: (r: Four) => Promise<unknown>) => t.push(await outcome(s.run(fn)));
  const pl = await s.run((r) => r.loadBalancing.createPool(ACCOUNT, 'p', null, pool('p')));
  const w1 = await s.run((r) => r.alerting.insertWebhook(ACCOUNT, { name: 'ops', url: new URL('https://hooks.example/a'), secret: 's3cret' }));
  const w2 = await s.run((r) => r.alerting.insertWebhook(ACCOUNT, { name: 'Dev', url: new URL('https://hooks.example/b'), secret: undefined }));
  await step((r) => r.alerting.webhooks(ACCOUNT));
  const good = { name: 'pools', alert_type: 'load_balancing_health_alert', enabled: true, filters: { pool_id: [pl.id] }, mechanisms: { email: [{ id: 'ops@example.com' }], webhooks: [{ id: w1 }] } };
  const pol = await s.run((r) => r.alerting.createPolicy(ACCOUNT, good));
  await s.run((r) => r.alerting.createPolicy(ACCOUNT, { ...good, name: 'Another', enabled: false, mechanisms: { webhooks: [{ id: w2 }] } }));
  await step((r) => r.alerting.createPolicy(ACCOUNT, { name: '', alert_type: 'nope', enabled: 'yes', filters: { pool_id: [newId()] }, mechanisms: { webhooks: [{ id: newId() }], pagerduty: [] }, extra: 1 }));
  await step((r) => r.alerting.createPolicy(ACCOUNT, { ...good, filters: { pool_id: [pl.id, pl.id] } }));
  await step((r) => r.alerting.policies(ACCOUNT));
  await step((r) => r.alerting.policy(ACCOUNT, pol));
  await step((r) => r.alerting.policy(ACCOUNT, newId()));
  await step((r) => r.alerting.enabledPolicies(ACCOUNT, 'load_balancing_health_alert'));
  await step((r) => r.alerting.updatePolicy(ACCOUNT, pol, { description: 'changed', alert_interval: '30m' }));
  await step((r) => r.alerting.policy(ACCOUNT, pol));
  await step((r) => r.alerting.updatePolicy(ACCOUNT, newId(), {}));
  await step((r) => r.alerting.deleteWebhook(ACCOUNT, w1));
  await step((r) => r.alerting.updateWebhook(ACCOUNT, w1, { name: 'ops2', url: new URL('https://hooks.example/c'), secret: undefined }));
  await step((r) => r.alerting.webhookSecret(ACCOUNT, w1));
  await step((r) => r.alerting.updateWebhook(ACCOUNT, w1, { name: 'ops2', url: new URL('https://hooks.example/c'), secret: '' }));
  await step((r) => r.alerting.webhookTarget(ACCOUNT, w1));
  await step((r) => r.alerting.markWebhook(w1, true, '2026-01-02T00:00:00.000000Z'));
  await step((r) => r.alerting.markWebhook(w1, false, '2026-01-03T00:00:00.000000Z'));
  await step((r) => r.alerting.webhook(ACCOUNT, w1));
  await step((r) => r.alerting.webhook(ACCOUNT, newId()));
  await step((r) => r.alerting.deletePolicy(ACCOUNT, pol));
  await step((r) => r.alerting.deletePolicy(ACCOUNT, pol));
  await step((r) => r.alerting.deleteWebhook(ACCOUNT, w1));
  await step((r) => r.alerting.webhooks(ACCOUNT));
  return t;
}

const payload = (n: number) => JSON.stringify({ name: `policy ${n}`, description: 'd', alert_type: 'load_balancing_health_alert', text: `text ${n}`, subject: 's', ...(n % 2 === 0 ? { body: { n } } : {}) });
const NOW = 1_800_000_000_000;

async function outboxScript(s: Side): Promise<unknown[]> {
  const t: unknown[] = [];
  const step = async (fn: (r: Four) => Promise<unknown>) => t.push(await outcome(s.run(fn)));
  const ev = newId();
  for (let i = 0; i < 4; i++) {
    await s.run((r) => r.outbox.enqueue({ accountId: ACCOUNT, policyId: null, eventId: ev, mechanismType: i % 2 === 0 ? 'webhook' : 'email', target: `t${i}`, payload: payload(i), nowMs: NOW + i }));
  }
  await step((r) => r.outbox.nextDue());
  const c1 = await s.run((r) => r.outbox.claim('host:1:x', NOW + 10, 1000, 2));
  t.push(c1);
  await step((r) => r.outbox.claim('host:2:y', NOW + 10, 1000, 10));
  await step((r) => r.outbox.record(c1[0]!, NOW + 20, { ok: true, statusCode: 200 }, undefined));
  await step((r) => r.outbox.record(c1[1]!, NOW + 20, { ok: false, statusCode: 503, error: 'HTTP 503', code: 9401 }, NOW + 100));
  await step((r) => r.outbox.nextDue());
  // host:2 died: its two rows come back as interrupted attempts; then a lease that ran out does the same.
  await step((r) => r.outbox.releaseDeadOwners('host', (pid) => pid !== 2, NOW + 30));
  const c2 = await s.run((r) => r.outbox.claim('host:3:z', NOW + 200, 50, 10));
  t.push(c2);
  await step((r) => r.outbox.claim('host:4:w', NOW + 300, 50, 1));
  const c3 = await s.run((r) => r.outbox.claim('host:4:w', NOW + 400, 50, 10));
  await step((r) => r.outbox.record(c3[0]!, NOW + 410, { ok: false, error: 'gone', code: 9403, final: true }, NOW + 500));
  await step((r) => r.outbox.history(ACCOUNT, { page: 1, perPage: 5 }));
  await step((r) => r.outbox.history(ACCOUNT, { page: 2, perPage: 5 }));
  await step((r) => r.outbox.history(ACCOUNT, { page: 1, perPage: 50, since: '2027-01-15T08:00:00.030000Z', before: '2027-01-15T08:00:00.410000Z' }));
  await step((r) => r.outbox.prune(NOW + 91 * 86_400_000));
  await step((r) => r.outbox.history(ACCOUNT, { page: 1, perPage: 50 }));
  await step((r) => r.outbox.startIncident(ACCOUNT, 'pool:1', ev));
  await step((r) => r.outbox.startIncident(ACCOUNT, 'pool:1', ev).then(() => 'started twice'));
  await step((r) => r.outbox.openIncident(ACCOUNT, 'pool:1'));
  await step((r) => r.outbox.endIncident(ACCOUNT, 'pool:1'));
  await step((r) => r.outbox.openIncident(ACCOUNT, 'pool:1'));
  await step((r) => r.outbox.recordDeprecationNotice(ACCOUNT, 'Ops@Example.com', 5));
  await step((r) => r.outbox.recordDeprecationNotice(ACCOUNT, 'ops@example.com', 7));
  await step((r) => r.outbox.recordDeprecationNotice(ACCOUNT, 'b@example.com', 1));
  await step((r) => r.outbox.deprecationNotices());
  await step((r) => r.outbox.forgetDeprecationNotice(ACCOUNT, 'OPS@example.com'));
  await step((r) => r.outbox.deprecationNotices());
  return t;
}

describe.skipIf(!RUN)('the PostgreSQL repositories of lists, load balancing, alerting and the outbox', () => {
  let db: PgDatabase;
  let dir: string;
  let sqlite: SqliteStore;
  beforeEach(async () => {
    db = await PgDatabase.connect(await cluster().createDatabase());
    dir = mkdtempSync(join(tmpdir(), 'moat-pg-repos-'));
    sqlite = new SqliteStore(Database.open(dir), sqliteNotifyRepos);
  });
  afterEach(async () => {
    await db.close();
    await sqlite.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Runs a script on both and compares; returns PostgreSQL's transcript, normalised, for the spot checks. */
  async function sameAsSqlite(script: (s: Side) => Promise<unknown[]>): Promise<unknown[]> {
    const onSqlite = normalise(await script(sqliteSide(sqlite))) as unknown[];
    const onPg = normalise(await script(pgSide(db))) as unknown[];
    expect(onPg).toEqual(onSqlite);
    return onPg;
  }

  it('answers every list call as SQLite does: items, pages, bulk operations (failed ones changing nothing), managed lists, generations', async () => {
    const t = await sameAsSqlite(listsScript);
    // Spot checks that the transcripts hold what they should (equal but empty would pass the comparison).
    expect(t.length).toBeGreaterThan(40);
    expect(t[2]).toMatchObject({ error: { code: 7301 } });
    expect(JSON.stringify(t)).toContain('"ip":"192.0.2.7","created_on":"STAMP","modified_on":"STAMP","comment":"given twice"');
    expect(JSON.stringify(t)).toContain('"status":"failed","completed":"STAMP","error":"item 1: \\"10.0.0.1/8\\" has host bits set (did you mean 10.0.0.0/8?)"');
    expect(JSON.stringify(t)).toContain(`"ok":"managed:svc.malware:1"`);
  });

  it('answers every load balancing call as SQLite does, hands health events to the listeners inside each probe\'s savepoint, and tells pool writers after commit', async () => {
    const t = await sameAsSqlite(loadBalancingScript);
    const s = JSON.stringify(t);
    expect(s).toContain('"name":"B-pool"');
    expect(s).toContain('listener refuses');
    expect(s).toContain('"event_source":"origin"');
    // Pools written: 3 creations, then 1 update, 1 bulk, 1 creation, 1 deletion (the failed ones tell nobody).
    expect(t[7]).toBe(3);
    expect(t[t.length - 1]).toBe(7);
  });

  it('answers every alerting call as SQLite does, the policy checks\' errors included', async () => {
    const t = await sameAsSqlite(alertingScript);
    const s = JSON.stringify(t);
    expect(s).toContain('no webhook destination');
    expect(s).toContain('PagerDuty is not supported');
    expect(s).toContain('"code":7704');
  });

  it('answers every outbox call as SQLite does: claims, leases, interrupted attempts, history, incidents, notices', async () => {
    const t = await sameAsSqlite(outboxScript);
    const s = JSON.stringify(t);
    expect(s).toContain('attempt interrupted: the process delivering it (host:2:y)');
    expect(s).toContain('"outcome":"gave_up"');
  });

  it('gives two claimers of the outbox at once different rows, each waiting for nothing (SKIP LOCKED)', async () => {
    const side = pgSide(db);
    for (const isolation of ['read committed', 'serializable'] as const) {
      await db.query("UPDATE alert_outbox SET status = 'delivered'");
      for (let i = 0; i < 10; i++) {
        await side.run((r) => r.outbox.enqueue({ accountId: ACCOUNT, policyId: null, eventId: newId(), mechanismType: 'webhook', target: 't', payload: payload(i), nowMs: NOW + i }));
      }
      // A holds its claim open (its rows locked) while B claims: B must not wait for A, nor take A's rows.
      let releaseA!: () => void;
      const holdA = new Promise<void>((r) => (releaseA = r));
      let claimedA!: () => void;
      const aClaimed = new Promise<void>((r) => (claimedA = r));
      const now = NOW + 1000 * (isolation === 'serializable' ? 10 : 1);
      const a = db.write(async (client) => {
        const rows = await context(client, [], [], []).repos.outbox.claim(`a:${isolation}`, now, 500, 5);
        claimedA();
        await holdA;
        return rows;
      }, { isolation });
      await aClaimed;
      const started = performance.now();
      const b = await db.write((client) => context(client, [], [], []).repos.outbox.claim(`b:${isolation}`, now, 500, 10), { isolation });
      const waited = performance.now() - started;
      releaseA();
      const rowsA = await a;
      expect(rowsA).toHaveLength(5);
      expect(b).toHaveLength(5);
      expect(new Set([...rowsA, ...b].map((r) => r.id)).size).toBe(10);
      expect(waited).toBeLessThan(1000);
    }
  });

  it('leaves nothing of a bulk operation whose connection is killed mid-way, and applies it whole when resumed', async () => {
    const side = pgSide(db);
    const list = await side.run((r) => r.lists.create(ACCOUNT, { name: 'big', kind: 'ip', description: '' }, 10));
    // 12,000 items: three INSERT statements (5,000 a batch), so there is a "mid-way" to kill it at.
    const items = Array.from({ length: 12_000 }, (_, i) => ({ ip: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` }));
    const op = await side.run((r) => r.lists.enqueue(ACCOUNT, list.id, 'append', items));
    await side.run((r) => r.lists.markRunning(op));
    const before = await side.run((r) => r.lists.contentKey(ACCOUNT, 'big'));
    // The client is killed (pg_terminate_backend) right after the first batch of items was inserted.
    let inserts = 0;
    const applying = db.write(async (client) => {
      const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const killing = new Proxy(client, {
        get(target, prop, receiver) {
          if (prop !== 'query') return Reflect.get(target, prop, receiver) as unknown;
          return async (sql: string, params?: unknown[]) => {
            const r = await target.query(sql, params);
            if (sql.includes('INSERT INTO list_items') && ++inserts === 1) await cluster().admin('SELECT pg_terminate_backend($1)', [pid]);
            return r;
          };
        },
      });
      return context(killing, [], [], []).repos.lists.applyOperation(op, 100_000);
    });
    await expect(applying).rejects.toMatchObject({ code: 8021 });
    expect(inserts).toBe(1);
    // Nothing half-done: no item, the list unchanged, the operation still to do.
    expect((await db.query<{ n: number }>('SELECT count(*) AS n FROM list_items'))[0]!.n).toBe(0);
    expect(await side.run((r) => r.lists.contentKey(ACCOUNT, 'big'))).toBe(before);
    expect(await side.run((r) => r.lists.operation(ACCOUNT, op))).toEqual({ id: op, status: 'running' });
    expect(await side.run((r) => r.lists.nextOperation())).toEqual({ id: op, accountId: ACCOUNT, listId: list.id });
    // Resumed: applied whole.
    expect(await side.run((r) => r.lists.applyOperation(op, 100_000))).toBe('completed');
    expect((await side.run((r) => r.lists.get(ACCOUNT, list.id)))!.num_items).toBe(12_000);
    expect(await side.run((r) => r.lists.nextOperation())).toBeUndefined();
  });
});
