// The asynchronous Store over a real SQLite file: the contract every backend
// keeps (test/support/store-contract.ts), and what is SQLite's own: group
// commit (one COMMIT for the writes of one turn), durability seen from
// another connection, calls outside a transaction waiting while one is open
// on the connection, the relaxed durability of probe batches.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sqliteNotifyRepos } from '../../src/notify/index.js';
import { Database, SqliteStore, newId, type HealthEvent, type ProbeRecord } from '../../src/store/index.js';
import { probeDown, storeContract } from '../support/store-contract.js';

storeContract('SQLite', async () => {
  const d = mkdtempSync(join(tmpdir(), 'moat-store-contract-'));
  return { store: new SqliteStore(Database.open(d), sqliteNotifyRepos), dispose: () => rmSync(d, { recursive: true, force: true }) };
});

let dir: string;
let store: SqliteStore;
const account = newId();

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'moat-sqlite-store-'));
  store = new SqliteStore(Database.open(dir), sqliteNotifyRepos);
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const user = (n: number) => ({ email: `u${n}@example.com`, accounts: [account] });

describe('write transactions', () => {
  it('share one COMMIT among the writes of one turn, and roll back only the one that throws', async () => {
    let commits = 0;
    store.database.onCommit(() => commits++);
    const results = await Promise.allSettled([
      store.write((tx) => tx.users.create(user(1))),
      store.write(async (tx) => {
        await tx.users.create(user(2));
        throw new Error('second fails');
      }),
      store.write(async (tx) => (await tx.users.create(user(3))).user.email),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[2] as PromiseFulfilledResult<string>).value).toBe('u3@example.com');
    expect(commits).toBe(1);
    expect(await store.users.count()).toBe(2);
  });

  it('are durable in the file once resolved (another connection sees them)', async () => {
    await store.write((tx) => tx.users.create(user(1)));
    const other = new BetterSqlite3(join(dir, 'moat.db'), { readonly: true });
    expect(other.prepare('SELECT email FROM users').all()).toEqual([{ email: 'u1@example.com' }]);
    other.close();
  });

  it('make a call outside the transaction wait until it ends, rather than run inside it', async () => {
    const order: string[] = [];
    const writing = store.write(async (tx) => {
      await tx.users.create(user(1));
      order.push('written');
      await sleep(20);
      order.push('committing');
    });
    await sleep(5); // the write's transaction is open and its body waiting
    const seen = await store.users.get('u1@example.com');
    order.push('read');
    await writing;
    expect(order).toEqual(['written', 'committing', 'read']);
    expect(seen?.email).toBe('u1@example.com');
    // and a failed transaction's rows are never seen by a call that waited on it
    const failing = store.write(async (tx) => {
      await tx.users.create(user(9));
      await sleep(20);
      throw new Error('late failure');
    });
    await sleep(5);
    expect(await store.users.get('u9@example.com')).toBeUndefined();
    await expect(failing).rejects.toThrow('late failure');
  });
});

describe('read transactions', () => {
  it('see one snapshot across their queries, and nothing a concurrent write commits meanwhile', async () => {
    await store.write((tx) => tx.users.create(user(1)));
    const other = new BetterSqlite3(join(dir, 'moat.db'));
    const counts = await store.read(async (tx) => {
      const first = await tx.users.count();
      other.prepare("INSERT INTO users (id, email, created_on) VALUES (?, 'x@example.com', 'now')").run(newId());
      return [first, await tx.users.count()];
    });
    other.close();
    expect(counts).toEqual([1, 1]);
    expect(await store.users.count()).toBe(2);
  });
});

/** A probe that turns origin "a" of `poolId` unhealthy, with one origin event. */
const down = (poolId: string): ProbeRecord => probeDown(account, poolId);

describe('recording probes', () => {
  it('hands each event to the listeners inside its savepoint: their writes commit with it, a throw rolls back that probe alone', async () => {
    const pools = [];
    for (const name of ['p1', 'p2']) {
      pools.push(await store.loadBalancing.createPool(account, name, null, { name, origins: [{ name: 'a', address: '192.0.2.1', enabled: true }], minimum_origins: 1, notification_email: '', notification_filter: null }));
    }
    const [p1, p2] = [pools[0]!, pools[1]!];
    store.onHealthEvent(async (event, tx) => {
      await tx.outbox.startIncident(event.accountId, event.pool.id, event.id);
      if (event.pool.id === p2.id) throw new Error('outbox full');
    });
    const results = await store.loadBalancing.recordProbes([down(p1.id), down(p2.id)]);
    expect(Array.isArray(results[0]) && results[0].length).toBe(1);
    expect((results[1] as Error).message).toBe('outbox full');
    expect(await store.outbox.openIncident(account, p1.id)).toBe((results[0] as HealthEvent[])[0]!.id);
    expect(await store.outbox.openIncident(account, p2.id)).toBeUndefined();
    expect((await store.loadBalancing.healthEvents(account)).map((e) => e.pool_id)).toEqual([p1.id]);
    // relaxed durability was for the batch only: API writes are fsynced again
    expect(store.database.db.pragma('synchronous', { simple: true })).toBe(2);
  });
});

describe('closing', () => {
  it('runs the writes already accepted, then refuses new ones', async () => {
    const accepted = store.write((tx) => tx.users.create(user(1)));
    await store.close();
    expect((await accepted).user.email).toBe('u1@example.com');
    await expect(store.write((tx) => tx.users.create(user(2)))).rejects.toMatchObject({ code: 8001 });
    const other = new BetterSqlite3(join(dir, 'moat.db'), { readonly: true });
    expect(other.prepare('SELECT email FROM users').all()).toEqual([{ email: 'u1@example.com' }]);
    other.close();
  });
});
