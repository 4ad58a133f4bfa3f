// `moat serve --database postgres://...` as real processes on a throwaway
// PostgreSQL cluster: the first replica creates the first user, a second
// replica on the same database sees it and answers with its key, a write
// through one replica is read through the other, MOAT_DATABASE_URL selects the
// same store, and the operator commands reach it with --database.
import { describe, expect, it } from 'vitest';
import { moat } from '../support/cli.js';
import { PHASE, printedCredentials, sdkClient, written, type ServeProcess } from '../support/api.js';
import { useServeReplicas } from '../support/serve-replicas.js';
import { requirePostgres, usePostgres } from '../support/postgres.js';
import { PG_MIGRATIONS } from '../../src/store/index.js';

const run = requirePostgres();
const cluster = usePostgres(run);
const replicas = useServeReplicas('moat-serve-pg-');
const tempDir = replicas.tempDir;

function serve(extra: readonly string[], env?: NodeJS.ProcessEnv): Promise<ServeProcess> {
  return replicas.start(extra, { env });
}

describe.runIf(run)('moat serve on PostgreSQL', () => {
  it('shares one database between two replicas: the first user made by one works on the other, and writes through one are read through the other', async () => {
    const url = await cluster().createDatabase('serve');
    const a = await serve(['--database', url]);
    expect(a.lines.join('\n')).toContain(`(database postgres://`);
    expect(a.lines.join('\n')).not.toContain(cluster().password);
    const creds = printedCredentials(a);
    const b = await serve(['--database', url]);
    expect(b.lines.some((l) => /moat: 1 user\(s\)/.test(l))).toBe(true);
    const ca = sdkClient(a.url, creds);
    const cb = sdkClient(b.url, creds);
    const created = await written(ca.rulesets.create({ account_id: creds.accountId, kind: 'root', name: 'edge', phase: PHASE, rules: [] }));
    const seen = await written(cb.rulesets.get(created.id, { account_id: creds.accountId }));
    expect(seen.name).toBe('edge');
    expect(seen.version).toBe('1');
    await written(cb.rulesets.update(created.id, { account_id: creds.accountId, rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] }));
    const again = await written(ca.rulesets.get(created.id, { account_id: creds.accountId }));
    expect(again.version).toBe('2');
    expect(again.rules.map((r) => r.expression)).toEqual(['tcp.dstport == 23']);
    // An entrypoint's stamp is remembered by each replica until a change notice arrives: B, having answered
    // version 2 (and remembered it), answers version 3 written through A once A's notice reaches it.
    expect((await cb.rulesets.phases.get(PHASE, { account_id: creds.accountId })).version).toBe('2');
    await written(ca.rulesets.update(created.id, { account_id: creds.accountId, rules: [{ action: 'block', expression: 'tcp.dstport == 24' }] }));
    const deadline = Date.now() + 5_000;
    let seenThrough: string | undefined;
    while (Date.now() < deadline && (seenThrough = (await cb.rulesets.phases.get(PHASE, { account_id: creds.accountId })).version) !== '3') await new Promise((r) => setTimeout(r, 20));
    expect(seenThrough).toBe('3');
  }, 60_000);

  it('starts three replicas at once on an empty database: the schema is migrated once and exactly one of them creates the first user', async () => {
    const url = await cluster().createDatabase('race');
    const replicas = await Promise.all([serve(['--database', url]), serve(['--database', url]), serve(['--database', url])]);
    const creators = replicas.filter((r) => r.lines.some((l) => l.includes('created the first user')));
    expect(creators).toHaveLength(1);
    expect(replicas.filter((r) => r.lines.some((l) => /moat: 1 user\(s\)/.test(l)))).toHaveLength(2);
    const db = new URL(url).pathname.slice(1);
    const users = await cluster().admin<{ n: string }>('SELECT count(*) AS n FROM users', [], db);
    expect(Number(users[0]!.n)).toBe(1);
    const applied = await cluster().admin<{ version: number }>('SELECT version FROM moat_schema ORDER BY version', [], db);
    expect(applied.map((r) => Number(r.version))).toEqual(PG_MIGRATIONS.map((_, i) => i + 1));
    // The key printed by the creator works through every replica.
    const creds = printedCredentials(creators[0]!);
    for (const r of replicas) expect((await sdkClient(r.url, creds).rulesets.list({ account_id: creds.accountId })).result).toEqual([]);
  }, 60_000);

  it('loses no acknowledged write when the replica that took it is killed with SIGKILL mid-stream', async () => {
    const url = await cluster().createDatabase('kill');
    const a = await serve(['--database', url]);
    const creds = printedCredentials(a);
    const b = await serve(['--database', url]);
    const ca = sdkClient(a.url, creds);
    const rs = await written(ca.rulesets.create({ account_id: creds.accountId, kind: 'root', name: 'k', phase: PHASE, rules: [] }));
    // Eight writers add rules through A as fast as it answers; A is killed after the 40th acknowledgement.
    const acked: string[] = [];
    let n = 0;
    const writer = async (): Promise<void> => {
      for (;;) {
        const ref = `w${n++}`;
        try {
          await ca.rulesets.rules.create(rs.id, { account_id: creds.accountId, action: 'block', expression: 'tcp.dstport == 1', ref });
        } catch {
          return; // the connection died with A: not acknowledged
        }
        acked.push(ref);
        if (acked.length === 40) a.child.kill('SIGKILL');
      }
    };
    await Promise.all(Array.from({ length: 8 }, writer));
    expect(acked.length).toBeGreaterThanOrEqual(40);
    const after = await written(sdkClient(b.url, creds).rulesets.get(rs.id, { account_id: creds.accountId }));
    const refs = new Set(after.rules.map((r) => r.ref));
    expect(acked.filter((r) => !refs.has(r))).toEqual([]);
    // Versions stay linear: one per rule that made it in, and nothing else.
    expect(after.version).toBe(String(after.rules.length + 1));
  }, 60_000);

  it('takes the URL from MOAT_DATABASE_URL, and the operator commands reach the same store with --database', async () => {
    const url = await cluster().createDatabase('env');
    const a = await serve([], { MOAT_DATABASE_URL: url });
    const creds = printedCredentials(a);
    const dir = tempDir();
    const made = await moat('users', 'create', '--data-dir', dir, '--database', url, '--email', 'ops@example.com', '--account', creds.accountId, '--json');
    expect(made.code, made.stderr).toBe(0);
    const key = (JSON.parse(made.stdout) as { key: string }).key;
    const listed = await moat('users', 'list', '--data-dir', dir, '--database', url);
    expect(listed.stdout).toContain('ops@example.com');
    expect(listed.stdout).toContain(creds.email);
    // The new user's key works on the running replica (a write by another process, seen at once).
    const rulesets = await sdkClient(a.url, { email: 'ops@example.com', key }).rulesets.list({ account_id: creds.accountId });
    expect(rulesets.result).toEqual([]);
  }, 60_000);

  it('fails at start with a coded error naming the server, password hidden, when PostgreSQL is unreachable', async () => {
    const bad = cluster().url().replace(`:${cluster().port}/`, ':1/');
    const r = await moat('serve', '--data-dir', tempDir(), '--listen', '127.0.0.1:0', '--database', bad);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/moat: error 8021: .*127\.0\.0\.1:1\//);
    expect(r.stderr).not.toContain(cluster().password);
  }, 60_000);
});
