// The Store on PostgreSQL (src/store/postgres/pg-store.ts) against a real
// throwaway cluster: the contract every backend keeps
// (test/support/store-contract.ts), and what is PostgreSQL's own: several
// stores ("replicas") on one database: versions of one ruleset written
// through three of them at once numbered 1, 2, ... without gaps or
// duplicates; one store's commit seen by another's change epoch and change
// feed; the feed catching up after its LISTEN connection is killed; the
// installation's key secret created once when replicas open a new database
// together.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { pgNotifyRepos } from '../../../src/notify/index.js';
import { newId, PgStore, type StoredRule } from '../../../src/store/index.js';
import { scryptHash } from '../../../src/store/users.js';
import { storeContract } from '../../support/store-contract.js';
import { databaseOf, requirePostgres, usePostgres } from '../../support/postgres.js';

const RUN = requirePostgres();
const cluster = usePostgres(RUN);

describe.skipIf(!RUN)('PgStore', () => {
  storeContract('PostgreSQL', async () => ({ store: await PgStore.open(await cluster().createDatabase(), pgNotifyRepos), dispose: () => undefined }));
});

const open: PgStore[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

async function replicas(n: number, url?: string): Promise<{ url: string; stores: PgStore[] }> {
  const u = url ?? (await cluster().createDatabase());
  const stores = await Promise.all(Array.from({ length: n }, (_, i) => PgStore.open(u, pgNotifyRepos, { applicationName: `moat-replica-${i}` })));
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
    // Three writers per replica, ten versions each: 90 versions, up to 9 transactions racing for the ruleset's row.
    const got: number[] = [];
    await Promise.all(
      stores.flatMap((s, r) =>
        Array.from({ length: 3 }, async (_, w) => {
          for (let i = 0; i < 10; i++) {
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
    const expected = Array.from({ length: 90 }, (_, i) => i + 1);
    expect([...got].sort((a, b) => a - b)).toEqual(expected);
    expect((await stores[2]!.rulesets.versions(id)).map((v) => v.version)).toEqual(expected);
    expect(await stores[1]!.rulesets.get(id)).toMatchObject({ latest_version: 90, last_version: 90 });
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
    signals = 0;
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
    // Killed with nothing written: the reconnection alone signals and moves the epoch.
    expect(await cluster().terminate(databaseOf(url), 'moat-replica-1-listen')).toBe(1);
    await until(() => signals > 0);
    expect(b.changeEpoch()).not.toBe(epoch);
    // Killed again, and a commit through a at once, while b cannot hear it: b signals and reads it.
    signals = 0;
    expect(await cluster().terminate(databaseOf(url), 'moat-replica-1-listen')).toBe(1);
    await a.users.create({ email: 'l@example.com', accounts: [newId()] });
    await until(() => signals > 0);
    expect((await b.users.get('l@example.com'))?.email).toBe('l@example.com');
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

  it('runs a body retried after a serialization failure with a fresh context, and its afterCommit work once: a legacy key re-hashed after the final commit', async () => {
    const { url, stores } = await replicas(1);
    const { user: u } = await stores[0]!.users.create({ email: 'old@example.com', accounts: [newId()] });
    // A key as Moat stored them before schema 4: salted scrypt.
    const key = 'legacy-key-0123456789';
    const salt = randomBytes(16);
    await cluster().admin("INSERT INTO api_keys (id, user_id, salt, hash, hint, created_on, scheme) VALUES ($1, $2, $3, $4, 'x', '2020-01-01T00:00:00.000000Z', 'scrypt')", [newId(), u.id, salt, scryptHash(key, salt)], databaseOf(url));
    const { stores: [b] } = await replicas(1, url);
    let runs = 0;
    const check = await b!.write(async (tx) => {
      runs++;
      const r = await tx.users.verifyKey('old@example.com', key, () => true);
      // The first attempt fails as a serialization failure would; PgDatabase runs the body again.
      if (runs === 1) throw Object.assign(new Error('could not serialize access (simulated)'), { code: '40001' });
      return r;
    });
    expect(check.outcome).toBe('ok');
    expect(runs).toBe(2);
    // The first attempt's callbacks were dropped: one re-hash (and one memo of the check) after the final commit.
    expect(b!.stats.backgroundWrites).toBe(1);
    expect(b!.stats.afterCommitRuns).toBe(2);
    await b!.close();
    const rows = await cluster().admin<{ scheme: string }>('SELECT scheme FROM api_keys WHERE user_id = $1 ORDER BY scheme', [u.id], databaseOf(url));
    expect(rows.map((r) => r.scheme)).toEqual(['hmac-sha256', 'hmac-sha256']);
    expect((await stores[0]!.users.verify('old@example.com', key))?.userId).toBe(u.id);
  });

  it('refuses the second of two replicas creating the same user at once with 7400', async () => {
    const { stores } = await replicas(2);
    const account = newId();
    const results = await Promise.allSettled(stores.map((s) => s.users.create({ email: 'same@example.com', accounts: [account] })));
    expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
    expect((results.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason).toMatchObject({ code: 7400, message: 'a user with email same@example.com already exists' });
    expect(await stores[1]!.users.count()).toBe(1);
  });

  it('is not writable, and says why, on a database whose transactions are read-only', async () => {
    const { url } = await replicas(1);
    await cluster().admin(`ALTER DATABASE "${databaseOf(url)}" SET default_transaction_read_only = on`);
    // Sessions opened from now on get the setting; the schema is there already (no migration to run).
    const s = await PgStore.open(url, pgNotifyRepos, { migrate: false });
    open.push(s);
    expect(await s.writable()).toMatch(/makes transactions read-only \(default_transaction_read_only\)$/);
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
