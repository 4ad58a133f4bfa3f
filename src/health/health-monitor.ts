// The probe scheduler of `moat serve` (#18 item 7): every enabled origin of
// every enabled pool with a monitor is probed on its monitor's interval, with
// jitter and a bound on probes in flight, and each result goes through the
// origin's state machine (unknown, healthy, unhealthy; flips damped by
// consecutive_up / consecutive_down). Edges of the origin and of its pool are
// recorded as health events with the state, in one transaction, where the
// store hands them to the event listeners (notify's outbox).
//
// The schedule is a min-heap of (pool, origin) keys by due time, rebuilt from
// the store when pools or monitors change (a cheap fingerprint is polled), so
// an edit applies at the origin's next probe. The state lives in the store,
// not in memory: a restart reloads it. On PostgreSQL several replicas share
// the work (issue #20, probe-shares.ts): every replica keeps the whole
// schedule but probes only the origins of the shards it holds a lease on,
// before the lease's local deadline, and records each result fenced by the
// lease's epoch. A shard taken over is probed from its last result's time, so
// an origin is probed once per interval across replicas, neither twice nor
// skipped.

import { MoatError } from '../errors/index.js';
import { newId, nowStamp, type Health, type HealthEvent, type LoadBalancingRepo, type MonitorRow, type OriginHealthRow, type PoolRow, type ProbeRecord } from '../store/index.js';
import { leaseTimeFor, ProbeShares, shardOf } from './probe-shares.js';
import { probe as realProbe, type ProbeMonitor, type ProbeOrigin, type ProbeResult } from './probes.js';

/** Where the monitor reports (the api's RunnerLogger fits). */
export interface HealthLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Settings of the health monitor. */
export interface HealthMonitorOptions {
  store: LoadBalancingRepo;
  logger?: HealthLogger | undefined;
  /** Probes in flight at most (default 256). */
  maxConcurrent?: number | undefined;
  /** How often the store is checked for changed pools or monitors, ms (default 500). */
  refreshMs?: number | undefined;
  /** Results are written together every this many ms (default 50): one commit and fsync per batch, not per probe. */
  flushMs?: number | undefined;
  /** Jitter of each interval, as a fraction (default 0.05: ±5 %, HAProxy's advice). */
  jitter?: number | undefined;
  /** The probe (tests and benchmarks may replace it). */
  probe?: ((m: ProbeMonitor & { retries: number }, o: ProbeOrigin) => Promise<ProbeResult>) | undefined;
  /**
   * Probes shared with other replicas through these leases (a PostgreSQL
   * store); without, this process probes everything (SQLite).
   */
  shares?: ProbeShares | undefined;
  /** Lease time of the shares, ms (default: leaseTimeFor the shortest monitor interval). */
  leaseMs?: number | undefined;
}

interface Target {
  pool: PoolRow;
  monitor: MonitorRow;
  origin: { name: string; address: string; port: number; host?: string | undefined };
}

interface Entry {
  key: string;
  due: number;
  target: Target;
  removed: boolean;
  running: boolean;
}

/** Probe counts and lateness (ms past the due time a probe started), for benchmarks and logs. */
export interface HealthStats {
  probes: number;
  /** The latest lateness samples (up to 65,536). */
  lateness: Float64Array;
  samples: number;
}

const LATENESS_SAMPLES = 65_536;
// Shared answers of owns(): the unshared (SQLite) path allocates nothing more per probe than before.
const OWNED = { ok: true, fence: undefined } as const;
const NOT_OWNED = { ok: false, fence: undefined } as const;

/** The health monitor: a Runner of the control plane. */
export class HealthMonitor {
  readonly name = 'health-monitor';
  private readonly store: LoadBalancingRepo;
  private readonly logger: HealthLogger | undefined;
  private readonly maxConcurrent: number;
  private readonly refreshMs: number;
  private readonly jitter: number;
  private readonly probeFn: NonNullable<HealthMonitorOptions['probe']>;
  private readonly entries = new Map<string, Entry>();
  private heap: Entry[] = [];
  private active = 0;
  private timer: NodeJS.Timeout | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private fingerprint = '';
  private running = false;
  private readonly flushMs: number;
  private pending: { record: ProbeRecord; done: (r: HealthEvent[] | Error) => void }[] = [];
  private flushTimer: NodeJS.Timeout | undefined;
  private readonly stats: HealthStats = { probes: 0, lateness: new Float64Array(LATENESS_SAMPLES), samples: 0 };
  private readonly shares: ProbeShares | undefined;
  private readonly leaseMs: number | undefined;
  /** Shards held whose origins were rescheduled from their last results: only these are probed. */
  private readonly ready = new Set<number>();
  private shareTimer: NodeJS.Timeout | undefined;
  private shareTicks = 0;
  private shareTickInFlight: Promise<void> | undefined;
  /** The shortest interval of the monitors in use, ms (the lease time follows it). */
  private minIntervalMs = 60_000;

