// Failed authentication against a real server on loopback: after N failures
// an address's failures are answered 429 in a v4 envelope with Retry-After
// while its correct credentials still get in; a key stored as scrypt by an
// older Moat still logs in and is re-hashed, and scrypt checks are budgeted
// server-wide. (What wrong keys cost in time: auth-timing.test.ts.)
import { randomBytes, scryptSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Database, Tokens, Users, newId } from '../../src/store/index.js';
import { startApi, type TestApi } from '../support/api.js';

const apis: TestApi[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const a of apis.splice(0)) await a.dispose();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function start(options: Parameters<typeof startApi>[0] = {}): Promise<TestApi> {
  const api = await startApi(options);
  apis.push(api);
  return api;
}

const wrongKey = () => 'wrong' + newId();

describe('the failed-authentication limit', () => {
  it('answers 429/7403 with Retry-After after N failures, lets correct credentials in meanwhile, and forgets the address after the window', async () => {
    const api = await start({ authLimit: { maxFailures: 3, windowSeconds: 2 } });
    const path = `/accounts/${api.accountId}/rulesets`;
    for (let i = 0; i < 3; i++) {
      const r = await api.call('GET', path, undefined, { 'X-Auth-Key': wrongKey() });
      expect(r.status, `failure ${i + 1}`).toBe(403);
      expect(r.json.errors[0].code).toBe(9103);
    }
    const limited = await api.call('GET', path, undefined, { 'X-Auth-Key': wrongKey() });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('content-type')).toMatch(/^application\/json/);
    const retry = Number(limited.headers.get('retry-after'));
    expect(retry).toBeGreaterThanOrEqual(1);
    expect(retry).toBeLessThanOrEqual(2);
    expect(limited.json).toEqual({
      success: false,
      errors: [{ code: 7403, message: `Too many failed authentications from this address; retry after ${retry} seconds` }],
      messages: [],
      result: null,
    });
    // Every kind of wrong credentials is limited: an unknown email, an unknown token, and through the framework's own errors.
    const unknownEmail = await api.call('GET', path, undefined, { 'X-Auth-Email': 'nobody@example.com' });
    expect([unknownEmail.status, unknownEmail.json.errors[0].code]).toEqual([429, 7403]);
    const token = await api.call('GET', path, undefined, { 'X-Auth-Email': undefined, 'X-Auth-Key': undefined, Authorization: `Bearer ${'t'.repeat(40)}` });
    expect([token.status, token.json.errors[0].code]).toEqual([429, 7403]);
    const badUrl = await api.call('GET', '/accounts/%zz/rulesets', undefined, { 'X-Auth-Key': wrongKey() });
    expect([badUrl.status, badUrl.json.errors[0].code]).toEqual([429, 7403]);
    expect(Number(badUrl.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    // Malformed headers are not credentials: the same 400/6003 as ever.
    expect((await api.call('GET', path, undefined, { 'X-Auth-Key': 'short' })).status).toBe(400);
    // Correct credentials from the same address still get in, and /health is public.
    const mine = await api.call('GET', path);
    expect(mine.status).toBe(200);
    expect(mine.json.success).toBe(true);
    expect((await fetch(api.base.replace('/client/v4', '/health'))).status).toBe(200);
    // Once the window is over, a failure is a plain 403 again.
    await new Promise((r) => setTimeout(r, retry * 1000 + 50));
    const after = await api.call('GET', path, undefined, { 'X-Auth-Key': wrongKey() });
    expect([after.status, after.json.errors[0].code]).toEqual([403, 9103]);
  });

  it('answers CONNECT from a limited address with 429 and Retry-After too', async () => {
    const api = await start({ authLimit: { maxFailures: 1, windowSeconds: 30 } });
    await api.call('GET', `/accounts/${api.accountId}/rulesets`, undefined, { 'X-Auth-Key': wrongKey() });
    const { port } = new URL(api.base);
    const { connect } = await import('node:net');
    const raw = await new Promise<string>((resolve, reject) => {
      const s = connect(Number(port), '127.0.0.1', () => s.write(`CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nX-Auth-Email: ${api.email}\r\nX-Auth-Key: ${wrongKey()}\r\n\r\n`));
      let got = '';
      s.on('data', (d: Buffer) => (got += d.toString()));
      s.on('end', () => resolve(got));
      s.on('error', reject);
    });
    expect(raw).toMatch(/^HTTP\/1\.1 429 Too Many Requests\r\n/);
    expect(raw).toMatch(/\r\nRetry-After: (30|29)\r\n/);
    expect(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)).errors[0].code).toBe(7403);
  });
});

