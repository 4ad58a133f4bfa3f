// What every route shares: the v4 envelope and JSON content type on every
// answer, body parsing errors (malformed, too large, not JSON), unknown routes,
// internal errors, and never a stack trace in an error body; on each store.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/store/index.js';
import { type TestApi } from '../support/api.js';
import { apiBackends } from '../support/backends.js';
import { databaseOf } from '../support/postgres.js';

let api: TestApi;
/** Every error body seen in this file, checked for stack traces at the end. */
const errorBodies: string[] = [];
const backends = apiBackends();

async function call(method: string, path: string, body?: unknown, headers?: Record<string, string | undefined>) {
  const r = await api.call(method, path, body, headers);
  if (r.status >= 400) errorBodies.push(r.text);
  return r;
}

function expectEnvelope(r: Awaited<ReturnType<TestApi['call']>>, success: boolean): void {
  expect(r.headers.get('content-type')).toMatch(/^application\/json\b/);
  expect(Object.keys(r.json).sort()).toEqual(expect.arrayContaining(['errors', 'messages', 'result', 'success']));
  expect(r.json.success).toBe(success);
  expect(Array.isArray(r.json.errors)).toBe(true);
  expect(r.json.messages).toEqual([]);
  if (!success) {
    expect(r.json.result).toBeNull();
    expect(r.json.errors.length).toBeGreaterThan(0);
    for (const e of r.json.errors) {
      expect(Number.isInteger(e.code)).toBe(true);
      expect(typeof e.message).toBe('string');
    }
  } else {
    expect(r.json.errors).toEqual([]);
  }
}

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    api = await backend.start();
  });

  afterAll(async () => {
    await api.dispose();
  });

  describe('the envelope', () => {
    it('wraps successes and failures alike, as application/json with success, errors, messages and result', async () => {
      const acct = `/accounts/${api.accountId}`;
      const created = await call('POST', `${acct}/rulesets`, { name: 'env', kind: 'custom', phase: 'network_transit', rules: [] });
      expectEnvelope(created, true);
      expect(created.json.result.name).toBe('env');
      const list = await call('GET', `${acct}/rulesets`);
      expectEnvelope(list, true);
      expect(list.json.result_info).toEqual({ count: 1 });
      const answers = [
        await call('GET', `${acct}/rulesets/${newId()}`),
        await call('GET', `${acct}/rulesets/phases/network_transit/entrypoint`),
        await call('POST', `${acct}/rulesets`, { name: '' }),
        await call('GET', `/accounts/${newId()}/rulesets`),
        await call('GET', `${acct}/rulesets`, undefined, { 'X-Auth-Key': undefined }),
        await call('GET', `${acct}/nowhere`),
      ];
      expect(answers.map((r) => r.status)).toEqual([404, 404, 400, 403, 400, 404]);
      for (const r of answers) expectEnvelope(r, false);
    });

    it('accepts a trailing slash and a charset on the content type', async () => {
      const r = await call('POST', `/accounts/${api.accountId}/rulesets/`, JSON.stringify({ name: 'slash', kind: 'custom', phase: 'network_transit' }), {
        'Content-Type': 'application/json; charset=utf-8',
      });
      expect(r.status).toBe(200);
      expect(r.json.result.version).toBe('1');
    });
  });

  describe('request bodies', () => {
    it('answers malformed JSON with 400/7010 and the parser\'s reason', async () => {
      const r = await call('POST', `/accounts/${api.accountId}/rulesets`, '{"name": "x",', { 'Content-Type': 'application/json' });
      expect(r.status).toBe(400);
      expectEnvelope(r, false);
      expect(r.json.errors).toHaveLength(1);
      expect(r.json.errors[0].code).toBe(7010);
      expect(r.json.errors[0].message).toMatch(/^Request body is not valid JSON: /);
    });

    it('answers a body that is not JSON with 415/7012', async () => {
      for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
        const r = await call('POST', `/accounts/${api.accountId}/rulesets`, 'name=x&kind=custom', { 'Content-Type': type });
        expect(r.status, type).toBe(415);
        expectEnvelope(r, false);
        expect(r.json.errors[0].code, type).toBe(7012);
      }
    });

    it('answers a JSON body that is not an object, or no body at all, with 400/7013', async () => {
      for (const body of ['[]', '"ruleset"', '']) {
        const r = await call('POST', `/accounts/${api.accountId}/rulesets`, body, { 'Content-Type': 'application/json' });
        expect(r.status, body).toBe(400);
        expect(r.json.errors[0].code, body).toBe(7013);
      }
    });

    it('answers a body over 16 MiB with 413/7011', async () => {
      const big = JSON.stringify({ name: 'big', kind: 'custom', phase: 'network_transit', description: 'x'.repeat(16 * 1024 * 1024) });
      const r = await call('POST', `/accounts/${api.accountId}/rulesets`, big);
      expect(r.status).toBe(413);
      expectEnvelope(r, false);
      expect(r.json.errors[0].code).toBe(7011);
    });
  });

  describe('a server built with a small body limit', () => {
    let small: TestApi;
    let base: string;
    let headers: Record<string, string>;
    let accountId: string;

    beforeAll(async () => {
      small = await backend.start({ bodyLimit: 1024, email: 'small@example.com' });
      ({ base, accountId } = small);
      headers = { 'X-Auth-Email': small.email, 'X-Auth-Key': small.key, 'Content-Type': 'application/json' };
    });

    afterAll(async () => {
      await small.dispose();
    });

    it('answers 413/7011 just over the limit and accepts a body just under it', async () => {
      const body = (n: number) => JSON.stringify({ name: 'b', kind: 'custom', phase: 'network_transit', description: 'x'.repeat(n) });
      const under = body(400);
      const over = body(1100);
      expect(under.length).toBeLessThan(1024);
      const ok = await fetch(`${base}/accounts/${accountId}/rulesets`, { method: 'POST', headers, body: under });
      expect(ok.status).toBe(200);
      const tooBig = await fetch(`${base}/accounts/${accountId}/rulesets`, { method: 'POST', headers, body: over });
      expect(tooBig.status).toBe(413);
      expect(tooBig.headers.get('content-type')).toMatch(/^application\/json\b/);
      const text = await tooBig.text();
      errorBodies.push(text);
      expect(JSON.parse(text)).toEqual({
        success: false,
        errors: [{ code: 7011, message: 'Request body is larger than the server accepts' }],
        messages: [],
        result: null,
      });
    });

    if (backend.cluster === undefined) {
      it('answers 500/7099 without details when the database is gone', async () => {
        // Its file closed under the running server.
        small.store.close();
        await expectInternalError();
      });
    } else {
      it('answers 500/7099 without details when a query fails unexpectedly', async () => {
        // The rulesets table renamed under the running server: every query on
        // it fails with an SQL error that is neither an answer nor an outage.
        const db = databaseOf(small.database!);
        await backend.cluster!().admin('ALTER TABLE rulesets RENAME TO rulesets_gone', [], db);
        try {
          await expectInternalError();
        } finally {
          await backend.cluster!().admin('ALTER TABLE rulesets_gone RENAME TO rulesets', [], db);
        }
      });

      it('answers 503/8021 naming the server, not its password, when the database refuses connections', async () => {
        // Closed to new sessions and its open ones ended: whether the pool
        // still held a (now dead) connection or had to open a new one, the
        // answer is the same outage.
        const db = databaseOf(small.database!);
        await backend.cluster!().admin(`ALTER DATABASE ${db} ALLOW_CONNECTIONS false`);
        await backend.cluster!().terminate(db);
        for (let i = 0; i < 3; i++) {
          const r = await fetch(`${base}/accounts/${accountId}/rulesets`, { headers });
          const text = await r.text();
          errorBodies.push(text);
          expect(r.status, text).toBe(503);
          const json = JSON.parse(text) as { success: boolean; errors: { code: number; message: string }[] };
          expect(json.success).toBe(false);
          expect(json.errors.map((e) => e.code)).toEqual([8021]);
          expect(json.errors[0]!.message).toContain(db);
          expect(text).not.toContain(backend.cluster!().password);
        }
      });
    }

    async function expectInternalError(): Promise<void> {
      const r = await fetch(`${base}/accounts/${accountId}/rulesets`, { headers });
      const text = await r.text();
      errorBodies.push(text);
      expect(r.status, text).toBe(500);
      expect(JSON.parse(text)).toEqual({ success: false, errors: [{ code: 7099, message: 'Internal error' }], messages: [], result: null });
    }
  });

  describe('routing', () => {
    it('answers an unknown route of an authenticated user with 404/7000 and Cloudflare\'s 7003 companion', async () => {
      for (const [method, path] of [
        ['GET', '/nowhere'],
        ['GET', `/accounts/${api.accountId}/firewall/rules`],
        ['PATCH', `/accounts/${api.accountId}/nothing`],
        ['GET', `/client/v4/accounts/${api.accountId}/rulesets`],
      ] as const) {
        const r = await call(method, path);
        expect(r.status, `${method} ${path}`).toBe(404);
        expectEnvelope(r, false);
        expect(r.json.errors.map((e: { code: number }) => e.code), `${method} ${path}`).toEqual([7000, 7003]);
        expect(r.json.errors[0].message).toBe('No route for that URI');
      }
    });

    it('answers paths outside /client/v4 the same way', async () => {
      const res = await fetch(api.base.replace('/client/v4', '/v3/whatever'), { headers: { 'X-Auth-Email': api.email, 'X-Auth-Key': api.key } });
      expect(res.status).toBe(404);
      const json = (await res.json()) as { errors: { code: number }[] };
      expect(json.errors[0]!.code).toBe(7000);
    });

    it('answers routes that are not built yet (load balancing previews and searches) with 501/7002 naming the feature, after authentication', async () => {
      const sdk = api.client();
      const cases: [string, () => Promise<unknown>][] = [
        ['load balancing', () => sdk.loadBalancers.previews.get(newId(), { account_id: api.accountId })],
      ];
      for (const [feature, run] of cases) {
        const err = (await run().then(
          () => undefined,
          (e: unknown) => e,
        )) as { status?: number; errors?: { code: number; message: string }[] } | undefined;
        expect(err?.status, feature).toBe(501);
        expect(err?.errors?.[0]?.code, feature).toBe(7002);
        expect(err?.errors?.[0]?.message, feature).toMatch(new RegExp(`^${feature} are not implemented`));
      }
      const raw = await call('DELETE', `/accounts/${api.accountId}/load_balancers/searches/${newId()}`);
      expect(raw.status).toBe(501);
      expectEnvelope(raw, false);
      expect(raw.json.errors[0].message).toMatch(/^load balancing are not implemented in Moat yet \(DELETE /);
      // Authentication and the account check come first.
      const anonymous = await call('GET', `/accounts/${api.accountId}/load_balancers/pools`, undefined, { 'X-Auth-Email': undefined, 'X-Auth-Key': undefined });
      expect([anonymous.status, anonymous.json.errors[0].code]).toEqual([400, 6003]);
      const foreign = await call('GET', `/accounts/${newId()}/alerting/v3/policies`);
      expect([foreign.status, foreign.json.errors[0].code]).toEqual([403, 10000]);
    });

    it('ignores the extra headers the SDK sends', async () => {
      const r = await call('GET', `/accounts/${api.accountId}/rulesets`, undefined, { 'api-version': '2026-01-01', 'X-Stainless-Retry-Count': '0', 'User-Agent': 'Cloudflare/JS 7.3.0' });
      expect(r.status).toBe(200);
    });
  });

  describe('error bodies', () => {
    it('never carry a stack trace, a source file or an internal exception name', () => {
      expect(errorBodies.length).toBeGreaterThan(15);
      for (const text of errorBodies) {
        expect(text).not.toMatch(/\bat \S+ \(|\.ts:\d+|\.js:\d+|node_modules|stack|TypeError|SqliteError|FST_/);
      }
    });
  });
});