  constructor(options: HealthMonitorOptions) {
    this.store = options.store;
    this.logger = options.logger;
    this.maxConcurrent = options.maxConcurrent ?? 256;
    this.refreshMs = options.refreshMs ?? 500;
    this.jitter = options.jitter ?? 0.05;
    this.probeFn = options.probe ?? realProbe;
    this.flushMs = options.flushMs ?? 50;
    this.shares = options.shares;
    this.leaseMs = options.leaseMs;
  }

  /** Queues a result for the next batch; resolves with its events, rejects with its listener's error. */
  private record(record: ProbeRecord): Promise<HealthEvent[]> {
    // After stop the database may be closed: a late result is dropped.
    if (!this.running) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      this.pending.push({ record, done: (r) => (r instanceof Error ? reject(r) : resolve(r)) });
      this.flushTimer ??= setTimeout(() => void this.flush(), this.flushMs);
    });
  }

  /** Writes the queued results in one transaction. */
  private async flush(): Promise<void> {
    this.flushTimer = undefined;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    let results: (HealthEvent[] | Error)[];
    try {
      results = await this.store.recordProbes(batch.map((b) => b.record));
    } catch (err) {
      results = batch.map(() => (err instanceof Error ? err : new Error(String(err))));
    }
    batch.forEach((b, i) => b.done(results[i]!));
  }

  /** Starts probing: the state is reloaded from the store, its latest results marked stale (unknown until probed again). */
  start(): void {
    if (this.running) return;
    this.running = true;
    // markStale is queued before any result can be: the store writes them in that order.
    // Shared: only a replica that finds itself alone does it (at its first tick), not one joining others that keep the results fresh.
    if (this.shares === undefined) this.store.markStale().catch((err: unknown) => this.logger?.error({ err }, 'health monitor: cannot mark the results stale'));
    void this.refresh(true);
    this.refreshTimer = setInterval(() => void this.refresh(false), this.refreshMs);
    this.refreshTimer.unref();
  }

  /**
   * Stops scheduling and writes the results already in. Probes still in
   * flight are not waited for (one may take timeout x (retries + 1), a minute
   * at most, which would hold up a shutdown): their results are dropped, and
   * the next start probes those origins again.
   */
  async stop(): Promise<void> {
    this.running = false;
    if (this.timer !== undefined) clearTimeout(this.timer);
    if (this.refreshTimer !== undefined) clearInterval(this.refreshTimer);
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    if (this.shareTimer !== undefined) clearTimeout(this.shareTimer);
    await this.shareTickInFlight;
    await this.flush();
    // Given back after the last results are written: the others take the shards at their next tick.
    this.ready.clear();
    await this.shares?.release();
  }

  /** The lease time now: given, or from the shortest monitor interval. */
  private leaseTime(): number {
    return this.leaseMs ?? leaseTimeFor(this.minIntervalMs);
  }

  /** One tick of the shares, then the next a third of a lease time later. */
  private scheduleShareTick(ms: number): void {
    if (!this.running || this.shares === undefined) return;
    this.shareTimer = setTimeout(() => {
      this.shareTickInFlight = this.shareTick().finally(() => {
        this.shareTickInFlight = undefined;
        this.scheduleShareTick(Math.max(1, Math.floor(this.leaseTime() / 3)));
      });
    }, ms);
  }

  private async shareTick(): Promise<void> {
    const shares = this.shares!;
    const first = this.shareTicks++ === 0;
    const t = await shares.tick(this.leaseTime(), (shard) => this.busy(shard));
    for (const i of t.lost) this.ready.delete(i);
    for (const i of t.released) this.ready.delete(i);
    if (t.error !== undefined) this.logger?.error({ err: t.error, lost: t.lost }, 'health monitor: cannot renew or take probe shards');
    if (!this.running) return;
    if (first && t.replicas === 1 && t.error === undefined) {
      // Alone at start: the results are from before every replica stopped; unknown until probed again (as on SQLite).
      await this.store.markStale().catch((err: unknown) => this.logger?.error({ err }, 'health monitor: cannot mark the results stale'));
    }
    if (t.acquired.length > 0) await this.takeOver(t.acquired);
    if (t.acquired.length > 0 || t.lost.length > 0 || t.released.length > 0) {
      const report = { owner: shares.owner, shards: shares.heldShards().sort((a, b) => a - b), of: shares.shards, replicas: t.replicas, acquired: t.acquired, released: t.released, lost: t.lost };
      // A lease lost (not renewed in time) means this replica stalled or lost the database: a warning, not routine.
      if (t.lost.length > 0) this.logger?.warn(report, 'health monitor: probe share changed');
      else this.logger?.info(report, 'health monitor: probe share changed');
    }
  }

  /**
   * Reschedules the origins of shards just taken from their last recorded
   * result (a dead replica's schedule, or this replica's own after a
   * restart): next due one interval after it, at once when overdue or never
   * probed. Then the shards are ready, and their origins probed.
   */
  private async takeOver(shards: number[]): Promise<void> {
    const set = new Set(shards);
    const n = this.shares!.shards;
    const byPool = new Map<string, Entry[]>();
    for (const e of this.entries.values()) {
      if (!set.has(shardOf(e.key, n))) continue;
      const list = byPool.get(e.target.pool.id) ?? [];
      list.push(e);
      byPool.set(e.target.pool.id, list);
    }
    const now = performance.now();
    const wall = Date.now();
    for (const [poolId, list] of byPool) {
      let rows: Map<string, OriginHealthRow>;
      try {
        rows = await this.store.originHealth(poolId);
      } catch (err) {
        this.logger?.error({ err, pool: poolId }, 'health monitor: cannot read the last results of a pool taken over; probing its origins now');
        rows = new Map();
      }
      for (const e of list) {
        if (e.running) continue;
        const r = rows.get(e.target.origin.name);
        const last = r?.checkedOn == null ? NaN : Date.parse(r.checkedOn);
        const interval = this.intervalMs(e.target);
        // Wall clocks of replicas may differ a little: the wait is bounded by one interval.
        e.due = Number.isNaN(last) ? now : now + Math.min(interval, Math.max(0, last + interval - wall));
      }
    }
    for (const i of shards) this.ready.add(i);
    heapify(this.heap);
    this.pump();
  }

  /** Whether a probe of the shard is in flight or waiting for its commit. */
  private busy(shard: number): boolean {
    for (const e of this.entries.values()) if (e.running && shardOf(e.key, this.shares!.shards) === shard) return true;
    return false;
  }

  /** Whether this replica probes `key` now, and under which lease (undefined: not shared). */
  private owns(key: string): { ok: boolean; fence: ProbeRecord['fence'] } {
    if (this.shares === undefined) return OWNED;
    const g = this.shares.fenceOf(key);
    if (g === undefined || !this.ready.has(shardOf(key, this.shares.shards))) return NOT_OWNED;
    return { ok: true, fence: { lease: g.name, owner: g.owner, epoch: g.epoch } };
  }

  /** Probe counts and lateness so far. */
  statistics(): HealthStats {
    return this.stats;
  }

  private refreshing = false;

  /** Re-reads the targets when pools or monitors changed (or `force`); one refresh at a time. */
  async refresh(force: boolean): Promise<void> {
    if (!this.running || this.refreshing) return;
    this.refreshing = true;
    let fp: string;
    let monitored: Awaited<ReturnType<LoadBalancingRepo['monitoredPools']>>;
    try {
      fp = await this.store.changeFingerprint();
      if (!force && fp === this.fingerprint) return;
      monitored = await this.store.monitoredPools();
    } catch (err) {
      this.logger?.error({ err }, 'health monitor: cannot read pools');
      return;
    } finally {
      this.refreshing = false;
    }
    if (!this.running) return;
    this.fingerprint = fp;
    const now = performance.now();
    const seen = new Set<string>();
    let minInterval = Infinity;
    for (const { pool, monitor } of monitored) {
      minInterval = Math.min(minInterval, (monitor.body.interval as number) * 1000);
      const origins = (pool.body.origins as { name: string; address: string; enabled: boolean; port: number; header?: Record<string, string[]> }[]).filter((o) => o.enabled);
      for (const o of origins) {
        const key = `${pool.id}/${o.name}`;
        seen.add(key);
        const target: Target = { pool, monitor, origin: { name: o.name, address: o.address, port: o.port, host: hostOf(o.header) } };
        const e = this.entries.get(key);
        if (e !== undefined) {
          e.target = target;
          continue;
        }
        // A new origin's first probe falls anywhere in its first interval, so that a start does not probe everything at once.
        const entry: Entry = { key, due: now + Math.random() * this.intervalMs(target), target, removed: false, running: false };
        this.entries.set(key, entry);
        this.push(entry);
      }
    }
    for (const [key, e] of this.entries) {
      if (!seen.has(key)) {
        e.removed = true;
        this.entries.delete(key);
      }
    }
    this.heap = this.heap.filter((e) => !e.removed);
    heapify(this.heap);
    if (Number.isFinite(minInterval)) this.minIntervalMs = minInterval;
    // The shares are first claimed once the targets are known, so that the origins taken are rescheduled from their results.
    if (this.shares !== undefined && this.shareTicks === 0 && this.shareTimer === undefined) this.scheduleShareTick(0);
    this.pump();
  }

  private intervalMs(t: Target): number {
    return (t.monitor.body.interval as number) * 1000;
  }

  private push(e: Entry): void {
    this.heap.push(e);
    siftUp(this.heap, this.heap.length - 1);
  }

  /** Starts every due probe the concurrency bound allows, then sleeps until the next is due. */
  private pump(): void {
    if (!this.running) return;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    const now = performance.now();
    while (this.active < this.maxConcurrent && this.heap.length > 0 && this.heap[0]!.due <= now) {
      const e = popMin(this.heap)!;
      if (e.removed) continue;
      const own = this.owns(e.key);
      if (!own.ok) {
        // Another replica's now: kept on the schedule, so that this one has it ready should the shard come here (then rescheduled from its last result).
        const interval = this.intervalMs(e.target);
        e.due = e.due + interval < now ? now + interval : e.due + interval;
        this.push(e);
        continue;
      }
      this.run(e, now, own.fence);
    }
    if (this.heap.length > 0 && this.active < this.maxConcurrent) {
      this.timer = setTimeout(() => this.pump(), Math.max(0, this.heap[0]!.due - performance.now()));
    }
  }

  private run(e: Entry, now: number, fence: ProbeRecord['fence']): void {
    e.running = true;
    this.active++;
    const i = this.stats.samples++ % LATENESS_SAMPLES;
    this.stats.lateness[i] = now - e.due;
    const target = e.target;
    const m = target.monitor.body as unknown as ProbeMonitor & { retries: number; consecutive_up: number; consecutive_down: number };
    let released = false;
    // The concurrency bound is on probes, not on their commit: the slot is
    // freed once the probe has its result, while the result waits for the
    // next group commit (holding slots through fsyncs halved the probe rate).
    const release = () => {
      if (released) return;
      released = true;
      this.active--;
      this.stats.probes++;
      this.pump();
    };
    // Errors end in the catch below: nothing rejects past it.
    void this.probeFn(m, target.origin)
      .then((result) => {
        release();
        return this.record({ poolId: target.pool.id, fence, decide: (rows, poolBefore) => decide(target, m, result, rows, poolBefore) });
      })
      .catch((err: unknown) => {
        const listener = !(err instanceof MoatError);
        this.logger?.error(
          { err, pool: target.pool.id, origin: target.origin.name, code: listener ? 9300 : (err as MoatError).code },
          listener ? new MoatError('HEALTH_LISTENER_FAILED', `health event of pool ${target.pool.id} origin ${target.origin.name}: ${(err as Error).message}`).message : 'health monitor: cannot record a probe',
        );
      })
      .finally(() => {
        release();
        e.running = false;
        // The next probe of this origin is scheduled once this one is recorded, so two results of one origin never race.
        if (!e.removed && this.running) {
          // Next due from the schedule, not from the end of the probe, so that slow probes do not drift; a probe late by more than an interval starts a fresh schedule.
          const interval = this.intervalMs(e.target) * (1 + (Math.random() * 2 - 1) * this.jitter);
          const t = performance.now();
          e.due = e.due + interval < t ? t + interval : e.due + interval;
          this.push(e);
          this.pump();
        }
      });
  }
}

