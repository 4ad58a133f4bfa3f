// The Store on PostgreSQL (src/store/postgres/pg-store.ts) against a real
// throwaway cluster: the contract every backend keeps
// (test/support/store-contract.ts), and what is PostgreSQL's own: several
// stores ("replicas") on one database: versions of one ruleset written
// through three of them at once numbered 1, 2, ... without gaps or
// duplicates; one store's commit seen by another's change epoch and change
// feed; the feed catching up after its LISTEN connection is killed; the
// installation's key secret created once when replicas open a new database
// together.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { newId, PgStore, type StoredRule } from '../../../src/store/index.js';
import { storeContract } from '../../support/store-contract.js';
import { databaseOf, requirePostgres, usePostgres } from '../../support/postgres.js';

const RUN = requirePostgres();
const cluster = usePostgres(RUN);

describe.skipIf(!RUN)('PgStore', () => {
  storeContract('PostgreSQL', async () => ({ store: await PgStore.open(await cluster().createDatabase()), dispose: () => undefined }));
});

const open: PgStore[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

async function replicas(n: number, url?: string): Promise<{ url: string; stores: PgStore[] }> {
  const u = url ?? (await cluster().createDatabase());
  const stores = await Promise.all(Array.from({ length: n }, (_, i) => PgStore.open(u, { applicationName: `moat-replica-${i}` })));
  open.push(...stores);
  return { url: u, stores };
}

async function until(cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await sleep(10);
  }
}

const rule = (v: number): StoredRule => ({ id: 'r1', version: String(v), action: 'block', expression: `tcp.dstport eq ${v}`, description: '', last_updated: '2026-01-01T00:00:00.000000Z', ref: 'r1', enabled: true });

