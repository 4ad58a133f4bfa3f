// Named leases in a table (moat_leases): how replicas share background work so
// that each piece runs on one replica at a time, and a dead replica's share is
// taken over once its lease runs out.
//
// Why a table and not session advisory locks: an advisory lock lives as long
// as its connection, and that is both too short and too long. Too short: a
// blip (a pooler or the server restarting, a failover) drops every lock of
// every replica at once, and the work stampedes to whoever reconnects first.
// Too long: a replica whose host died or was cut off keeps its locks until
// the server's TCP keepalive notices, two hours by default. A lease has an
// expiry on the server's clock (replicas' clocks need not agree), so takeover
// comes within one lease time, whatever failed; its holder knows when its
// right ends (it stops work at its local deadline, counted from before its
// request was sent) rather than learning it from a failed query; it works
// through any connection of the pool, or a transaction pooler; and
// `SELECT * FROM moat_leases` shows who does what. The epoch, bumped at each
// change of owner, is a fencing token: a write can check it
// (`... WHERE EXISTS (SELECT 1 FROM moat_leases WHERE name = $1 AND epoch = $2)`)
// so that a holder that overslept its deadline cannot write over its successor.

import { performance } from 'node:perf_hooks';
import type { PgDatabase } from './pg-database.js';

/** A lease held: valid until `deadline` (performance.now() clock) unless renewed. */
export interface LeaseGrant {
  readonly name: string;
  readonly owner: string;
  /** Fencing token: grows each time the lease changes owner (or is taken again after running out). */
  readonly epoch: number;
  /** performance.now() after which the holder must consider the lease lost. */
  readonly deadline: number;
}

/** Who holds a lease, as the database says. */
export interface LeaseHolder {
  owner: string;
  epoch: number;
  /** Milliseconds left (negative: ran out, takeable). */
  remainingMs: number;
}

function checkTtl(ttlMs: number): void {
  if (!Number.isInteger(ttlMs) || ttlMs < 1) throw new RangeError(`lease time ${ttlMs} ms: give a whole number of milliseconds, at least 1`);
}

/** The leases of one database. */
export class Leases {
  constructor(private readonly db: PgDatabase) {}

  /**
   * Claims `name` for `owner` for `ttlMs`: granted when nobody holds it, when
   * its lease ran out (taken over: the epoch grows), or when `owner` holds it
   * already (renewed, same epoch). Undefined when another owner holds a live
   * lease. One statement: two owners claiming at once never both win.
   */
  async acquire(name: string, owner: string, ttlMs: number): Promise<LeaseGrant | undefined> {
    checkTtl(ttlMs);
    const sent = performance.now();
    const rows = await this.db.query<{ epoch: number }>(
      `INSERT INTO moat_leases AS l (name, owner, epoch, acquired_at, expires_at)
       VALUES ($1, $2, 1, clock_timestamp(), clock_timestamp() + $3 * interval '1 millisecond')
       ON CONFLICT (name) DO UPDATE SET
         owner = EXCLUDED.owner,
         epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() THEN l.epoch ELSE l.epoch + 1 END,
         acquired_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() THEN l.acquired_at ELSE clock_timestamp() END,
         expires_at = EXCLUDED.expires_at
       WHERE l.owner = EXCLUDED.owner OR l.expires_at <= clock_timestamp()
       RETURNING epoch`,
      [name, owner, ttlMs],
    );
    return rows.length === 0 ? undefined : { name, owner, epoch: rows[0]!.epoch, deadline: sent + ttlMs };
  }

  /**
   * Extends a lease still held (same owner and epoch, not run out) by `ttlMs`
   * from now. Undefined when it was lost: it ran out (even if nobody took it:
   * the holder may have stopped work at its deadline; acquire() again) or
   * another owner has it.
   */
  async renew(grant: LeaseGrant, ttlMs: number): Promise<LeaseGrant | undefined> {
    checkTtl(ttlMs);
    const sent = performance.now();
    const rows = await this.db.query(
      `UPDATE moat_leases SET expires_at = clock_timestamp() + $4 * interval '1 millisecond'
       WHERE name = $1 AND owner = $2 AND epoch = $3 AND expires_at > clock_timestamp()
       RETURNING epoch`,
      [grant.name, grant.owner, grant.epoch, ttlMs],
    );
    return rows.length === 0 ? undefined : { ...grant, deadline: sent + ttlMs };
  }

