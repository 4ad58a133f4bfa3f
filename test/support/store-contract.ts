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

    // ---- the repositories' own promises (users, tokens, daemons, rulesets)

    it('finds a user by email without case, refuses a second user of the same email with 7400, and lists users by email', async () => {
      const zone = newId();
      const { user: created, key } = await store.users.create({ email: 'Ops@Example.com', accounts: [account], zones: [zone] });
      expect(created).toMatchObject({ email: 'Ops@Example.com', accounts: [account], zones: [{ id: zone, account_id: account }] });
      expect(created.keys).toHaveLength(1);
      expect(created.keys[0]!.hint).toBe(key.slice(-4));
      expect(created.created_on).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
      expect((await store.users.get('ops@example.com'))?.id).toBe(created.id);
      await expect(store.users.create({ email: 'OPS@example.com', accounts: [account] })).rejects.toMatchObject({ code: 7400, message: 'a user with email OPS@example.com already exists' });
      await store.users.create({ email: 'b@example.com', accounts: [account] });
      await store.users.create({ email: 'a@example.com', accounts: [account] });
      expect((await store.users.list()).map((u) => u.email)).toEqual(['a@example.com', 'b@example.com', 'Ops@Example.com']);
      expect(await store.users.count()).toBe(3);
      expect(await store.users.zoneAccount(zone)).toBe(account);
      expect(await store.users.zoneAccount(newId())).toBeUndefined();
      expect((await store.users.accountRows([account, newId(), account])).map((a) => a.id)).toEqual([account]);
      expect((await store.users.zoneRows([account], [])).map((z) => [z.id, z.account_id])).toEqual([[zone, account]]);
      await expect(store.users.create({ email: 'c@example.com', accounts: [newId()], zones: [zone] })).rejects.toMatchObject({ code: 7400, message: expect.stringContaining(`zone ${zone} belongs to account ${account}`) });
    });

    it('verifies a key until it is revoked, even right after a verification was remembered', async () => {
      const { user: u, key } = await store.users.create({ email: 'k@example.com', accounts: [account] });
      const check = await store.users.verifyKey('k@example.com', key, () => false);
      expect(check.outcome).toBe('ok');
      expect(check.outcome === 'ok' && [check.principal.userId, check.principal.via, [...check.principal.accounts]]).toEqual([u.id, 'key', [account]]);
      expect((await store.users.verifyKey('k@example.com', key, () => false)).outcome).toBe('ok');
      expect((await store.users.verifyKey('k@example.com', `${key}x`, () => false)).outcome).toBe('unknown');
      expect((await store.users.verifyKey('other@example.com', key, () => false)).outcome).toBe('unknown');
      const second = await store.users.addKey('k@example.com');
      expect(await store.users.revoke('k@example.com', u.keys[0]!.id)).toBe(1);
      expect((await store.users.verifyKey('k@example.com', key, () => false)).outcome).toBe('unknown');
      expect((await store.users.verify('k@example.com', second))?.userId).toBe(u.id);
      await expect(store.users.revoke('k@example.com', u.keys[0]!.id)).rejects.toMatchObject({ code: 7401 });
      await expect(store.users.revoke('nobody@example.com')).rejects.toMatchObject({ code: 7401, message: 'no user with email nobody@example.com' });
      expect(await store.users.revoke('k@example.com')).toBe(1);
      expect(await store.users.verify('k@example.com', second)).toBeUndefined();
      expect((await store.users.get('k@example.com'))!.keys.map((k) => k.revoked_on !== null)).toEqual([true, true]);
    });

    it('scopes a token to accounts of its user, verifies it until revoked, and lists tokens by user', async () => {
      const other = newId();
      await store.users.create({ email: 't@example.com', accounts: [account, other] });
      await store.users.create({ email: 's@example.com', accounts: [account] });
      const { info, token } = await store.tokens.create({ email: 't@example.com', name: ' ci ', accounts: [other], readOnly: true });
      expect(info).toMatchObject({ name: 'ci', email: 't@example.com', accounts: [other], read_only: true, revoked_on: null });
      expect(token).toMatch(/^[A-Za-z0-9_-]{40}$/);
      const p = await store.tokens.verify(token);
      expect(p && [p.keyId, p.via, p.readOnly, [...p.accounts]]).toEqual([info.id, 'token', true, [other]]);
      await expect(store.tokens.create({ email: 's@example.com', name: 'x', accounts: [other] })).rejects.toMatchObject({ code: 7400, message: expect.stringContaining(`has no access to account ${other}`) });
      await expect(store.tokens.create({ email: 'nobody@example.com', name: 'x' })).rejects.toMatchObject({ code: 7401 });
      const all = await store.tokens.create({ email: 's@example.com', name: 'all' });
      expect((await store.tokens.list('T@example.com')).map((t) => t.id)).toEqual([info.id]);
      expect((await store.tokens.list()).map((t) => t.id).sort()).toEqual([info.id, all.info.id].sort());
      await store.tokens.revoke(info.id);
      expect(await store.tokens.verify(token)).toBeUndefined();
      expect((await store.tokens.get(info.id))?.revoked_on).not.toBeNull();
      await expect(store.tokens.revoke(info.id)).rejects.toMatchObject({ code: 7401 });
    });

    it('registers daemons with names unique per account, records their status, and revokes them by name', async () => {
      await store.users.create({ email: 'd@example.com', accounts: [account] });
      const b = await store.daemons.create({ accountId: account, name: 'edge-b' });
      const a = await store.daemons.create({ accountId: account, name: 'edge-a' });
      expect(b.token).toMatch(/^moatd_[A-Za-z0-9_-]{40}$/);
      await expect(store.daemons.create({ accountId: account, name: 'edge-a' })).rejects.toMatchObject({ code: 7400, message: expect.stringContaining('already has a daemon named "edge-a"') });
      await expect(store.daemons.create({ accountId: newId(), name: 'x' })).rejects.toMatchObject({ code: 7401 });
      expect(await store.daemons.verify(a.token)).toEqual({ id: a.info.id, name: 'edge-a', account_id: account, zone_id: null, revoked: false });
      expect(await store.daemons.verify(`moatd_${'x'.repeat(40)}`)).toBeUndefined();
      await store.daemons.recordStatus([
        { kind: 'connected', id: a.info.id, at: '2026-01-01T00:00:00.000000Z', remoteAddress: '127.0.0.1', moatVersion: '1.2.3' },
        { kind: 'applied', id: a.info.id, at: '2026-01-01T00:00:01.000000Z', digest: 'abc', versions: { account: '3', zone: null }, rulesets: [{ id: 'r', version: '3' }] },
        { kind: 'seen', id: a.info.id, at: '2026-01-01T00:00:02.000000Z', counters: { passed: 5, dropped: 1, undecodable: 0, swaps: 1 } },
      ]);
      const listed = await store.daemons.list({ accountId: account });
      expect(listed.map((d) => d.name)).toEqual(['edge-a', 'edge-b']);
      expect(listed[0]).toMatchObject({ connected: true, connected_since: '2026-01-01T00:00:00.000000Z', digest: 'abc', versions: { account: '3', zone: null }, rulesets: [{ id: 'r', version: '3' }], counters: { passed: 5, dropped: 1, undecodable: 0, swaps: 1 }, last_seen: '2026-01-01T00:00:02.000000Z' });
      // A disconnection of an older connection leaves the current one connected.
      await store.daemons.recordStatus([{ kind: 'disconnected', id: a.info.id, at: '2026-01-01T00:00:03.000000Z', since: '2025-12-31T00:00:00.000000Z' }]);
      expect((await store.daemons.get(a.info.id))?.connected).toBe(true);
      expect((await store.daemons.revoke('edge-b', account)).revoked_on).not.toBeNull();
      expect(await store.daemons.revokedAmong([a.info.id, b.info.id])).toEqual([b.info.id]);
      expect((await store.daemons.verify(b.token))?.revoked).toBe(true);
      await expect(store.daemons.revoke('edge-b')).rejects.toMatchObject({ code: 7401, message: expect.stringContaining('already revoked') });
    });

    it('records a batch of status updates of many daemons in order: runs of one kind at once, a daemon repeated later in the batch after its earlier updates', async () => {
      await store.users.create({ email: 'f@example.com', accounts: [account] });
      const ds = [];
      for (let i = 0; i < 5; i++) ds.push((await store.daemons.create({ accountId: account, name: `fleet-${i}` })).info.id);
      const t = (s: number) => `2026-02-01T00:00:0${s}.000000Z`;
      const counters = (n: number) => ({ passed: n, dropped: 0, undecodable: 0, swaps: 1 });
      await store.daemons.recordStatus([
        ...ds.map((id, i) => ({ kind: 'connected' as const, id, at: t(0), remoteAddress: `10.0.0.${i}`, moatVersion: '1.0.0' })),
        ...ds.map((id, i) => ({ kind: 'applied' as const, id, at: t(1), digest: `d${i}`, versions: { account: String(i + 1), zone: i === 0 ? '7' : null }, rulesets: [{ id: 'r', version: String(i + 1) }] })),
        ...ds.map((id, i) => ({ kind: 'seen' as const, id, at: t(2), counters: counters(i * 10) })),
        // Without counters: last_seen only, the counters above kept.
        { kind: 'seen', id: ds[1]!, at: t(3) },
        { kind: 'seen', id: ds[2]!, at: t(3) },
        { kind: 'rejected', id: ds[3]!, at: t(4), rejection: { digest: 'bad', on: t(4), errors: [{ code: 5001, message: 'no', pointer: '/rules/0' }] } },
        { kind: 'rejected', id: ds[4]!, at: t(4), rejection: { digest: 'worse', on: t(4), errors: [] } },
        // Daemon 0's recorded connection ends; daemon 1's of another connection changes nothing (not even last_seen); daemon 0 comes back in the same batch.
        { kind: 'disconnected', id: ds[0]!, at: t(5), since: t(0) },
        { kind: 'disconnected', id: ds[1]!, at: t(5), since: t(9) },
        { kind: 'disconnected', id: ds[0]!, at: t(6), since: t(0) },
        { kind: 'connected', id: ds[0]!, at: t(7), remoteAddress: '10.9.9.9', moatVersion: '1.0.1' },
      ]);
      const got = new Map((await store.daemons.list({ accountId: account })).map((d) => [d.name, d]));
      expect(got.get('fleet-0')).toMatchObject({ connected: true, connected_since: t(7), remote_address: '10.9.9.9', moat_version: '1.0.1', digest: 'd0', versions: { account: '1', zone: '7' }, counters: counters(0), last_seen: t(7) });
      expect(got.get('fleet-1')).toMatchObject({ connected: true, connected_since: t(0), remote_address: '10.0.0.1', digest: 'd1', versions: { account: '2', zone: null }, rulesets: [{ id: 'r', version: '2' }], counters: counters(10), last_seen: t(3) });
      expect(got.get('fleet-2')).toMatchObject({ connected: true, counters: counters(20), last_seen: t(3), last_rejection: null });
      expect(got.get('fleet-3')).toMatchObject({ digest: 'd3', counters: counters(30), last_seen: t(4), last_rejection: { digest: 'bad', on: t(4), errors: [{ code: 5001, message: 'no', pointer: '/rules/0' }] } });
      expect(got.get('fleet-4')).toMatchObject({ digest: 'd4', last_seen: t(4), last_rejection: { digest: 'worse', on: t(4), errors: [] } });
    });

    it('numbers versions 1, 2, 3 and never gives a deleted number again; the latest moves back when the latest is deleted', async () => {
      await store.users.create({ email: 'r@example.com', accounts: [account] });
      const id = newId();
      const rule = (rid: string, v: number, expression: string) => ({ id: rid, version: String(v), action: 'block', expression, description: '', last_updated: '2026-01-01T00:00:00.000000Z', ref: rid, enabled: true });
      const level = { accountId: account, zoneId: null };
      const fingerprint0 = await store.daemons.deploymentFingerprint(account, null);
      await store.write(async (tx) => {
        await tx.rulesets.insert({ id, account_id: account, zone_id: null, kind: 'root', phase: 'network_transit', name: 'root', description: 'd0', created_on: '2026-01-01T00:00:00.000000Z' });
        expect(await tx.rulesets.addVersion(id, 'd1', '2026-01-01T00:00:01.000000Z', [rule('r1', 1, 'ip.src eq 192.0.2.1')], { lists: ['bad'], executes: [] })).toBe(1);
      });
      const stamp1 = await store.rulesets.entrypointStamp(level, 'network_transit');
      expect(stamp1).toMatchObject({ id, kind: 'root', account_id: account, zone_id: null, stamp_version: 1 });
      expect(await store.daemons.deploymentFingerprint(account, null)).not.toBe(fingerprint0);
      expect(await store.write((tx) => tx.rulesets.addVersion(id, 'd2', '2026-01-01T00:00:02.000000Z', [rule('r2', 1, 'tcp.dstport eq 22'), rule('r1', 1, 'ip.src eq 192.0.2.1')], { lists: [], executes: [] }))).toBe(2);
      expect((await store.rulesets.entrypointStamp(level, 'network_transit'))?.stamp_version).toBe(2);
      expect(await store.write((tx) => tx.rulesets.addVersion(id, 'd3', '2026-01-01T00:00:03.000000Z', [rule('r1', 2, 'ip.src eq 192.0.2.9')], { lists: [], executes: [] }))).toBe(3);
      expect((await store.rulesets.version(id, 2))?.rules.map((r) => r.id)).toEqual(['r2', 'r1']);
      await store.write((tx) => tx.rulesets.deleteVersion(id, 3));
      expect(await store.rulesets.get(id)).toMatchObject({ latest_version: 2, last_version: 3, description: 'd2' });
      expect(await store.write((tx) => tx.rulesets.addVersion(id, 'd4', '2026-01-01T00:00:04.000000Z', [rule('r1', 3, 'ip.src eq 192.0.2.8')], { lists: [], executes: [] }))).toBe(4);
      expect((await store.rulesets.versions(id)).map((v) => [v.version, v.description])).toEqual([[1, 'd1'], [2, 'd2'], [4, 'd4']]);
      expect(await store.rulesets.version(id, 3)).toBeUndefined();
      expect((await store.rulesets.version(id, 1))?.rules).toEqual([rule('r1', 1, 'ip.src eq 192.0.2.1')]);
      expect((await store.rulesets.stamp(id, 4))?.stamp_version).toBe(4);
      expect(await store.rulesets.stamp(id, 3)).toBeUndefined();
    });

    it("changes a deployment's fingerprint on what a daemon of it runs (either entrypoint, a ruleset it executes, a list's content, a managed list), and on nothing else", async () => {
      const zoneId = newId();
      await store.users.create({ email: 'f@example.com', accounts: [account], zones: [zoneId] });
      const other = newId();
      await store.users.create({ email: 'g@example.com', accounts: [other] });
      const rule = (rid: string, expression: string) => ({ id: rid, version: '1', action: 'block', expression, description: '', last_updated: '2026-01-01T00:00:00.000000Z', ref: rid, enabled: true });
      const fp = () => store.daemons.deploymentFingerprint(account, zoneId);
      const seen = new Set<string>();
      /** The fingerprint now, which must be new (changed) or the last one seen (unchanged). */
      let last = await fp();
      seen.add(last);
      const expectChange = async (changed: boolean) => {
        const now = await fp();
        if (changed) {
          expect(seen.has(now)).toBe(false);
          seen.add(now);
        } else expect(now).toBe(last);
        last = now;
      };
      const [root, zone, managed] = [newId(), newId(), newId()];
      await store.rulesets.insert({ id: managed, account_id: null, zone_id: null, kind: 'managed', phase: 'network_transit', name: 'm', description: '', created_on: '2026-01-01T00:00:00.000000Z' });
      await store.write((tx) => tx.rulesets.addVersion(managed, '', '2026-01-01T00:00:01.000000Z', [rule('m1', 'tcp.dstport eq 1')], { lists: [], executes: [] }));
      await expectChange(false); // a managed ruleset nobody executes yet
      await store.write(async (tx) => {
        await tx.rulesets.insert({ id: root, account_id: account, zone_id: null, kind: 'root', phase: 'network_transit', name: 'root', description: '', created_on: '2026-01-01T00:00:00.000000Z' });
        await tx.rulesets.addVersion(root, '', '2026-01-01T00:00:01.000000Z', [rule('r1', 'ip.src eq 192.0.2.1')], { lists: [], executes: [{ id: managed, version: null }] });
      });
      await expectChange(true);
      await store.write(async (tx) => {
        await tx.rulesets.insert({ id: zone, account_id: account, zone_id: zoneId, kind: 'zone', phase: 'network_transit', name: 'zone', description: '', created_on: '2026-01-01T00:00:00.000000Z' });
        await tx.rulesets.addVersion(zone, '', '2026-01-01T00:00:01.000000Z', [rule('z1', 'ip.src eq 192.0.2.2')], { lists: [], executes: [] });
      });
      await expectChange(true);
      expect(await store.daemons.deploymentFingerprint(account, null)).not.toBe(last); // the account level alone leaves the zone out
      await store.write((tx) => tx.rulesets.addVersion(zone, '', '2026-01-01T00:00:02.000000Z', [rule('z1', 'ip.src eq 192.0.2.3')], { lists: [], executes: [] }));
      await expectChange(true);
      await store.write((tx) => tx.rulesets.addVersion(managed, '', '2026-01-01T00:00:02.000000Z', [rule('m1', 'tcp.dstport eq 2')], { lists: [], executes: [] }));
      await expectChange(true); // executed at its latest version
      const list = await store.lists.create(account, { name: 'l', kind: 'ip', description: '' }, 10);
      await expectChange(true);
      const op = await store.lists.enqueue(account, list.id, 'append', [{ ip: '192.0.2.9' }]);
      await expectChange(false); // queued, not applied
      await store.write((tx) => tx.lists.applyOperation(op, 100));
      await expectChange(true);
      await store.lists.loadManaged('svc.malware', ['192.0.2.0/24'], 'malware');
      await expectChange(true);
      await store.lists.loadManaged('svc.malware', ['192.0.2.0/25'], 'malware');
      await expectChange(true);
      // Another account's list and a ruleset that is no entrypoint change nothing.
      const otherList = await store.lists.create(other, { name: 'l', kind: 'ip', description: '' }, 10);
      const otherOp = await store.lists.enqueue(other, otherList.id, 'append', [{ ip: '192.0.2.10' }]);
      expect(await store.write((tx) => tx.lists.applyOperation(otherOp, 100))).toBe('completed');
      const custom = newId();
      await store.rulesets.insert({ id: custom, account_id: account, zone_id: null, kind: 'custom', phase: 'network_transit', name: 'c', description: '', created_on: '2026-01-01T00:00:00.000000Z' });
      await store.write((tx) => tx.rulesets.addVersion(custom, '', '2026-01-01T00:00:01.000000Z', [rule('c1', 'tcp.dstport eq 3')], { lists: [], executes: [] }));
      await expectChange(false);
    });

    it('pages the rulesets of a level in creation order, managed ones included, and tells who executes a ruleset', async () => {
      await store.users.create({ email: 'p@example.com', accounts: [account] });
      const ids: string[] = [];
      for (const [i, kind] of ['custom', 'managed', 'custom', 'custom'].entries()) {
        const id = newId();
        ids.push(id);
        await store.rulesets.insert({ id, account_id: kind === 'managed' ? null : account, zone_id: null, kind, phase: 'network_transit', name: `n${i}`, description: '', created_on: '2026-01-01T00:00:00.000000Z' });
      }
      const level = { accountId: account, zoneId: null };
      const first = await store.rulesets.list(level, 0, 2);
      expect(first.map((r) => r.id)).toEqual(ids.slice(0, 2));
      const rest = await store.rulesets.list(level, first[1]!.rowid, 10);
      expect(rest.map((r) => r.id)).toEqual(ids.slice(2));
      expect((await store.rulesets.list({ accountId: newId(), zoneId: null }, 0, 10)).map((r) => r.id)).toEqual([ids[1]]);
      expect((await store.rulesets.managedByName('n1'))?.id).toBe(ids[1]);
      expect((await store.rulesets.managed()).map((r) => r.id)).toEqual([ids[1]]);
      await store.rulesets.setRefs(ids[0]!, { lists: ['a', 'a'], executes: [{ id: ids[1]!, version: 2 }] });
      expect(await store.rulesets.executedBy(ids[1]!)).toEqual([{ ruleset_id: ids[0], target_version: 2 }]);
      await store.rulesets.delete(ids[0]!);
      expect(await store.rulesets.executedBy(ids[1]!)).toEqual([]);
      expect(await store.rulesets.get(ids[0]!)).toBeUndefined();
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

    it('lets only the holder of an outbox row\'s lease record its attempt: a worker that overran its lease records nothing over its successor', async () => {
      const payload = JSON.stringify({ name: 'n', description: 'd', alert_type: 'load_balancing_health_alert', text: 't', subject: 's' });
      const now = 1_800_000_000_000;
      const id = await store.outbox.enqueue({ accountId: account, policyId: null, eventId: newId(), mechanismType: 'webhook', target: 't', payload, nowMs: now });
      const [late] = await store.write((tx) => tx.outbox.claim('h:1:late', now + 1, 1000, 1));
      const [next] = await store.write((tx) => tx.outbox.claim('h:2:next', now + 5000, 1000, 1));
      expect([late!.id, next!.id]).toEqual([id, id]);
      // The first worker wakes up after its lease and tries to record a delivery: refused, the row stays the successor's.
      expect(await store.write((tx) => tx.outbox.record(late!, now + 5001, { ok: true, statusCode: 200 }, undefined))).toBe('stale');
      expect(await store.write((tx) => tx.outbox.claim('h:3:other', now + 5002, 1000, 1))).toEqual([]);
      expect(await store.write((tx) => tx.outbox.record(next!, now + 5003, { ok: true, statusCode: 200 }, undefined))).toBe('delivered');
      // Recorded once: a second record of the same claim is stale too.
      expect(await store.write((tx) => tx.outbox.record(next!, now + 5004, { ok: true, statusCode: 200 }, undefined))).toBe('stale');
      const history = await store.outbox.history(account, { page: 1, perPage: 50 });
      expect(history.items.map((h) => h.outcome).sort()).toEqual(['delivered', 'failed']);
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
