// API tokens (Authorization: Bearer, the SDK's apiToken): created, listed and
// revoked with `moat tokens` on the database a server runs on, verified at
// GET /user/tokens/verify, scoped to accounts and to read or edit, stored
// hashed and never in clear; on each store.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Cloudflare from 'cloudflare';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DB_FILE, newId } from '../../src/store/index.js';
import { PHASE, rejection, written, type TestApi } from '../support/api.js';
import { apiBackends } from '../support/backends.js';
import { databaseOf } from '../support/postgres.js';
import { moat } from '../support/cli.js';

let api: TestApi;
const email = 'tokens@example.com';
const accountA = newId();
const accountB = newId();
const backends = apiBackends();

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    api = await backend.start();
    const r = await moat('users', 'create', ...api.storeArgs, '--email', email, '--account', accountA, '--account', accountB);
    expect(r.code, r.stderr).toBe(0);
  });

  afterAll(async () => {
    await api.dispose();
  });

  function tokenClient(token: string): Cloudflare {
    return new Cloudflare({ baseURL: api.base, apiToken: token, apiEmail: null, apiKey: null, maxRetries: 0, timeout: 10_000 });
  }

  async function createToken(...args: string[]): Promise<{ id: string; token: string; stdout: string }> {
    const r = await moat('tokens', 'create', ...api.storeArgs, '--email', email, ...args);
    expect(r.code, r.stderr).toBe(0);
    const token = /^Authorization: Bearer (\S+) {3}\(shown once; only a hash is stored\)$/m.exec(r.stdout)?.[1];
    const id = /^created token ([0-9a-f]{32}) /.exec(r.stdout)?.[1];
    if (token === undefined || id === undefined) throw new Error(`no token in ${r.stdout}`);
    return { id, token, stdout: r.stdout };
  }

  describe('API tokens', () => {
    it('verify as Cloudflare answers, read and write every account of the user by default, with the SDK\'s apiToken', async () => {
      const { id, token, stdout } = await createToken('--name', 'ci deploys');
      expect(token).toMatch(/^[A-Za-z0-9_-]{40}$/);
      expect(stdout).toContain(`"ci deploys"  ${email}  edit  all accounts of the user`);
      const sdk = tokenClient(token);
      expect(await sdk.user.tokens.verify()).toEqual({ id, status: 'active' });
      for (const account_id of [accountA, accountB]) {
        const rs = await written(sdk.rulesets.create({ account_id, name: 'by token', kind: 'custom', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] }));
        expect(rs.name).toBe('by token');
      }
      // Not the first user's account.
      const foreign = await rejection(sdk.rulesets.list({ account_id: api.accountId }).then((p) => p.result));
      expect([foreign.status, (foreign.errors[0] as { code: number }).code]).toEqual([403, 10000]);
    });

    it('keeps a token to its accounts: 403/10000 elsewhere', async () => {
      const { token } = await createToken('--name', 'only A', '--account', accountA);
      const sdk = tokenClient(token);
      expect((await sdk.rulesets.list({ account_id: accountA })).result.length).toBeGreaterThan(0);
      const other = await rejection(sdk.rulesets.create({ account_id: accountB, name: 'x', kind: 'custom', phase: PHASE, rules: [] }));
      expect([other.status, (other.errors[0] as { code: number }).code]).toEqual([403, 10000]);
      // A token cannot reach beyond its user.
      const beyond = await moat('tokens', 'create', ...api.storeArgs, '--email', email, '--name', 'x', '--account', api.accountId);
      expect(beyond.code).toBe(1);
      expect(beyond.stderr).toMatch(/error 7400: user tokens@example\.com has no access to account [0-9a-f]{32}/);
    });

    it('lets a read-only token read and answers its writes with 403/7402', async () => {
      const { token, stdout } = await createToken('--name', 'dashboards', '--read-only', '--account', accountA);
      expect(stdout).toContain(`"dashboards"  ${email}  read  account(s) ${accountA}`);
      const sdk = tokenClient(token);
      expect((await sdk.rulesets.list({ account_id: accountA })).result.length).toBeGreaterThan(0);
      const write = await rejection(sdk.rulesets.create({ account_id: accountA, name: 'x', kind: 'custom', phase: PHASE, rules: [] }));
      expect(write.status).toBe(403);
      expect(write.errors[0]).toMatchObject({ code: 7402, message: expect.stringMatching(/read-only/) });
      const raw = await fetch(`${api.base}/accounts/${accountA}/rules/lists`, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: '{"name":"l","kind":"ip"}' });
      expect(raw.status).toBe(403);
    });

    it('stops working on the next request once revoked, and lists tokens without them', async () => {
      const { id, token } = await createToken('--name', 'short-lived');
      const sdk = tokenClient(token);
      expect((await sdk.user.tokens.verify()).status).toBe('active');
      const listed = await moat('tokens', 'list', ...api.storeArgs, '--email', email, '--json');
      const tokens = JSON.parse(listed.stdout) as { id: string; name: string; revoked_on: string | null }[];
      expect(tokens.find((t) => t.id === id)).toMatchObject({ name: 'short-lived', revoked_on: null });
      expect(listed.stdout).not.toContain(token);
      expect(await moat('tokens', 'revoke', ...api.storeArgs, '--id', id)).toEqual({ code: 0, stdout: `revoked token ${id}`, stderr: '' });
      if (api.backend === 'postgres') {
        // The revocation came from another process: this server learns of it
        // with its NOTIFY (README, PostgreSQL: "as soon as the notice
        // arrives"), milliseconds after the command's commit, and remembers a
        // verified token until then. On SQLite the next request sees it.
        const noticed = Date.now() + 2000;
        while (Date.now() < noticed && (await sdk.user.tokens.verify().then(() => true, () => false))) await new Promise((r) => setTimeout(r, 10));
      }
      const after = await rejection(sdk.user.tokens.verify());
      expect([after.status, (after.errors[0] as { code: number }).code]).toEqual([403, 9109]);
      const again = await moat('tokens', 'revoke', ...api.storeArgs, '--id', id);
      expect([again.code, again.stderr]).toEqual([1, `moat: error 7401: no active token ${id} (see \`moat tokens list\`)`]);
    });

    it('stores only a hash of each token', async () => {
      const { token } = await createToken('--name', 'hashed');
      if (api.database !== undefined) {
        // PostgreSQL: every column of every token row, as text, is free of the token.
        const rows = await backend.cluster!().admin<{ hash: Buffer; whole: string }>('SELECT hash, t::text AS whole FROM api_tokens t', [], databaseOf(api.database));
        expect(rows.length).toBeGreaterThan(0);
        for (const r of rows) expect([r.hash.length, r.whole.includes(token)]).toEqual([32, false]);
        return;
      }
      const rows = api.store.db.prepare('SELECT hash FROM api_tokens').all() as { hash: Buffer }[];
      expect(rows.length).toBeGreaterThan(0);
      for (const r of rows) expect(r.hash.length).toBe(32);
      api.store.db.pragma('wal_checkpoint(TRUNCATE)');
      expect(readFileSync(join(api.dataDir, DB_FILE)).includes(Buffer.from(token))).toBe(false);
    });

    it('answers a malformed or unknown bearer token as Cloudflare does', async () => {
      const call = (authorization: string) => api.call('GET', `/accounts/${accountA}/rulesets`, undefined, { 'X-Auth-Email': undefined, 'X-Auth-Key': undefined, Authorization: authorization });
      for (const bad of ['Bearer', 'Bearer short', 'Basic dXNlcjpwYXNz', `Bearer ${'x'.repeat(41)}`]) {
        const r = await call(bad);
        expect(r.status, bad).toBe(400);
        expect(r.json.errors, bad).toEqual([{ code: 6003, message: 'Invalid request headers', error_chain: [{ code: 6111, message: 'Invalid format for Authorization header' }] }]);
      }
      const unknown = await call(`Bearer ${'A'.repeat(40)}`);
      expect([unknown.status, unknown.json.errors[0].code, unknown.json.errors[0].message]).toEqual([403, 9109, 'Invalid API Token']);
      // No credentials at all names both schemes.
      const none = await api.call('GET', `/accounts/${accountA}/rulesets`, undefined, { 'X-Auth-Email': undefined, 'X-Auth-Key': undefined });
      expect([none.status, none.json.errors[0].code]).toEqual([400, 6003]);
      expect(none.json.errors[0].message).toMatch(/Authorization: Bearer/);
      // verify is for tokens: a key is not one.
      const byKey = await api.call('GET', '/user/tokens/verify');
      expect([byKey.status, byKey.json.errors[0].code]).toEqual([403, 9109]);
    });
  });
});