  /** Gives a lease up (only the holder's own epoch): another owner can claim it at once. Whether it was still held. */
  async release(grant: LeaseGrant): Promise<boolean> {
    const rows = await this.db.query('DELETE FROM moat_leases WHERE name = $1 AND owner = $2 AND epoch = $3 RETURNING 1', [grant.name, grant.owner, grant.epoch]);
    return rows.length > 0;
  }

  /**
   * The live leases whose names start with `prefix` (not run out), by name:
   * how the health monitor counts live replicas and sees which shards are
   * free. One statement, on the server's clock.
   */
  async live(prefix: string): Promise<(LeaseHolder & { name: string })[]> {
    const rows = await this.db.query<{ name: string; owner: string; epoch: number; remaining_ms: number }>(
      `SELECT name, owner, epoch, extract(epoch FROM expires_at - clock_timestamp()) * 1000 AS remaining_ms
       FROM moat_leases WHERE starts_with(name, $1) AND expires_at > clock_timestamp() ORDER BY name`,
      [prefix],
    );
    return rows.map((r) => ({ name: r.name, owner: r.owner, epoch: r.epoch, remainingMs: Number(r.remaining_ms) }));
  }

  /** Who holds `name` (undefined: nobody ever did, or it was released). */
  async holder(name: string): Promise<LeaseHolder | undefined> {
    const rows = await this.db.query<{ owner: string; epoch: number; remaining_ms: number }>(
      `SELECT owner, epoch, extract(epoch FROM expires_at - clock_timestamp()) * 1000 AS remaining_ms FROM moat_leases WHERE name = $1`,
      [name],
    );
    const r = rows[0];
    return r === undefined ? undefined : { owner: r.owner, epoch: r.epoch, remainingMs: Number(r.remaining_ms) };
  }
}

export interface KeeperOptions {
  /** Called when the lease is obtained (with its epoch). */
  onAcquire?: (grant: LeaseGrant) => void;
  /** Called when the lease is lost: not renewed before its deadline, or taken. */
  onLose?: () => void;
  /** Called when a claim or renewal fails (the database unreachable); the keeper goes on trying. */
  onError?: (err: unknown) => void;
}

/**
 * Keeps trying to hold one lease: every third of the lease time it claims
 * the lease (while another holds it) or renews it (while held), and reports
 * changes. `held` is true only before the local deadline, so a keeper
 * cut off from the database stops claiming the work in time, without a
 * query having to fail first.
 */
export class LeaseKeeper {
  private grant: LeaseGrant | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private tickInFlight: Promise<void> | undefined;

  constructor(
    private readonly leases: Leases,
    readonly name: string,
    readonly owner: string,
    private readonly ttlMs: number,
    private readonly options: KeeperOptions = {},
  ) {
    checkTtl(ttlMs);
  }

  /** Whether the lease is held now (before its local deadline). */
  get held(): boolean {
    return this.grant !== undefined && performance.now() < this.grant.deadline;
  }

  /** The current grant, while held. */
  get current(): LeaseGrant | undefined {
    return this.held ? this.grant : undefined;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (!this.running) return;
    this.timer = setTimeout(() => {
      this.tickInFlight = this.tick().finally(() => {
        this.tickInFlight = undefined;
        this.schedule(Math.max(1, Math.floor(this.ttlMs / 3)));
      });
    }, ms);
  }

  private lose(): void {
    if (this.grant === undefined) return;
    this.grant = undefined;
    this.options.onLose?.();
  }

  private async tick(): Promise<void> {
    if (this.grant !== undefined && !this.held) this.lose();
    try {
      if (this.grant !== undefined) {
        const renewed = await this.leases.renew(this.grant, this.ttlMs);
        if (!this.running) return;
        if (renewed === undefined) this.lose();
        else this.grant = renewed;
      } else {
        const got = await this.leases.acquire(this.name, this.owner, this.ttlMs);
        if (!this.running) return;
        if (got !== undefined) {
          this.grant = got;
          this.options.onAcquire?.(got);
        }
      }
    } catch (err) {
      this.options.onError?.(err);
      if (this.grant !== undefined && !this.held) this.lose();
    }
  }

  /**
   * Stops keeping the lease. With `release` (default true) it is given up so
   * another owner can claim it at once; without, it runs out in its own time
   * (what a replica that dies does).
   */
  async stop(release = true): Promise<void> {
    this.running = false;
    if (this.timer !== undefined) clearTimeout(this.timer);
    await this.tickInFlight;
    const grant = this.grant;
    this.grant = undefined;
    if (release && grant !== undefined) await this.leases.release(grant).catch(() => false);
  }
}
