// `moat migrate-store` on a real installation: `moat serve` on a SQLite data
// directory, filled through its API and the operator commands (users and
// keys, tokens, rulesets with many versions, a list and its bulk operation,
// a managed ruleset, a daemon, a monitor and a pool whose origin is down, a
// webhook and a policy, so health events, outbox rows and history exist), is
// copied into a throwaway PostgreSQL cluster; `moat serve --database` on the
// copy then answers the same reads byte for byte, with the old credentials.
// Then the refusals: a non-empty target, a bad URL, an unreachable server, a
// table with no PostgreSQL twin, and a copy whose digest does not match.
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, moat } from '../support/cli.js';
import { ChannelClient } from '../support/channel-client.js';
import { PHASE, printedCredentials, serveProcess, type ServeProcess } from '../support/api.js';
import { requirePostgres, usePostgres } from '../support/postgres.js';
import { migrateStore, tableDigest, canonicalValue, PG_MIGRATIONS } from '../../src/store/index.js';
import { MIGRATIONS } from '../../src/store/migrations.js';

const run = requirePostgres();
const cluster = usePostgres(run);
const children: ServeProcess[] = [];
const dirs: string[] = [];
let receiver: Server;
let receiverUrl = '';
let received = 0;
let origin: Server;
let originStatus = 200;

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'moat-migrate-'));
  dirs.push(d);
  return d;
}

async function serve(dir: string, extra: readonly string[]): Promise<ServeProcess> {
  const s = await serveProcess(dir, extra);
  children.push(s);
  return s;
}

async function stop(s: ServeProcess): Promise<void> {
  s.child.kill('SIGTERM');
  await s.exited;
}

type Headers = Record<string, string>;

