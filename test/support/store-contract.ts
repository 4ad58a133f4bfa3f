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

    it('applies a bulk list operation whole or not at all, and runs queued operations in the order they were queued', async () => {
      const list = await store.lists.create(account, { name: 'l', kind: 'ip', description: '' }, 10);
      // The second item is refused: the first must not stay behind.
      const bad = await store.lists.enqueue(account, list.id, 'append', [{ ip: '192.0.2.1' }, { ip: '10.0.0.1/8' }]);
      const good = await store.lists.enqueue(account, list.id, 'append', [{ ip: '192.0.2.2' }, { ip: '192.0.2.3', comment: 'c' }]);
      expect(await store.lists.nextOperation()).toEqual({ id: bad, accountId: account, listId: list.id });
      expect(await store.write((tx) => tx.lists.applyOperation(bad, 100))).toBe('failed');
      expect(await store.lists.entries(account, 'l')).toEqual([]);
      expect(await store.lists.operation(account, bad)).toMatchObject({ status: 'failed', error: 'item 1: "10.0.0.1/8" has host bits set (did you mean 10.0.0.0/8?)' });
      expect(await store.lists.nextOperation()).toEqual({ id: good, accountId: account, listId: list.id });
      const key = await store.lists.contentKey(account, 'l');
      expect(await store.write((tx) => tx.lists.applyOperation(good, 100))).toBe('completed');
      expect(await store.lists.entries(account, 'l')).toEqual(['192.0.2.2', '192.0.2.3']);
      expect(await store.lists.contentKey(account, 'l')).not.toBe(key);
      expect(await store.lists.nextOperation()).toBeUndefined();
      // Applying a finished operation again changes nothing.
      expect(await store.write((tx) => tx.lists.applyOperation(good, 100))).toBe('completed');
      expect((await store.lists.get(account, list.id))!.num_items).toBe(2);
    });

    it('tells its pools-written listeners after each pool write', async () => {
      let calls = 0;
      store.onPoolsWritten(() => calls++);
      const p = await store.loadBalancing.createPool(account, 'p', null, { name: 'p', origins: [], minimum_origins: 1, notification_email: '', notification_filter: null });
      await store.loadBalancing.updatePool(account, p.id, (c) => ({ name: c.name, monitorId: null, body: { ...c.body, notification_email: 'a@example.com' } }));
      for (let i = 0; i < 100 && calls < 2; i++) await sleep(5);
      expect(calls).toBe(2);
      expect((await store.loadBalancing.legacyPools()).map((l) => l.notificationEmail)).toEqual(['a@example.com']);
    });

    it('checks a policy against a pool created in the same transaction', async () => {
      const id = await store.write(async (tx) => {
        const p = await tx.loadBalancing.createPool(account, 'p', null, { name: 'p', origins: [], minimum_origins: 1, notification_email: '', notification_filter: null });
        return tx.alerting.createPolicy(account, { name: 'n', alert_type: 'load_balancing_health_alert', enabled: true, filters: { pool_id: [p.id] }, mechanisms: { email: [{ id: 'ops@example.com' }] } });
      });
      expect((await store.alerting.policy(account, id)).filters).toEqual({ pool_id: [expect.stringMatching(/^[0-9a-f]{32}$/)] });
      await expect(
        store.alerting.createPolicy(account, { name: 'n', alert_type: 'load_balancing_health_alert', enabled: true, filters: { pool_id: [newId()] }, mechanisms: {} }),
      ).rejects.toMatchObject({ name: 'FieldErrors' });
    });

    it('never hands one outbox row to two claimers at once, and hands a row whose lease ran out back, under its id, with the interrupted attempt in the history', async () => {
      const payload = JSON.stringify({ name: 'n', description: 'd', alert_type: 'load_balancing_health_alert', text: 't', subject: 's' });
      const now = 1_800_000_000_000;
      const ids: string[] = [];
      for (let i = 0; i < 6; i++) ids.push(await store.outbox.enqueue({ accountId: account, policyId: null, eventId: newId(), mechanismType: 'webhook', target: 't', payload, nowMs: now + i }));
      const [a, b] = await Promise.all([store.write((tx) => tx.outbox.claim('h:1:a', now + 10, 1000, 4)), store.write((tx) => tx.outbox.claim('h:2:b', now + 10, 1000, 4))]);
      const claimed = [...a, ...b].map((r) => r.id);
      expect(claimed.length).toBe(6);
      expect(new Set(claimed)).toEqual(new Set(ids));
      // Leased: nobody gets them again before the lease runs out.
      expect(await store.write((tx) => tx.outbox.claim('h:3:c', now + 500, 1000, 10))).toEqual([]);
      // After: the same rows, the same ids, and the interrupted attempts recorded.
      const again = await store.write((tx) => tx.outbox.claim('h:3:c', now + 2000, 1000, 10));
      expect(new Set(again.map((r) => r.id))).toEqual(new Set(ids));
      expect(again.every((r) => r.attempts === 1 && r.lease_owner === 'h:3:c')).toBe(true);
      const history = await store.outbox.history(account, { page: 1, perPage: 50 });
      expect(history.total).toBe(6);
      expect(history.items.every((h) => h.outcome === 'failed' && h.error!.startsWith('error 9400: attempt interrupted'))).toBe(true);
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
