// The promises every Store implementation keeps (src/store/types.ts), as one
// suite a backend's test file runs against a fresh store: SQLite's in
// test/store/sqlite-store.test.ts; PostgreSQL's (issue #20) runs the same
// against a throwaway cluster. What only one backend does (SQLite's gate,
// its commit count, its PRAGMAs) is tested beside it, not here.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newId, type HealthEvent, type OriginHealthRow, type ProbeRecord, type Store } from '../../src/store/index.js';

/** A fresh, empty store, and how to dispose of it once closed. */
export interface ContractSubject {
  store: Store;
  dispose(): Promise<void> | void;
}

const user = (accountId: string, n: number) => ({ email: `u${n}@example.com`, accounts: [accountId] });

/** A probe that turns origin "a" of `poolId` unhealthy, with one origin event. */
export function probeDown(accountId: string, poolId: string): ProbeRecord {
  return {
    poolId,
    decide: () => {
      const origin: OriginHealthRow = { poolId, originName: 'a', address: '192.0.2.1', health: 'unhealthy', ups: 0, downs: 1, failureReason: 'HTTP 503', responseCode: 503, rttMs: 1, checkedOn: '2026-01-01T00:00:00.000000Z' };
      const event: HealthEvent = {
        id: newId(),
        accountId,
        eventSource: 'origin',
        pool: { id: poolId, name: 'p', notificationEmail: '', notificationFilter: null },
        origin: { name: 'a', address: '192.0.2.1' },
        oldHealth: 'healthy',
        newHealth: 'unhealthy',
        reason: 'HTTP 503',
        at: '2026-01-01T00:00:00.000000Z',
      };
      return { origin, poolHealth: 'unhealthy', events: [event] };
    },
  };
}

/** Registers the contract's tests under `name`; `open` makes a fresh store for each. */
export function storeContract(name: string, open: () => Promise<ContractSubject>): void {
  describe(`${name}: the Store contract`, () => {
    let subject: ContractSubject;
    let store: Store;
    let account: string;
    beforeEach(async () => {
      subject = await open();
      store = subject.store;
      account = newId();
    });
    afterEach(async () => {
      if (!store.closed) await store.close();
      await subject.dispose();
    });

    it('commits everything a write transaction wrote, across awaits, and nothing of one that throws', async () => {
      await store.write(async (tx) => {
        await tx.users.create(user(account, 1));
        await tx.users.create(user(account, 2));
      });
      await expect(
        store.write(async (tx) => {
          await tx.users.create(user(account, 3));
          throw new Error('body fails after writing');
        }),
      ).rejects.toThrow('body fails after writing');
      expect((await store.users.list()).map((u) => u.email).sort()).toEqual(['u1@example.com', 'u2@example.com']);
    });

    it('keeps concurrent writes apart: the one that throws is rolled back alone, the others commit and get their values', async () => {
      const results = await Promise.allSettled([
        store.write((tx) => tx.users.create(user(account, 1))),
        store.write(async (tx) => {
          await tx.users.create(user(account, 2));
          throw new Error('second fails');
        }),
        store.write(async (tx) => (await tx.users.create(user(account, 3))).user.email),
      ]);
      expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect((results[1] as PromiseRejectedResult).reason).toMatchObject({ message: 'second fails' });
      expect((results[2] as PromiseFulfilledResult<string>).value).toBe('u3@example.com');
      expect(await store.users.count()).toBe(2);
    });

    it('gives a read transaction one snapshot: a write committed meanwhile is seen only after it', async () => {
      await store.users.create(user(account, 1));
      let writing: Promise<unknown> | undefined;
      const counts = await store.read(async (tx) => {
        const first = await tx.users.count();
        writing = store.write((w) => w.users.create(user(account, 2)));
        await sleep(30);
        return [first, await tx.users.count()];
      });
      await writing;
      expect(counts).toEqual([1, 1]);
      expect(await store.users.count()).toBe(2);
    });

    it('changes the change epoch before a write resolves', async () => {
      const before = store.changeEpoch();
      await store.write((tx) => tx.users.create(user(account, 1)));
      expect(store.changeEpoch()).not.toBe(before);
    });

    it('signals its change feed after a write of its own', async () => {
      let signals = 0;
      store.changes.subscribe(() => signals++);
      store.changes.start();
      await store.write((tx) => tx.users.create(user(account, 1)));
      for (let i = 0; i < 100 && signals === 0; i++) await sleep(10);
      await store.changes.stop();
      expect(signals).toBeGreaterThan(0);
    });

    it('hands health events to its listeners inside the probe\'s savepoint: their writes commit with it, a throw rolls back that probe alone', async () => {
      const p1 = await store.loadBalancing.createPool(account, 'p1', null, { name: 'p1', origins: [{ name: 'a', address: '192.0.2.1', enabled: true }], minimum_origins: 1, notification_email: '', notification_filter: null });
      const p2 = await store.loadBalancing.createPool(account, 'p2', null, { name: 'p2', origins: [{ name: 'a', address: '192.0.2.1', enabled: true }], minimum_origins: 1, notification_email: '', notification_filter: null });
      store.onHealthEvent(async (event, tx) => {
        await tx.outbox.startIncident(event.accountId, event.pool.id, event.id);
        if (event.pool.id === p2.id) throw new Error('outbox full');
      });
      const results = await store.loadBalancing.recordProbes([probeDown(account, p1.id), probeDown(account, p2.id)]);
      expect((results[0] as HealthEvent[]).length).toBe(1);
      expect((results[1] as Error).message).toBe('outbox full');
      expect(await store.outbox.openIncident(account, p1.id)).toBe((results[0] as HealthEvent[])[0]!.id);
      expect(await store.outbox.openIncident(account, p2.id)).toBeUndefined();
      expect((await store.loadBalancing.healthEvents(account)).map((e) => e.pool_id)).toEqual([p1.id]);
    });

    it('runs the writes it accepted before closing, then refuses new ones with 8001', async () => {
      const accepted = store.write((tx) => tx.users.create(user(account, 1)));
      await store.close();
      expect(store.closed).toBe(true);
      expect((await accepted).user.email).toBe('u1@example.com');
      await expect(store.write((tx) => tx.users.create(user(account, 2)))).rejects.toMatchObject({ code: 8001 });
    });
  });
}