async function call(base: string, headers: Headers, method: string, path: string, body?: unknown): Promise<{ status: number; text: string; json: { result: Record<string, unknown> & { id: string } } }> {
  const res = await fetch(base + path, { method, headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) as { result: Record<string, unknown> & { id: string } } };
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  ensureBuilt();
  receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      received++;
      res.end('ok');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  origin = createServer((_req, res) => res.writeHead(originStatus).end('origin'));
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
}, 120_000);
afterEach(async () => {
  for (const s of children.splice(0)) {
    s.child.kill('SIGKILL');
    await s.exited;
  }
});
afterAll(() => {
  receiver?.close();
  origin?.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** What the installation built by `install` holds, for the checks after the copy. */
interface Installation {
  dir: string;
  base: string;
  headers: Headers;
  accountId: string;
  token: string;
  daemonToken: string;
  rulesetId: string;
  /** GET paths whose bodies must be the same on both servers. */
  reads: string[];
}

/** Fills a SQLite installation through `moat serve` and the operator commands; the server is stopped after. */
async function install(): Promise<Installation> {
  const dir = tempDir();
  const s = await serve(dir, ['--allow-private-webhooks', '--monitor-min-interval', '1']);
  const creds = printedCredentials(s);
  const headers = { 'X-Auth-Email': creds.email, 'X-Auth-Key': creds.key };
  const a = `/accounts/${creds.accountId}`;
  const api = (method: string, path: string, body?: unknown) => call(s.url, headers, method, path, body);

  const user = await moat('users', 'create', '--data-dir', dir, '--email', 'second@example.com', '--account', creds.accountId, '--json');
  expect(user.code, user.stderr).toBe(0);
  const tok = await moat('tokens', 'create', '--data-dir', dir, '--email', creds.email, '--name', 'ci', '--account', creds.accountId, '--json');
  expect(tok.code, tok.stderr).toBe(0);
  const token = (JSON.parse(tok.stdout) as { token: string }).token;
  const dmn = await moat('daemons', 'create', '--data-dir', dir, '--account', creds.accountId, '--name', 'gw1', '--json');
  expect(dmn.code, dmn.stderr).toBe(0);
  const daemonToken = (JSON.parse(dmn.stdout) as { token: string }).token;
  const malware = join(dir, 'malware.txt');
  writeFileSync(malware, '203.0.113.0/24\n198.51.100.9\n');
  const loaded = await moat('lists', 'load-managed', '--data-dir', dir, '--name', 'svc.malware', '--file', malware);
  expect(loaded.code, loaded.stderr).toBe(0);
  const managedFile = join(dir, 'managed.json');
  writeFileSync(managedFile, JSON.stringify({ name: 'Moat scanners', description: 'known scanners', rules: [{ action: 'block', expression: 'ip.src in {192.0.2.0/24}' }] }));
  const mgd = await moat('managed', 'import', '--data-dir', dir, '--file', managedFile);
  expect(mgd.code, mgd.stderr).toBe(0);
  const managedId = /managed ruleset "[^"]+" ([0-9a-f]{32}) /.exec(mgd.stdout)![1]!;
  // A second import of the same name: its version 2.
  writeFileSync(managedFile, JSON.stringify({ name: 'Moat scanners', description: 'known scanners', rules: [{ action: 'block', expression: 'ip.src in {192.0.2.0/24 203.0.113.0/24}' }] }));
  expect((await moat('managed', 'import', '--data-dir', dir, '--file', managedFile)).code).toBe(0);

  const list = await api('POST', `${a}/rules/lists`, { name: 'office', kind: 'ip', description: 'the office' });
  expect(list.status, list.text).toBe(200);
  const op = await api('POST', `${a}/rules/lists/${list.json.result.id}/items`, [{ ip: '198.51.100.0/24', comment: 'hq' }, { ip: '192.0.2.7' }, { ip: '2001:db8::/32' }]);
  const opId = op.json.result['operation_id'] as string;
  await until('the bulk operation', async () => ((await api('GET', `${a}/rules/lists/bulk_operations/${opId}`)).json.result['status'] === 'completed' ? true : undefined));

  const custom = await api('POST', `${a}/rulesets`, { name: 'ports', kind: 'custom', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 1' }] });
  expect(custom.status, custom.text).toBe(200);
  const rulesetId = custom.json.result.id;
  for (let v = 2; v <= 6; v++) {
    const r = await api('PUT', `${a}/rulesets/${rulesetId}`, { rules: [{ action: 'block', expression: `tcp.dstport == ${v}`, description: `v${v}` }] });
    expect(r.status, r.text).toBe(200);
  }
  for (const port of [22, 23, 25]) {
    const r = await api('PUT', `${a}/rulesets/phases/${PHASE}/entrypoint`, { rules: [{ action: 'block', expression: `tcp.dstport == ${port} and ip.src in $office` }, { action: 'execute', expression: 'true', action_parameters: { id: managedId } }] });
    expect(r.status, r.text).toBe(200);
  }

  const hook = await api('POST', `${a}/alerting/v3/destinations/webhooks`, { name: 'pager', url: receiverUrl, secret: 'a-secret-of-the-hook' });
  expect(hook.status, hook.text).toBe(200);
  const policy = await api('POST', `${a}/alerting/v3/policies`, { name: 'pool down', alert_type: 'load_balancing_health_alert', enabled: true, mechanisms: { webhooks: [{ id: hook.json.result.id }] } });
  expect(policy.status, policy.text).toBe(200);
  const monitor = await api('POST', `${a}/load_balancers/monitors`, { interval: 1, timeout: 1, retries: 0, description: 'http check' });
  expect(monitor.status, monitor.text).toBe(200);
  const pool = await api('POST', `${a}/load_balancers/pools`, { name: 'web', monitor: monitor.json.result.id, origins: [{ name: 'o1', address: '127.0.0.1', port: (origin.address() as AddressInfo).port }] });
  expect(pool.status, pool.text).toBe(200);
  // Healthy first (settling from unknown is no edge), then down: the health alert.
  await until('the pool healthy', async () => ((await api('GET', `${a}/load_balancers/pools/${pool.json.result.id}`)).json.result['healthy'] === true ? true : undefined));
  originStatus = 503;
  await until('a delivered health alert in the history', async () => {
    const h = await api('GET', `${a}/alerting/v3/history`);
    return (h.json.result as unknown as unknown[]).length > 0 ? true : undefined;
  });
  expect(received).toBeGreaterThan(1); // the webhook's test POST and at least one alert
  // The monitor off, so nothing changes health (and the bodies read) after the copy.
  const off = await api('PATCH', `${a}/load_balancers/pools/${pool.json.result.id}`, { monitor: null });
  expect(off.status, off.text).toBe(200);
  await stop(s);
  return {
    dir,
    base: s.url,
    headers,
    accountId: creds.accountId,
    token,
    daemonToken,
    rulesetId,
    reads: [
      `${a}/rulesets`,
      `${a}/rulesets/${rulesetId}`,
      `${a}/rulesets/${rulesetId}/versions`,
      `${a}/rulesets/${rulesetId}/versions/3`,
      `${a}/rulesets/phases/${PHASE}/entrypoint`,
      `${a}/rulesets/phases/${PHASE}/entrypoint/versions`,
      `${a}/rules/lists`,
      `${a}/rules/lists/${list.json.result.id}`,
      `${a}/rules/lists/${list.json.result.id}/items`,
      `${a}/rules/lists/bulk_operations/${opId}`,
      `${a}/load_balancers/monitors`,
      `${a}/load_balancers/pools`,
      `${a}/alerting/v3/policies`,
      `${a}/alerting/v3/destinations/webhooks`,
      `${a}/alerting/v3/history`,
    ],
  };
}

describe('canonical digests', () => {
  it('encode a value the same whether it came from SQLite or PostgreSQL, and order rows by key, not by arrival', () => {
    expect([null, 12, 12.5, 'a"b', Buffer.from([0, 255])].map(canonicalValue)).toEqual(['n', 'd12', 'd12.5', 's"a\\"b"', 'x00ff']);
    const one = tableDigest(['id', 'v'], ['id'], [['b', 2], ['a', 1]]);
    expect(one).toBe(tableDigest(['id', 'v'], ['id'], [['a', 1], ['b', 2]]));
    expect(one).not.toBe(tableDigest(['id', 'v'], ['id'], [['a', 1], ['b', 3]]));
    // Rows as `s"a",d1` lines, in key order, hashed: written out here, not by the code under test.
    expect(one).toBe(createHash('sha256').update('s"a",d1\ns"b",d2\n').digest('hex'));
  });
});

describe.runIf(run)('moat migrate-store', () => {
  let inst: Installation;
  beforeAll(async () => {
    inst = await install();
  }, 120_000);

  it('copies a whole installation: moat serve on the copy answers every read byte for byte, with the old key, token and daemon token', async () => {
    const url = await cluster().createDatabase('migrate');
    const r = await moat('migrate-store', '--from', inst.dir, '--to', url);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/copied \d+ row\(s\) in \d+ table\(s\) from .*moat\.db to 127\.0\.0\.1:\d+\/migrate_\S+; counts and digests match/);
    expect(r.stdout).not.toContain(cluster().password);
    for (const table of ['users', 'api_keys', 'api_tokens', 'api_token_accounts', 'auth_secret', 'managed_lists', 'managed_list_entries', 'ruleset_rules', 'alert_incidents', 'lb_origin_health', 'lb_pool_health', 'rulesets', 'ruleset_versions', 'lists', 'list_items', 'bulk_operations', 'daemons', 'lb_pools', 'lb_monitors', 'alert_policies', 'alert_webhooks', 'alert_outbox', 'alert_history', 'health_events']) {
      const line = r.stdout.split('\n').find((l) => l.startsWith(table + ' '));
      expect(line, table).toMatch(/^\S+\s+[1-9]\d*\s+[1-9]\d*\s+[0-9a-f]{16}\s+[0-9a-f]{16}\s+yes$/);
    }
    const rows = await cluster().admin<{ n: string }>('SELECT count(*)::text AS n FROM ruleset_versions', [], new URL(url).pathname.slice(1));
    // 6 versions of the custom ruleset, 3 of the entrypoint, 2 of the managed one.
    expect(Number(rows[0]!.n)).toBe(11);

    // The SQLite installation again, for the reference answers.
    const before = await serve(inst.dir, []);
    const expected = new Map<string, string>();
    for (const p of inst.reads) expected.set(p, (await call(before.url, inst.headers, 'GET', p)).text);
    await stop(before);

    const after = await serve(tempDir(), ['--database', url]);
    for (const p of inst.reads) {
      const got = await call(after.url, inst.headers, 'GET', p);
      expect(got.status, p).toBe(200);
      expect(got.text, p).toBe(expected.get(p));
    }
    const withToken = await call(after.url, { authorization: `Bearer ${inst.token}` }, 'GET', `/accounts/${inst.accountId}/rulesets`);
    expect(withToken.status).toBe(200);
    const ws = after.url.replace(/^http/, 'ws').replace(/\/client\/v4$/, '/moat/channel');
    const c = await ChannelClient.hello(ws, inst.daemonToken);
    try {
      expect((await c.next('welcome')).daemon.name).toBe('gw1');
    } finally {
      c.close();
    }
    // The next version of a copied ruleset is the next number, not 1.
    const next = await call(after.url, inst.headers, 'PUT', `/accounts/${inst.accountId}/rulesets/${inst.rulesetId}`, { rules: [] });
    expect(next.json.result['version']).toBe('7');
    // A new list after the copy sorts after the copied one (the rowid identity moved past the copied rowids).
    const second = await call(after.url, inst.headers, 'POST', `/accounts/${inst.accountId}/rules/lists`, { name: 'later', kind: 'ip' });
    expect(second.status, second.text).toBe(200);
    const ids = await cluster().admin<{ name: string; rowid: string }>('SELECT name, rowid::text FROM lists ORDER BY rowid', [], new URL(url).pathname.slice(1));
    expect(ids.map((x) => x.name)).toEqual(['office', 'later']);
    expect(Number(ids[1]!.rowid)).toBe(Number(ids[0]!.rowid) + 1);
  }, 120_000);

  it('refuses a target that holds Moat data (8030, nothing written) and replaces it with --replace-target', async () => {
    const url = await cluster().createDatabase('full');
    const db = new URL(url).pathname.slice(1);
    expect((await moat('migrate-store', '--from', inst.dir, '--to', url)).code).toBe(0);
    await cluster().admin("INSERT INTO moat_leases (name, owner, epoch, acquired_at, expires_at) VALUES ('x', 'y', 1, now(), now())", [], db);
    await cluster().admin("DELETE FROM ruleset_versions WHERE version = 2", [], db);
    const refused = await moat('migrate-store', '--from', inst.dir, '--to', url);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^moat: error 8030: the PostgreSQL database 127\.0\.0\.1:\d+\/full_\S+ already holds Moat data: .*moat_leases \(1\).*ruleset_versions \(8\).*--replace-target/);
    const verify = await moat('migrate-store', '--from', inst.dir, '--to', url, '--verify-only');
    expect(verify.code).toBe(1);
    expect(verify.stdout).toMatch(/^ruleset_versions\s+11\s+8\s+[0-9a-f]{16}\s+[0-9a-f]{16}\s+NO$/m);
    expect(verify.stdout).toMatch(/^users\s+2\s+2\s+([0-9a-f]{16})\s+\1\s+yes$/m);
    expect(verify.stderr).toContain('moat: error 8032: ');
    expect(verify.stderr).toContain('ruleset_versions (11 rows in SQLite, 8 in PostgreSQL)');

    const replaced = await moat('migrate-store', '--from', inst.dir, '--to', url, '--replace-target');
    expect(replaced.code, replaced.stderr).toBe(0);
    expect(replaced.stdout).toContain('replacing what it held: ');
    expect(replaced.stdout).toMatch(/moat_leases 1/);
    expect(await cluster().admin('SELECT * FROM moat_leases', [], db)).toEqual([]);
    const again = await moat('migrate-store', '--from', inst.dir, '--to', url, '--verify-only');
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toMatch(/verified: .* holds the same \d+ row\(s\)/);
  }, 60_000);

  it('finds a changed value with the same row count (a digest, not only counts), on verification after a copy and before its COMMIT', async () => {
    const url = await cluster().createDatabase('tamper');
    const db = new URL(url).pathname.slice(1);
    const err = await migrateStore({ from: inst.dir, to: url, beforeVerify: async (client) => void (await client.query("UPDATE list_items SET comment = 'changed' WHERE comment = 'hq'")) }).then(
      () => undefined,
      (e: unknown) => e as { code: number; message: string; report: { tables: { table: string; ok: boolean; sqliteRows: number; postgresRows: number }[] } },
    );
    expect(err?.code).toBe(8032);
    expect(err?.message).toContain('list_items (3 rows in SQLite, 3 in PostgreSQL, digests differ)');
    expect(err?.report.tables.filter((t) => !t.ok).map((t) => t.table)).toEqual(['list_items']);
    // Rolled back: the target is as empty as before (its schema excepted).
    expect(await cluster().admin('SELECT id FROM users', [], db)).toEqual([]);
    expect((await moat('migrate-store', '--from', inst.dir, '--to', url)).code).toBe(0);
    await cluster().admin("UPDATE alert_webhooks SET secret = 'stolen'", [], db);
    const v = await moat('migrate-store', '--from', inst.dir, '--to', url, '--verify-only', '--json');
    expect(v.code).toBe(1);
    const report = JSON.parse(v.stdout) as { tables: { table: string; ok: boolean }[]; ok: boolean };
    expect(report.ok).toBe(false);
    expect(report.tables.filter((t) => !t.ok).map((t) => t.table)).toEqual(['alert_webhooks']);
  }, 60_000);

  it('copies one snapshot of a SQLite file that is written during the copy', async () => {
    const url = await cluster().createDatabase('snap');
    const db = new URL(url).pathname.slice(1);
    const writer = new BetterSqlite3(join(inst.dir, 'moat.db'));
    let wrote = false;
    try {
      const report = await migrateStore({
        from: inst.dir,
        to: url,
        afterTableRead: (table) => {
          // After the first table is read, another connection commits a new user: not in this copy.
          if (wrote) return;
          wrote = true;
          writer.prepare("INSERT INTO users (id, email, created_on) VALUES ('ffffffffffffffffffffffffffffffff', 'late@example.com', '2026-01-01T00:00:00.000000Z')").run();
          expect(table).toBe('accounts');
        },
      });
      expect(report.ok).toBe(true);
      expect(report.tables.find((t) => t.table === 'users')!.postgresRows).toBe(2);
      expect(await cluster().admin("SELECT id FROM users WHERE email = 'late@example.com'", [], db)).toEqual([]);
      // Now the source holds a row the copy does not: verification says so.
      const v = await moat('migrate-store', '--from', inst.dir, '--to', url, '--verify-only');
      expect(v.code).toBe(1);
      expect(v.stdout).toMatch(/^users\s+3\s+2\s/m);
    } finally {
      writer.prepare("DELETE FROM users WHERE email = 'late@example.com'").run();
      writer.close();
    }
  }, 60_000);

  it('refuses a SQLite table with no PostgreSQL twin by name (8031), copying nothing', async () => {
    const dir = tempDir();
    const file = join(dir, 'moat.db');
    // A copy of the installation with one table more, as a future migration might add.
    const src = new BetterSqlite3(join(inst.dir, 'moat.db'), { readonly: true });
    await src.backup(file);
    src.close();
    const w = new BetterSqlite3(file);
    w.exec("CREATE TABLE future_things (id TEXT PRIMARY KEY) STRICT; ALTER TABLE daemons ADD COLUMN future_col TEXT");
    w.close();
    const url = await cluster().createDatabase('parity');
    const r = await moat('migrate-store', '--from', dir, '--to', url);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^moat: error 8031: the SQLite and PostgreSQL schemas differ, nothing was copied: column daemons\.future_col has no PostgreSQL counterpart; table future_things has no PostgreSQL counterpart$/);
    expect(await cluster().admin('SELECT id FROM users', [], new URL(url).pathname.slice(1))).toEqual([]);
    // A file of an older schema: migrated by this Moat's serve first, not copied half-known.
    const old = new BetterSqlite3(file);
    old.exec(`DROP TABLE future_things; ALTER TABLE daemons DROP COLUMN future_col; PRAGMA user_version = ${MIGRATIONS.length - 1}`);
    old.close();
    const older = await moat('migrate-store', '--from', dir, '--to', url);
    expect(older.code).toBe(1);
    expect(older.stderr).toMatch(/^moat: error 8031: .*moat\.db: schema version (\d+), this Moat's is (\d+); start `moat serve --data-dir` of this Moat on it once/);
    expect(/version (\d+), this Moat's is (\d+)/.exec(older.stderr)!.slice(1).map(Number)).toEqual([MIGRATIONS.length - 1, MIGRATIONS.length]);
  }, 60_000);

  it('names a bad URL (8020), an unreachable server (8021) and a missing source (8005)', async () => {
    const bad = await moat('migrate-store', '--from', inst.dir, '--to', 'mysql://u:secret@127.0.0.1/x');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^moat: error 8020: mysql:\/\/u:\*\*\*@127\.0\.0\.1\/x: a database URL starts with postgres:\/\//);
    const down = await moat('migrate-store', '--from', inst.dir, '--to', cluster().url().replace(`:${cluster().port}/`, ':1/'));
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/^moat: error 8021: cannot reach the PostgreSQL server at 127\.0\.0\.1:1\/postgres/);
    expect(down.stderr).not.toContain(cluster().password);
    const none = await moat('migrate-store', '--from', join(tmpdir(), 'moat-no-such-dir'), '--to', cluster().url());
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/^moat: error 8005: no database at .*moat-no-such-dir\/moat\.db/);
    // --verify-only on a database no copy was made into: its schema is missing, said as such.
    const empty = await moat('migrate-store', '--from', inst.dir, '--to', await cluster().createDatabase('empty'), '--verify-only');
    expect(empty.code).toBe(1);
    expect(empty.stderr).toMatch(/^moat: error 8031: the PostgreSQL database 127\.0\.0\.1:\d+\/empty_\S+ is at schema version 0, not (\d+): it is not a copy made by this Moat/);
    expect(Number(/not (\d+):/.exec(empty.stderr)![1])).toBe(PG_MIGRATIONS.length);
    const noTarget = await moat('migrate-store', '--from', inst.dir);
    expect(noTarget.code).toBe(2);
    expect(noTarget.stderr).toContain('give --to postgres://');
  }, 60_000);
});
