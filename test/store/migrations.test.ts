// Schema migrations carry existing data forward: a database written at schema
// 1 (rules stored whole in every version) opens at the latest schema with the
// same rulesets, versions and rules, and rule bodies are shared between
// versions; keys stored as scrypt hashes (before schema 4) keep working and
// are re-hashed on first use.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHmac, randomBytes, scryptSync } from 'node:crypto';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { Database, RulesetStore, Tokens, Users, type StoredRule } from '../../src/store/index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const ACCOUNT = '0123456789abcdef0123456789abcdef';
const RS = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa';
const rule = (id: string, version: number, expression: string): StoredRule => ({
  id: id.repeat(32).slice(0, 32),
  version: String(version),
  action: 'block',
  expression,
  description: `rule ${id}`,
  last_updated: `2026-01-0${version}T00:00:00.000000Z`,
  ref: id.repeat(32).slice(0, 32),
  enabled: true,
});

describe('migrating from schema 1', () => {
  it('keeps every version and rule, and stores each rule version once', () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-migrate-'));
    dirs.push(dir);
    const raw = new BetterSqlite3(join(dir, 'moat.db'));
    raw.exec(MIGRATIONS[0]!);
    raw.pragma('user_version = 1');
    raw.prepare("INSERT INTO accounts VALUES (?, '2026-01-01T00:00:00.000000Z')").run(ACCOUNT);
    raw.prepare("INSERT INTO rulesets VALUES (?, ?, NULL, 'root', 'network_transit', 'default', '', 2, 2, '2026-01-01T00:00:00.000000Z')").run(RS, ACCOUNT);
    const v1 = [rule('1', 1, 'tcp.dstport == 1'), rule('2', 1, 'tcp.dstport == 2')];
    const v2 = [rule('3', 2, 'tcp.dstport == 3'), rule('2', 1, 'tcp.dstport == 2'), rule('1', 2, 'tcp.dstport == 11')];
    const ins = raw.prepare('INSERT INTO ruleset_versions VALUES (?, ?, ?, ?, ?)');
    ins.run(RS, 1, '', '2026-01-01T00:00:00.000000Z', JSON.stringify(v1));
    ins.run(RS, 2, 'second', '2026-01-02T00:00:00.000000Z', JSON.stringify(v2));
    raw.close();

    const store = Database.open(dir);
    expect(store.schemaVersion).toBe(MIGRATIONS.length);
    const rs = new RulesetStore(store);
    expect(rs.version(RS, 1)!.rules).toEqual(v1);
    expect(rs.version(RS, 2)!.rules).toEqual(v2);
    expect(rs.version(RS, 2)!.description).toBe('second');
    // rule 2 at version 1 is shared by both versions: four bodies, not five
    expect((store.db.prepare('SELECT count(*) AS n FROM ruleset_rules').get() as { n: number }).n).toBe(4);
    // deleting version 1 drops the body only it used (rule 1 at version 1)
    store.write(() => rs.deleteVersion(RS, 1));
    const left = store.db.prepare('SELECT rule_id, rule_version FROM ruleset_rules ORDER BY rule_id, rule_version').all() as { rule_id: string; rule_version: number }[];
    expect(left.map((r) => `${r.rule_id[0]}@${r.rule_version}`)).toEqual(['1@2', '2@1', '3@2']);
    expect(rs.version(RS, 2)!.rules).toEqual(v2);
    store.close();
  });
});

/** An api_keys row as a Moat before schema 4 wrote it: salted scrypt (N=16384, r=8, p=1), 32 bytes. */
function legacyKeyRow(raw: BetterSqlite3.Database, userId: string, keyId: string, key: string): void {
  const salt = randomBytes(16);
  raw.prepare("INSERT INTO api_keys (id, user_id, salt, hash, hint, created_on) VALUES (?, ?, ?, ?, ?, '2026-01-01T00:00:00.000000Z')").run(keyId, userId, salt, scryptSync(key, salt, 32), key.slice(-4));
}

