// Daemon identities and fleet status in a real SQLite file: tokens shown once
// and stored as SHA-256 only, names unique per account, zones of the account
// only, revocation by id or name, status batches, and the deployment
// fingerprint that tells the hub a list changed (even twice in a millisecond).
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MoatError } from '../../src/errors/index.js';
import { Daemons, Database, ListStore, Users, deploymentFingerprint, newId } from '../../src/store/index.js';

let dir: string;
let store: Database;
let daemons: Daemons;
const account = newId();
const zone = newId();
const otherAccount = newId();
const otherZone = newId();

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'moat-daemons-'));
  store = Database.open(dir);
  const users = new Users(store);
  users.create({ email: 'a@example.com', accounts: [account], zones: [zone] });
  users.create({ email: 'b@example.com', accounts: [otherAccount], zones: [otherZone] });
  daemons = new Daemons(store);
});
afterAll(() => {
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

function code(fn: () => unknown): number | undefined {
  try {
    fn();
  } catch (err) {
    return (err as MoatError).code;
  }
  return undefined;
}

describe('a daemon token', () => {
  it('is moatd_ and 40 random characters, stored only as its SHA-256', () => {
    const { info, token } = daemons.create({ accountId: account, name: 'gw-a' });
    expect(token).toMatch(/^moatd_[A-Za-z0-9_-]{40}$/);
    const row = store.db.prepare('SELECT hash FROM daemons WHERE id = ?').get(info.id) as { hash: Buffer };
    expect(row.hash.toString('hex')).toBe(createHash('sha256').update(token).digest('hex'));
    const dump = JSON.stringify(store.db.prepare('SELECT * FROM daemons').all());
    expect(dump).not.toContain(token.slice(6));
    expect(daemons.verify(token)).toEqual({ id: info.id, name: 'gw-a', account_id: account, zone_id: null, revoked: false });
    expect(daemons.verify(token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A'))).toBeUndefined();
    expect(daemons.verify('not a token')).toBeUndefined();
  });

  it('binds to a zone of its account only, under a name unique in the account', () => {
    expect(daemons.create({ accountId: account, zoneId: zone, name: 'gw-zone' }).info.zone_id).toBe(zone);
    expect(code(() => daemons.create({ accountId: account, zoneId: otherZone, name: 'x' }))).toBe(7400);
    expect(code(() => daemons.create({ accountId: account, name: 'gw-a' }))).toBe(7400);
    expect(code(() => daemons.create({ accountId: newId(), name: 'y' }))).toBe(7401);
    expect(code(() => daemons.create({ accountId: account, name: ' ' }))).toBe(7400);
    expect(code(() => daemons.create({ accountId: 'ACC', name: 'z' }))).toBe(7400);
    // The same name in another account is another daemon.
    expect(daemons.create({ accountId: otherAccount, name: 'gw-a' }).info.account_id).toBe(otherAccount);
  });

  it('is revoked by id, or by a name with its account when two accounts use it; revoked tokens verify as revoked', () => {
    expect(code(() => daemons.revoke('gw-a'))).toBe(7400);
    const r = daemons.revoke('gw-a', otherAccount);
    expect(r.revoked_on).not.toBeNull();
    expect(code(() => daemons.revoke(r.id))).toBe(7401);
    expect(code(() => daemons.revoke('nope'))).toBe(7401);
    expect(daemons.revokedAmong([r.id, daemons.list({ accountId: account })[0]!.id])).toEqual([r.id]);
  });
});

describe('fleet status', () => {
  it('is written in batches and read back as the fleet shows it', () => {
    const { info } = daemons.create({ accountId: account, name: 'gw-status' });
    daemons.recordStatus([
      { kind: 'connected', id: info.id, at: 't1', remoteAddress: '192.0.2.1', moatVersion: '1.2.3' },
      { kind: 'applied', id: info.id, at: 't2', digest: 'd'.repeat(64), versions: { account: '3', zone: null }, rulesets: [{ id: 'r', version: '3' }] },
      { kind: 'rejected', id: info.id, at: 't3', rejection: { digest: 'e'.repeat(64), on: 't3', errors: [{ code: 2001, message: 'unknown field' }] } },
      { kind: 'seen', id: info.id, at: 't4', counters: { passed: 5, dropped: 1, undecodable: 0, swaps: 2 } },
    ]);
    expect(daemons.get(info.id)).toMatchObject({
      connected: true,
      connected_since: 't1',
      remote_address: '192.0.2.1',
      moat_version: '1.2.3',
      digest: 'd'.repeat(64),
      versions: { account: '3', zone: null },
      rulesets: [{ id: 'r', version: '3' }],
      applied_on: 't2',
      last_rejection: { digest: 'e'.repeat(64), errors: [{ code: 2001, message: 'unknown field' }] },
      counters: { passed: 5, dropped: 1, undecodable: 0, swaps: 2 },
      last_seen: 't4',
    });
    // Status commits skip the fsync, and every other write still has it (synchronous=FULL is 2).
    expect(store.db.pragma('synchronous', { simple: true })).toBe(2);
    // A stale connection's end (the daemon has reconnected since, maybe to another control plane) changes nothing.
    daemons.recordStatus([{ kind: 'disconnected', id: info.id, at: 't5', since: 't0' }]);
    expect(daemons.get(info.id)).toMatchObject({ connected: true, disconnected_at: null });
    daemons.recordStatus([{ kind: 'disconnected', id: info.id, at: 't5', since: 't1' }]);
    expect(daemons.get(info.id)).toMatchObject({ connected: false, disconnected_at: 't5', digest: 'd'.repeat(64) });
  });
});

describe('the deployment fingerprint', () => {
  it('changes with every change of a list, even two within one millisecond, and not with another account\'s', () => {
    const lists = new ListStore(store);
    const list = lists.create(account, { name: 'office', kind: 'ip', description: '' }, 100);
    const before = deploymentFingerprint(store, account, null);
    const other = deploymentFingerprint(store, otherAccount, null);
    // Two content changes with the same modified_on stamp: only the generation tells them apart.
    store.write(() => store.db.prepare("UPDATE lists SET modified_on = '2020-01-01T00:00:00.000000Z' WHERE id = ?").run(list.id));
    const once = deploymentFingerprint(store, account, null);
    store.write(() => store.db.prepare("UPDATE lists SET modified_on = '2020-01-01T00:00:00.000000Z' WHERE id = ?").run(list.id));
    const twice = deploymentFingerprint(store, account, null);
    expect(new Set([before, once, twice]).size).toBe(3);
    expect(deploymentFingerprint(store, otherAccount, null)).toBe(other);
    lists.loadManaged('svc.malware', ['192.0.2.1'], 'x');
    expect(deploymentFingerprint(store, account, null)).not.toBe(twice);
  });
});