/** The origin's Host header ({"Host": [...]} as Cloudflare documents it, or "host"). */
function hostOf(header: Record<string, string[]> | undefined): string | undefined {
  if (header === undefined) return undefined;
  for (const [k, v] of Object.entries(header)) if (k.toLowerCase() === 'host') return v[0];
  return undefined;
}

/** The state machine of one result, and the pool's health after it (pure: tested alone). */
export function decide(
  t: Target,
  m: { consecutive_up: number; consecutive_down: number },
  result: ProbeResult,
  rows: Map<string, OriginHealthRow>,
  poolBefore: Health | null,
): { origin: OriginHealthRow; poolHealth: Health | null; events: HealthEvent[] } {
  const at = nowStamp();
  const prev = rows.get(t.origin.name);
  // A changed address is a new origin as far as health goes.
  const before = prev !== undefined && prev.address === t.origin.address ? prev : undefined;
  const oldHealth = before?.health ?? null;
  // Each result resets the opposite count: only consecutive results flip.
  const ups = result.ok ? Math.min((before?.ups ?? 0) + 1, 1000) : 0;
  const downs = result.ok ? 0 : Math.min((before?.downs ?? 0) + 1, 1000);
  let health = oldHealth;
  // consecutive_up/down of 0 mean 1: one result flips (Cloudflare's default).
  if (result.ok && health !== 'healthy' && ups >= Math.max(1, m.consecutive_up)) health = 'healthy';
  if (!result.ok && health !== 'unhealthy' && downs >= Math.max(1, m.consecutive_down)) health = 'unhealthy';
  const origin: OriginHealthRow = {
    poolId: t.pool.id,
    originName: t.origin.name,
    address: t.origin.address,
    health,
    ups,
    downs,
    failureReason: result.reason,
    responseCode: result.responseCode,
    rttMs: result.rttMs === null ? null : Math.round(result.rttMs * 10) / 10,
    checkedOn: at,
  };
  rows.set(t.origin.name, origin);
  // Pool: healthy when its healthy enabled origins reach minimum_origins;
  // unhealthy when even the unknown ones could not; otherwise unknown.
  const body = t.pool.body as { origins: { name: string; address: string; enabled: boolean }[]; minimum_origins: number; notification_email: string; notification_filter: Record<string, unknown> | null; name: string };
  let healthy = 0;
  let unknown = 0;
  for (const o of body.origins) {
    if (!o.enabled) continue;
    const r = rows.get(o.name);
    const h = r !== undefined && r.address === o.address ? r.health : null;
    if (h === 'healthy') healthy++;
    else if (h === null) unknown++;
  }
  const poolHealth: Health | null = healthy >= body.minimum_origins ? 'healthy' : healthy + unknown < body.minimum_origins ? 'unhealthy' : poolBefore === 'unhealthy' ? 'unhealthy' : null;
  const events: HealthEvent[] = [];
  const pool = { id: t.pool.id, name: body.name, notificationEmail: body.notification_email, notificationFilter: body.notification_filter };
  // Edges only; unknown -> healthy is not one (a start or a new origin settling), unknown -> unhealthy is.
  const edge = (from: Health | null, to: Health | null) => to !== null && from !== to && !(from === null && to === 'healthy');
  if (edge(oldHealth, health)) {
    events.push({
      id: newId(),
      accountId: t.pool.accountId,
      eventSource: 'origin',
      pool,
      origin: { name: t.origin.name, address: t.origin.address },
      oldHealth,
      newHealth: health!,
      reason: health === 'healthy' ? '' : result.reason,
      at,
    });
  }
  if (edge(poolBefore, poolHealth)) {
    events.push({
      id: newId(),
      accountId: t.pool.accountId,
      eventSource: 'pool',
      pool,
      oldHealth: poolBefore,
      newHealth: poolHealth!,
      reason: poolHealth === 'healthy' ? '' : `${healthy} healthy origin${healthy === 1 ? '' : 's'}, fewer than minimum_origins (${body.minimum_origins})`,
      at,
    });
  }
  return { origin, poolHealth: poolHealth ?? poolBefore, events };
}

// A binary min-heap of entries by due time.
function siftUp(h: Entry[], i: number): void {
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (h[parent]!.due <= h[i]!.due) return;
    [h[parent], h[i]] = [h[i]!, h[parent]!];
    i = parent;
  }
}

function siftDown(h: Entry[], i: number): void {
  for (;;) {
    const l = 2 * i + 1;
    const r = l + 1;
    let m = i;
    if (l < h.length && h[l]!.due < h[m]!.due) m = l;
    if (r < h.length && h[r]!.due < h[m]!.due) m = r;
    if (m === i) return;
    [h[m], h[i]] = [h[i]!, h[m]!];
    i = m;
  }
}

function heapify(h: Entry[]): void {
  for (let i = (h.length >> 1) - 1; i >= 0; i--) siftDown(h, i);
}

function popMin(h: Entry[]): Entry | undefined {
  if (h.length === 0) return undefined;
  const top = h[0]!;
  const last = h.pop()!;
  if (h.length > 0) {
    h[0] = last;
    siftDown(h, 0);
  }
  return top;
}