/** A database at `schema` (2 or 3) holding one user whose key is stored as an older Moat stored it. */
function olderDatabase(schema: number, email: string, key: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'moat-migrate-'));
  dirs.push(dir);
  const raw = new BetterSqlite3(join(dir, 'moat.db'));
  for (let v = 0; v < schema; v++) raw.exec(MIGRATIONS[v]!);
  raw.pragma(`user_version = ${schema}`);
  raw.prepare("INSERT INTO accounts VALUES (?, '2026-01-01T00:00:00.000000Z')").run(ACCOUNT);
  raw.prepare("INSERT INTO users VALUES ('u1', ?, '2026-01-01T00:00:00.000000Z')").run(email);
  raw.prepare("INSERT INTO user_accounts VALUES ('u1', ?)").run(ACCOUNT);
  legacyKeyRow(raw, 'u1', 'k1', key);
  raw.close();
  return dir;
}

describe('migrating from schema 2', () => {
  it('adds API tokens to a database with users, whose keys keep working', () => {
    const key = 'legacykey' + '0'.repeat(20);
    const store = Database.open(olderDatabase(2, 'old@example.com', key));
    try {
      expect(store.schemaVersion).toBe(MIGRATIONS.length);
      const users = new Users(store);
      expect(users.verify('old@example.com', key)?.accounts.has(ACCOUNT)).toBe(true);
      const { token } = new Tokens(store, users).create({ email: 'old@example.com', name: 'after upgrade', readOnly: true });
      expect(new Tokens(store, users).verify(token)).toMatchObject({ email: 'old@example.com', via: 'token', readOnly: true });
    } finally {
      store.close();
    }
  });
});

describe('migrating from schema 3 (keys stored as scrypt hashes)', () => {
  const key = 'abcdefghijklmnopqrstuvwxyz0123456789a';
  const row = (store: Database) => store.db.prepare("SELECT scheme, length(salt) AS salt, hash FROM api_keys WHERE id = 'k1'").get() as { scheme: string; salt: number; hash: Buffer };

  it('keeps a legacy key working and re-hashes it to HMAC-SHA256 on its first successful use', () => {
    const dir = olderDatabase(3, 'old@example.com', key);
    const store = Database.open(dir);
    try {
      const users = new Users(store);
      const before = row(store);
      expect(before.scheme).toBe('scrypt');
      expect(users.legacyKeyCount()).toBe(1);
      // A wrong key leaves the row as it was.
      expect(users.verify('old@example.com', key.replace('a', 'b'))).toBeUndefined();
      expect(row(store).scheme).toBe('scrypt');
      const p = users.verify('old@example.com', key);
      expect(p).toMatchObject({ userId: 'u1', email: 'old@example.com', keyId: 'k1', via: 'key' });
      const after = row(store);
      expect(after.scheme).toBe('hmac-sha256');
      expect(after.salt).toBe(0);
      // HMAC-SHA256 of the key under the installation's secret, computed here independently.
      const secret = (store.db.prepare('SELECT secret FROM auth_secret').get() as { secret: Buffer }).secret;
      expect(secret.length).toBe(32);
      expect(after.hash.equals(createHmac('sha256', secret).update(key).digest())).toBe(true);
      expect(users.legacyKeyCount()).toBe(0);
    } finally {
      store.close();
    }
    // Reopened (a restart), the upgraded key still verifies, without scrypt.
    const again = Database.open(dir);
    try {
      const users = new Users(again);
      let scryptAsked = false;
      const r = users.verifyKey('old@example.com', key, () => (scryptAsked = true));
      expect(r.outcome).toBe('ok');
      expect(scryptAsked).toBe(false);
    } finally {
      again.close();
    }
  });

  it('asks before a scrypt check, and reports a legacy key it was not allowed to check as deferred, not as unknown', () => {
    const store = Database.open(olderDatabase(3, 'old@example.com', key));
    try {
      const users = new Users(store);
      expect(users.verifyKey('old@example.com', key, () => false)).toEqual({ outcome: 'legacy-deferred' });
      expect(row(store).scheme).toBe('scrypt');
      // An unknown email has no legacy keys: no scrypt check is asked for.
      let asked = 0;
      expect(users.verifyKey('nobody@example.com', key, () => (asked++, true))).toEqual({ outcome: 'unknown' });
      expect(asked).toBe(0);
    } finally {
      store.close();
    }
  });
});
