// How `moat serve` replicas on one PostgreSQL database share the health
// probes (issue #20): the origins are hashed into a fixed number of shards,
// and each shard is a lease in moat_leases (store/postgres/leases.ts, which
// says why leases and not advisory locks). A replica probes the origins of
// the shards it holds, and only before its lease's local deadline.
//
// Fair share: each replica also holds a presence lease; with n live replicas
// each takes up to ceil(shards / n) free shards and gives back what it holds
// above that (a replica that joins gets its share as the others shed theirs;
// a replica alone takes all). A replica that dies stops renewing: its
// presence and then its shards run out after one lease time, and the others,
// now counting one replica fewer, take them at their next tick.
//
// Why shards and not a lease per origin: renewals cost a statement per lease
// per tick, so thousands of origins would mean thousands of statements a
// second; a fixed 16 costs 17 per tick per replica whatever the origins, and
// still splits the work evenly enough for a handful of replicas. Why origins
// and not pools: one pool's origins then spread over replicas (a big pool is
// not all on one); the pool's health stays right because recording locks the
// pool row (FOR UPDATE), so each result sees the others' rows.

import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { randomBytes } from 'node:crypto';
import type { LeaseGrant, Leases } from '../store/index.js';

/** Shards by default: even enough for a handful of replicas, few statements per tick. */
export const DEFAULT_PROBE_SHARDS = 16;
/** Lease names: `health/shard/<i>` and `health/replica/<owner>`. */
export const SHARD_LEASE_PREFIX = 'health/shard/';
export const REPLICA_LEASE_PREFIX = 'health/replica/';

/** The shard of an origin key (`<pool id>/<origin name>`): FNV-1a, the same on every replica. */
export function shardOf(key: string, shards: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % shards;
}

/**
 * The lease time for monitors whose shortest interval is `minIntervalMs`:
 * half of it, within [1 s, 10 s]. A dead replica's shards are free one lease
 * time after its last renewal and taken at the next tick (a third of it), so
 * within 2/3 of the shortest interval: its origins are probed on time or a
 * little late, never a whole interval late. Not shorter than 1 s: renewals
 * every 333 ms already, and an event-loop pause of 2/3 s loses the lease.
 */
export function leaseTimeFor(minIntervalMs: number): number {
  return Math.min(10_000, Math.max(1_000, Math.floor(minIntervalMs / 2)));
}

/** What a tick changed. */
export interface ShareTick {
  /** Shards newly held (taken: free, or run out). */
  acquired: number[];
  /** Shards lost: not renewed before their deadline, or taken by another replica (a stall, or the database out of reach). */
  lost: number[];
  /** Shards given back above the fair share (a replica joined). */
  released: number[];
  /** Live replicas, this one included. */
  replicas: number;
  /** Shards held after the tick. */
  held: number;
  /** Why the tick could not finish (the database unreachable): shards past their deadline are in `lost`. */
  error?: unknown;
}

/** One replica's part of the shared probes. */
export class ProbeShares {
  /** This replica's name in moat_leases: host, pid and a random part (a pid is reused after a restart). */
  readonly owner: string;
  private readonly grants = new Map<number, LeaseGrant>();
  private presence: LeaseGrant | undefined;

  constructor(
    private readonly leases: Leases,
    readonly shards: number = DEFAULT_PROBE_SHARDS,
    owner?: string,
  ) {
    this.owner = owner ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  }

  /** The lease an origin key is probed under, while held (before its local deadline); undefined: not this replica's now. */
  fenceOf(key: string): LeaseGrant | undefined {
    const g = this.grants.get(shardOf(key, this.shards));
    return g !== undefined && performance.now() < g.deadline ? g : undefined;
  }

  /** Shards held now (before their deadline). */
  heldShards(): number[] {
    const now = performance.now();
    return [...this.grants].filter(([, g]) => now < g.deadline).map(([i]) => i);
  }

  /**
   * Renews presence and the shards held, then moves toward the fair share:
   * gives back shards above it, takes free ones below it. Run every third of
   * `ttlMs`. Never throws: a failure is in `error`, and shards past their
   * deadline are in `lost` whatever happened. A shard `busy` says has a
   * probe in flight is not given back this tick: its result would be
   * dropped by the fence and its successor would probe it again at once.
   */
  async tick(ttlMs: number, busy: (shard: number) => boolean = () => false): Promise<ShareTick> {
    const lost: number[] = [];
    const released: number[] = [];
    const acquired: number[] = [];
    const dropLapsed = () => {
      const now = performance.now();
      for (const [i, g] of this.grants) {
        if (now >= g.deadline) {
          this.grants.delete(i);
          lost.push(i);
        }
      }
    };
    dropLapsed();
    try {
      // Presence first: a replica that dies between the two statements leaves its presence to run out before its shards, so the others never see its shards free while still counting it.
      this.presence = await this.leases.acquire(REPLICA_LEASE_PREFIX + this.owner, this.owner, ttlMs);
      const renewals = await Promise.all([...this.grants.values()].map(async (g) => [g, await this.leases.renew(g, ttlMs)] as const));
      for (const [g, r] of renewals) {
        const i = shardIndex(g.name);
        if (r === undefined) {
          this.grants.delete(i);
          lost.push(i);
        } else this.grants.set(i, r);
      }
      const live = await this.leases.live('health/');
      const replicas = Math.max(1, live.filter((l) => l.name.startsWith(REPLICA_LEASE_PREFIX)).length);
      const fair = Math.ceil(this.shards / replicas);
      if (this.grants.size > fair) {
        // Give back the highest shards above the share: released at once, so the replica that joined takes them at its next tick.
        const extra = [...this.grants.keys()]
          .filter((i) => !busy(i))
          .sort((a, b) => b - a)
          .slice(0, this.grants.size - fair);
        for (const i of extra) {
          const g = this.grants.get(i)!;
          this.grants.delete(i);
          released.push(i);
          await this.leases.release(g);
        }
      } else if (this.grants.size < fair) {
        const taken = new Set(live.filter((l) => l.name.startsWith(SHARD_LEASE_PREFIX)).map((l) => shardIndex(l.name)));
        const free: number[] = [];
        for (let i = 0; i < this.shards; i++) if (!taken.has(i) && !this.grants.has(i)) free.push(i);
        // From a random point, so replicas starting together mostly claim different shards.
        const start = Math.floor(Math.random() * Math.max(1, free.length));
        for (let k = 0; k < free.length && this.grants.size < fair; k++) {
          const i = free[(start + k) % free.length]!;
          const g = await this.leases.acquire(SHARD_LEASE_PREFIX + i, this.owner, ttlMs);
          if (g !== undefined) {
            this.grants.set(i, g);
            acquired.push(i);
          }
        }
      }
      return { acquired, lost, released, replicas, held: this.grants.size };
    } catch (error) {
      dropLapsed();
      return { acquired, lost, released, replicas: 0, held: this.grants.size, error };
    }
  }

  /** Gives every lease back (a clean stop: the others take the shards at their next tick, not a lease time later). */
  async release(): Promise<void> {
    const grants = [...this.grants.values()];
    this.grants.clear();
    const all = this.presence === undefined ? grants : [...grants, this.presence];
    this.presence = undefined;
    await Promise.all(all.map((g) => this.leases.release(g).catch(() => false)));
  }
}

function shardIndex(name: string): number {
  return Number(name.slice(SHARD_LEASE_PREFIX.length));
}
