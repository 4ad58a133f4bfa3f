// Users' keys on a real SQLite file: stored as HMAC-SHA256 under one
// per-installation secret that survives a reopen, checked the same way (and
// in the same time) whether or not the email exists, and refused once revoked.
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Database, Users } from '../../src/store/index.js';

const ACCOUNT = '0123456789abcdef0123456789abcdef';
const dirs: string[] = [];
const stores: Database[] = [];
afterEach(() => {
  for (const s of stores.splice(0)) s.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function open(dir?: string): { dir: string; store: Database } {
  const d = dir ?? mkdtempSync(join(tmpdir(), 'moat-users-'));
  if (dir === undefined) dirs.push(d);
  const store = Database.open(d);
  stores.push(store);
  return { dir: d, store };
}

const secretOf = (store: Database) => (store.db.prepare('SELECT secret FROM auth_secret WHERE id = 1').get() as { secret: Buffer }).secret;

describe('keys', () => {
  it('are stored as HMAC-SHA256 of the key under the installation secret, with no salt and no scrypt', () => {
    const { store } = open();
    const users = new Users(store);
    const { key } = users.create({ email: 'ops@example.com', accounts: [ACCOUNT] });
    const row = store.db.prepare('SELECT scheme, salt, hash, hint FROM api_keys').get() as { scheme: string; salt: Buffer; hash: Buffer; hint: string };
    const secret = secretOf(store);
    expect(secret.length).toBe(32);
    expect(row.scheme).toBe('hmac-sha256');
    expect(row.salt.length).toBe(0);
    expect(row.hash.equals(createHmac('sha256', secret).update(key).digest())).toBe(true);
    expect(row.hint).toBe(key.slice(-4));
    expect(users.legacyKeyCount()).toBe(0);
  });

  it('keep one secret per installation: a second Users and a reopened database verify the same keys', () => {
    const { dir, store } = open();
    const { key } = new Users(store).create({ email: 'ops@example.com', accounts: [ACCOUNT] });
    const secret = secretOf(store);
    expect(new Users(store).verify('ops@example.com', key)?.email).toBe('ops@example.com');
    store.close();
    const again = open(dir).store;
    expect(secretOf(again).equals(secret)).toBe(true);
    const p = new Users(again).verify('OPS@example.com', key);
    expect(p).toMatchObject({ email: 'ops@example.com', via: 'key', readOnly: false });
    expect([...p!.accounts]).toEqual([ACCOUNT]);
  });

  it('differ between installations: the same key hashes differently in two data directories', () => {
    const a = open().store;
    const b = open().store;
    const key = 'the-same-key-in-both-0123456789';
    new Users(a).create({ email: 'ops@example.com', accounts: [ACCOUNT], key });
    new Users(b).create({ email: 'ops@example.com', accounts: [ACCOUNT], key });
    const hash = (s: Database) => (s.db.prepare('SELECT hash FROM api_keys').get() as { hash: Buffer }).hash;
    expect(hash(a).equals(hash(b))).toBe(false);
  });

  it('match only their own user, and not once revoked', () => {
    const { store } = open();
    const users = new Users(store);
    const key = 'shared-by-two-users-0123456789';
    users.create({ email: 'a@example.com', accounts: [ACCOUNT], key });
    users.create({ email: 'b@example.com', accounts: ['fedcba9876543210fedcba9876543210'], key });
    expect(users.verify('a@example.com', key)?.accounts.has(ACCOUNT)).toBe(true);
    expect(users.verify('b@example.com', key)?.accounts.has(ACCOUNT)).toBe(false);
    users.revoke('a@example.com');
    expect(users.verify('a@example.com', key)).toBeUndefined();
    expect(users.verify('b@example.com', key)?.email).toBe('b@example.com');
    expect(users.verifyKey('c@example.com', key, () => true)).toEqual({ outcome: 'unknown' });
  });

  it('are remembered once verified only until anything commits: a revocation or a new grant through another connection (another process) counts from the next turn of the event loop', async () => {
    const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
    const { dir, store } = open();
    const users = new Users(store);
    const { key } = users.create({ email: 'ops@example.com', accounts: [ACCOUNT] });
    expect(users.verify('ops@example.com', key)?.accounts.has(ACCOUNT)).toBe(true);
    // Verified again with no commit in between: from the memo, the same answer.
    expect(users.verify('ops@example.com', key)?.accounts.has(ACCOUNT)).toBe(true);
    const other = open(dir).store; // a second connection to the same file, as `moat users` in another process
    const OTHER_ACCOUNT = 'fedcba9876543210fedcba9876543210';
    other.db.prepare("INSERT INTO accounts VALUES (?, '2026-01-01T00:00:00.000000Z')").run(OTHER_ACCOUNT);
    other.db.prepare('INSERT INTO user_accounts SELECT id, ? FROM users WHERE email = ?').run(OTHER_ACCOUNT, 'ops@example.com');
    await nextTurn();
    expect(users.verify('ops@example.com', key)?.accounts.has(OTHER_ACCOUNT)).toBe(true);
    new Users(other).revoke('ops@example.com');
    await nextTurn();
    expect(users.verify('ops@example.com', key)).toBeUndefined();
    // Its own commits count at once.
    const again = users.addKey('ops@example.com');
    expect(users.verify('ops@example.com', again)?.email).toBe('ops@example.com');
    users.revoke('ops@example.com');
    expect(users.verify('ops@example.com', again)).toBeUndefined();
  });

  it('cost the same to refuse for a known and an unknown email (medians of 3,000 interleaved checks)', () => {
    const { store } = open();
    const users = new Users(store);
    users.create({ email: 'ops@example.com', accounts: [ACCOUNT] });
    for (let i = 0; i < 50; i++) users.create({ email: `user${i}@example.com`, accounts: [ACCOUNT] });
    const wrong = 'wrong-key-0123456789abcdef';
    const known: number[] = [];
    const unknown: number[] = [];
    const check = (email: string, into: number[]) => {
      const t = process.hrtime.bigint();
      const r = users.verifyKey(email, wrong, () => true);
      into.push(Number(process.hrtime.bigint() - t) / 1000);
      expect(r.outcome).toBe('unknown');
    };
    for (let i = 0; i < 500; i++) check('ops@example.com', []);
    const t0 = performance.now();
    for (let i = 0; i < 3000; i++) {
      // 3,000 checks take well under a second; scrypt's would take minutes: fail with a figure, not by timeout.
      if (i % 100 === 0) expect(performance.now() - t0, `${i} pairs took ${Math.round(performance.now() - t0)} ms`).toBeLessThan(5000);
      if (i % 2 === 0) {
        check('ops@example.com', known);
        check(`nobody${i}@example.com`, unknown);
      } else {
        check(`nobody${i}@example.com`, unknown);
        check('ops@example.com', known);
      }
    }
    const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!;
    const [mk, mu] = [median(known), median(unknown)];
    // scrypt made a known email cost 64 ms more; here both are one hash lookup that misses.
    expect(Math.abs(mk - mu), `known ${mk.toFixed(1)} µs, unknown ${mu.toFixed(1)} µs`).toBeLessThan(Math.max(5, 0.5 * Math.min(mk, mu)));
  });
});