describe.skipIf(!RUN)('PgStore: several replicas on one database', () => {
  it('numbers the versions written through three replicas at once 1, 2, ... without gaps or duplicates', async () => {
    const { stores } = await replicas(3);
    const account = newId();
    const id = newId();
    await stores[0]!.users.create({ email: 'v@example.com', accounts: [account] });
    await stores[0]!.rulesets.insert({ id, account_id: account, zone_id: null, kind: 'root', phase: 'network_transit', name: 'root', description: '', created_on: '2026-01-01T00:00:00.000000Z' });
    // Four writers per replica, five versions each: 60 versions, up to 12 transactions racing for the ruleset's row.
    const got: number[] = [];
    await Promise.all(
      stores.flatMap((s, r) =>
        Array.from({ length: 4 }, async (_, w) => {
          for (let i = 0; i < 5; i++) {
            got.push(
              await s.write(async (tx) => {
                const row = await tx.rulesets.get(id);
                const next = row!.last_version + 1;
                return tx.rulesets.addVersion(id, `replica ${r} writer ${w} #${i}`, '2026-01-01T00:00:00.000000Z', [rule(next)], { lists: [], executes: [] });
              }),
            );
          }
        }),
      ),
    );
    const expected = Array.from({ length: 60 }, (_, i) => i + 1);
    expect([...got].sort((a, b) => a - b)).toEqual(expected);
    expect((await stores[2]!.rulesets.versions(id)).map((v) => v.version)).toEqual(expected);
    expect(await stores[1]!.rulesets.get(id)).toMatchObject({ latest_version: 60, last_version: 60 });
    // Each version holds the rule its writer made for that number.
    expect((await stores[1]!.rulesets.version(id, 37))?.rules[0]?.expression).toBe('tcp.dstport eq 37');
    const retries = stores.reduce((n, s) => n + s.database.stats.retries, 0);
    expect(retries).toBeGreaterThan(0);
  });

  it("shows one replica's commit in another's change epoch and change feed", async () => {
    const { stores } = await replicas(2);
    const [a, b] = [stores[0]!, stores[1]!];
    let signals = 0;
    b.changes.subscribe(() => signals++);
    b.changes.start();
    const account = newId();
    const { key } = await a.users.create({ email: 'e@example.com', accounts: [account] });
    // b remembers the key as verified...
    expect((await b.users.verifyKey('e@example.com', key, () => false)).outcome).toBe('ok');
    await until(() => signals > 0);
    const epoch = b.changeEpoch();
    signals = 0;
    // ...and a revocation through a reaches b's epoch, feed and answer.
    await a.users.revoke('e@example.com');
    await until(() => b.changeEpoch() !== epoch && signals > 0);
    expect((await b.users.verifyKey('e@example.com', key, () => false)).outcome).toBe('unknown');
    // Status writes are quiet: they move the epoch, not the feed.
    const d = await a.daemons.create({ accountId: account, name: 'edge' });
    await until(() => signals > 0);
    signals = 0;
    const before = b.changeEpoch();
    await a.daemons.recordStatus([{ kind: 'seen', id: d.info.id, at: '2026-01-01T00:00:00.000000Z' }]);
    await until(() => b.changeEpoch() !== before);
    await sleep(100);
    expect(signals).toBe(0);
  });

  it('catches up after its LISTEN connection is killed: one signal once back, and a new epoch meanwhile', async () => {
    const { url, stores } = await replicas(2);
    const [a, b] = [stores[0]!, stores[1]!];
    let signals = 0;
    b.changes.subscribe(() => signals++);
    b.changes.start();
    const epoch = b.changeEpoch();
    expect(b.changeEpoch()).toBe(epoch);
    expect(await cluster().terminate(databaseOf(url), 'moat-replica-1-listen')).toBe(1);
    // While the connection is down (or lost), a commit through a may go unseen: b's epoch does not hold still.
    await a.users.create({ email: 'l@example.com', accounts: [newId()] });
    await until(() => signals > 0);
    expect(b.changeEpoch()).not.toBe(epoch);
    const settled = b.changeEpoch();
    expect(b.changeEpoch()).toBe(settled);
    // And it listens again: the next commit through a is seen.
    signals = 0;
    await a.users.create({ email: 'm@example.com', accounts: [newId()] });
    await until(() => signals > 0 && b.changeEpoch() !== settled);
  });

  it('creates the key secret once when replicas open a new database together: a key made through one works through every other', async () => {
    const { stores } = await replicas(3);
    const { key } = await stores[0]!.users.create({ email: 's@example.com', accounts: [newId()] });
    for (const s of stores) expect((await s.users.verify('s@example.com', key))?.email).toBe('s@example.com');
    const secrets = await cluster().admin<{ n: string }>('SELECT count(*) AS n FROM auth_secret', [], databaseOf(stores[0]!.database.target.url));
    expect(secrets[0]!.n).toBe('1');
  });

  it('runs a body again after a serialization failure, and its afterCommit work once', async () => {
    const { stores } = await replicas(2);
    const account = newId();
    const id = newId();
    await stores[0]!.users.create({ email: 'w@example.com', accounts: [account] });
    await stores[0]!.rulesets.insert({ id, account_id: account, zone_id: null, kind: 'root', phase: 'network_transit', name: 'root', description: '', created_on: '2026-01-01T00:00:00.000000Z' });
    let runs = 0;
    await Promise.all(
      stores.map((s) =>
        s.write(async (tx) => {
          runs++;
          const row = await tx.rulesets.get(id);
          await sleep(50); // both read before either writes
          return tx.rulesets.addVersion(id, 'x', '2026-01-01T00:00:00.000000Z', [rule(row!.last_version + 1)], { lists: [], executes: [] });
        }),
      ),
    );
    expect(runs).toBeGreaterThan(2);
    expect((await stores[0]!.rulesets.versions(id)).map((v) => v.version)).toEqual([1, 2]);
  });

  it('refuses a call after close with 8001 and names the database without its password', async () => {
    const { stores } = await replicas(1);
    const s = stores[0]!;
    expect(s.backend).toBe('postgres');
    expect(s.location).not.toContain(cluster().password);
    expect(await s.writable()).toBeUndefined();
    await s.close();
    await expect(s.users.count()).rejects.toMatchObject({ code: 8001 });
  });
});
