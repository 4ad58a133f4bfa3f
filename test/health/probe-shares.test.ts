// Probe shares (src/health/probe-shares.ts) on a real PostgreSQL server: an
// origin's shard is the same everywhere; a replica alone holds every shard, a
// second one gets half as the first gives them back, and a replica that stops
// renewing (dead) loses its shards to the other within one lease time and a
// tick; a result recorded under a lease that was taken over is dropped, while
// the successor's is written (the fence).
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_PROBE_SHARDS, leaseTimeFor, ProbeShares, shardOf } from '../../src/health/index.js';
import { pgNotifyRepos } from '../../src/notify/index.js';
import { Leases, newId, PgStore } from '../../src/store/index.js';
import { probeDown } from '../support/store-contract.js';
import { requirePostgres, usePostgres } from '../support/postgres.js';

const RUN = requirePostgres();
const cluster = usePostgres(RUN);
const stores: PgStore[] = [];
afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
});

async function open(url: string): Promise<PgStore> {
  const s = await PgStore.open(url, pgNotifyRepos);
  stores.push(s);
  return s;
}

describe('the shard of an origin', () => {
  it('is FNV-1a of its key modulo the shards, so every replica agrees', () => {
    // FNV-1a test vectors: "" is 0x811c9dc5, "a" is 0xe40c292c.
    expect(shardOf('', 16)).toBe(0x811c9dc5 % 16);
    expect(shardOf('a', 16)).toBe(0xe40c292c % 16);
    expect(shardOf('a', 1000)).toBe(0xe40c292c % 1000);
  });

  it('has a lease time of half the shortest interval, within 1 s and 10 s', () => {
    expect(leaseTimeFor(10_000)).toBe(5_000);
    expect(leaseTimeFor(1_000)).toBe(1_000);
    expect(leaseTimeFor(3_600_000)).toBe(10_000);
  });
});

describe.skipIf(!RUN)('probe shares between replicas', () => {
  const TTL = 600;

  it('a replica alone takes every shard; a second one gets half as the first gives them back; a dead one\'s shards go to the other within a lease time and a tick', async () => {
    const url = await cluster().createDatabase('shares');
    const sa = await open(url);
    const sb = await open(url);
    const a = new ProbeShares(new Leases(sa.database), DEFAULT_PROBE_SHARDS, 'replica-a');
    const b = new ProbeShares(new Leases(sb.database), DEFAULT_PROBE_SHARDS, 'replica-b');
    const first = await a.tick(TTL);
    expect(first.error).toBeUndefined();
    expect(first.replicas).toBe(1);
    expect(first.acquired.length).toBe(16);
    expect(a.heldShards().length).toBe(16);
    // b joins: it finds nothing free at first; a sheds down to 8 at its next tick; b takes them.
    expect((await b.tick(TTL)).acquired).toEqual([]);
    const shed = await a.tick(TTL);
    expect(shed.replicas).toBe(2);
    expect(shed.released.length).toBe(8);
    expect(shed.lost).toEqual([]);
    expect((await b.tick(TTL)).acquired.length).toBe(8);
    const held = [...a.heldShards(), ...b.heldShards()].sort((x, y) => x - y);
    expect(held).toEqual(Array.from({ length: 16 }, (_, i) => i));
    // Steady: more ticks change nothing.
    for (let i = 0; i < 3; i++) {
      const ta = await a.tick(TTL);
      const tb = await b.tick(TTL);
      expect([ta.acquired, ta.lost, ta.released, tb.acquired, tb.lost, tb.released]).toEqual([[], [], [], [], [], []]);
      await sleep(TTL / 3);
    }
    // b dies (stops renewing); a goes on ticking. No shard is ever held by both (b's local deadline comes before the server lets a take it), and a has all within a lease time and two ticks.
    const key = findKeyIn(b.heldShards());
    expect(b.fenceOf(key)).toBeDefined();
    const died = performance.now();
    let took = 0;
    while (a.heldShards().length < 16) {
      expect(performance.now() - died, 'takeover within a lease time and two ticks').toBeLessThan(TTL + (2 * TTL) / 3 + 200);
      const t = await a.tick(TTL);
      expect(t.lost).toEqual([]);
      took += t.acquired.length;
      const both = a.heldShards().filter((i) => b.heldShards().includes(i));
      expect(both).toEqual([]);
      await sleep(TTL / 3);
    }
    expect(b.fenceOf(key)).toBeUndefined();
    expect(took).toBe(8);
    expect(a.fenceOf(key)!.epoch).toBe(2);
  });

  it('drops a result recorded under a lease taken over since, and writes its successor\'s', async () => {
    const url = await cluster().createDatabase('fence');
    const s = await open(url);
    const account = newId();
    const pool = await s.loadBalancing.createPool(account, 'p', null, { name: 'p', origins: [{ name: 'a', address: '192.0.2.1', enabled: true }], minimum_origins: 1, notification_email: '', notification_filter: null });
    const leases = new Leases(s.database);
    const old = (await leases.acquire('health/shard/3', 'replica-a', 50))!;
    await sleep(80);
    const successor = (await leases.acquire('health/shard/3', 'replica-b', 10_000))!;
    expect(successor.epoch).toBe(old.epoch + 1);
    const fence = (g: typeof old) => ({ lease: g.name, owner: g.owner, epoch: g.epoch });
    const [stale] = await s.loadBalancing.recordProbes([{ ...probeDown(account, pool.id), fence: fence(old) }]);
    expect(stale).toEqual([]);
    expect(await s.loadBalancing.healthEvents(account)).toEqual([]);
    expect((await s.loadBalancing.originHealth(pool.id)).size).toBe(0);
    const [fresh] = await s.loadBalancing.recordProbes([{ ...probeDown(account, pool.id), fence: fence(successor) }]);
    expect((fresh as unknown[]).length).toBe(1);
    expect((await s.loadBalancing.healthEvents(account)).map((e) => e.new_health)).toEqual(['unhealthy']);
  });
});

/** A key whose shard is one of `shards`. */
function findKeyIn(shards: number[]): string {
  for (let i = 0; ; i++) if (shards.includes(shardOf(`pool/o${i}`, DEFAULT_PROBE_SHARDS))) return `pool/o${i}`;
}