/** A data directory whose user `email` has `key` stored as an older Moat stored it (salted scrypt). */
function legacyDataDir(email: string, key: string, account: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'moat-legacy-'));
  dirs.push(dir);
  const store = Database.open(dir);
  new Users(store).create({ email, accounts: [account], key });
  const salt = randomBytes(16);
  store.db.prepare("UPDATE api_keys SET scheme = 'scrypt', salt = ?, hash = ?").run(salt, scryptSync(key, salt, 32));
  store.close();
  return dir;
}

describe('keys stored as scrypt hashes by an older Moat', () => {
  it('still log in over HTTP, and are re-hashed on that first use', async () => {
    const account = newId();
    const key = 'legacy' + newId();
    const dataDir = legacyDataDir('old@example.com', key, account);
    const api = await start({ dataDir });
    expect(api.users.legacyKeyCount()).toBe(1);
    const r = await api.call('GET', `/accounts/${account}/rulesets`, undefined, { 'X-Auth-Email': 'old@example.com', 'X-Auth-Key': key });
    expect(r.status).toBe(200);
    expect(api.users.legacyKeyCount()).toBe(0);
    expect((api.store.db.prepare('SELECT scheme FROM api_keys k JOIN users u ON u.id = k.user_id WHERE u.email = ?').get('old@example.com') as { scheme: string }).scheme).toBe('hmac-sha256');
    expect((await api.call('GET', `/accounts/${account}/rulesets`, undefined, { 'X-Auth-Email': 'old@example.com', 'X-Auth-Key': key })).status).toBe(200);
  });

  it('cost at most 2 scrypt checks a second server-wide: beyond, 503/7404 with Retry-After; a limited address gets 429 without one', async () => {
    const account = newId();
    const key = 'legacy' + newId();
    const api = await start({ dataDir: legacyDataDir('old@example.com', key, account), authLimit: { maxFailures: 0 } });
    const path = `/accounts/${account}/rulesets`;
    const started = performance.now();
    const answers = await Promise.all(Array.from({ length: 8 }, () => api.call('GET', path, undefined, { 'X-Auth-Email': 'old@example.com', 'X-Auth-Key': wrongKey() })));
    const seconds = (performance.now() - started) / 1000;
    const checked = answers.filter((a) => a.status === 403);
    const busy = answers.filter((a) => a.status === 503);
    expect(checked.length + busy.length).toBe(8);
    // A burst of 2, then 2 a second while they were answered.
    expect(checked.length).toBeGreaterThanOrEqual(2);
    expect(checked.length).toBeLessThanOrEqual(2 + Math.ceil(seconds * 2));
    expect(busy.length).toBeGreaterThan(0);
    expect(busy[0]!.json.errors[0].code).toBe(7404);
    expect(busy[0]!.headers.get('retry-after')).toBe('1');
    // The right key, once the budget has refilled, logs in.
    await new Promise((r) => setTimeout(r, 1100));
    expect((await api.call('GET', path, undefined, { 'X-Auth-Email': 'old@example.com', 'X-Auth-Key': key })).status).toBe(200);
  });

  it('are not checked for an address over the limit', async () => {
    const account = newId();
    const key = 'legacy' + newId();
    const api = await start({ dataDir: legacyDataDir('old@example.com', key, account), authLimit: { maxFailures: 1, windowSeconds: 30 } });
    const path = `/accounts/${account}/rulesets`;
    expect((await api.call('GET', path, undefined, { 'X-Auth-Key': wrongKey() })).status).toBe(403);
    const r = await api.call('GET', path, undefined, { 'X-Auth-Email': 'old@example.com', 'X-Auth-Key': key });
    expect([r.status, r.json.errors[0].code]).toEqual([429, 7403]);
    expect(api.users.legacyKeyCount()).toBe(1);
  });
});

describe('tokens and keys are independent', () => {
  it('verifies a bearer token without touching the key hashes (the token path is unchanged)', async () => {
    const api = await start();
    const { token } = new Tokens(api.store, api.users).create({ email: api.email, name: 'ci' });
    const r = await api.call('GET', `/accounts/${api.accountId}/rulesets`, undefined, { 'X-Auth-Email': undefined, 'X-Auth-Key': undefined, Authorization: `Bearer ${token}` });
    expect(r.status).toBe(200);
  });
});
