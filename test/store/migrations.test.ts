// Schema migrations carry existing data forward: a database written at schema
// 1 (rules stored whole in every version) opens at the latest schema with the
// same rulesets, versions and rules, and rule bodies are shared between versions.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

describe('migrating from schema 2', () => {
  it('adds API tokens to a database with users, whose keys keep working', () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-migrate-'));
    dirs.push(dir);
    const raw = new BetterSqlite3(join(dir, 'moat.db'));
    raw.exec(MIGRATIONS[0]!);
    raw.exec(MIGRATIONS[1]!);
    raw.pragma('user_version = 2');
    raw.close();
    const before = Database.open(dir);
    // Written at the latest schema by this Moat, then rolled back to a schema-2 shape below.
    const { key } = new Users(before).create({ email: 'old@example.com', accounts: [ACCOUNT] });
    before.db.exec('DROP TABLE api_token_accounts; DROP TABLE api_tokens');
    // Migration 4 (daemons, list generations) is undone too.
    before.db.exec('DROP TABLE daemons; DROP TRIGGER lists_generation; DROP TRIGGER managed_lists_generation; ALTER TABLE lists DROP COLUMN generation; ALTER TABLE managed_lists DROP COLUMN generation');
    before.db.pragma('user_version = 2');
    before.close();

    const store = Database.open(dir);
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
