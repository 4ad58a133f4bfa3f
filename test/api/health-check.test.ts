// GET /health (readiness: the database is open and takes a write) and GET
// /health/live (liveness), unauthenticated, on the API's listener, outside
// /client/v4: 200 when ready, 503 with the reason when not.
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DB_FILE } from '../../src/store/index.js';
import { startApi, type TestApi } from '../support/api.js';

let api: TestApi;
let root: string;

beforeAll(async () => {
  api = await startApi();
  root = api.base.replace('/client/v4', '');
});

afterAll(async () => {
  await api.dispose();
});

async function get(path: string, headers: Record<string, string> = {}) {
  const res = await fetch(root + path, { headers });
  return { status: res.status, type: res.headers.get('content-type'), cache: res.headers.get('cache-control'), json: (await res.json()) as unknown };
}

describe('GET /health', () => {
  it('answers 200 without credentials (and ignores wrong ones) while the database takes writes', async () => {
    for (const headers of [{}, { 'X-Auth-Email': 'nobody@example.com', 'X-Auth-Key': 'wrong-key-wrong-key' }, { Authorization: 'Bearer nonsense' }] as Record<string, string>[]) {
      const r = await get('/health', headers);
      expect(r).toMatchObject({ status: 200, json: { status: 'ok', checks: { database: 'ok' } }, cache: 'no-store' });
      expect(r.type).toMatch(/^application\/json/);
    }
    expect(await get('/health/live')).toMatchObject({ status: 200, json: { status: 'ok' } });
    expect((await fetch(root + '/health', { method: 'HEAD' })).status).toBe(200);
  });

  it('answers 503 naming the reason while another writer holds the database, and 200 again once it lets go', async () => {
    const other = new BetterSqlite3(join(api.dataDir, DB_FILE));
    try {
      other.exec('BEGIN IMMEDIATE');
      const started = Date.now();
      const r = await get('/health');
      expect(Date.now() - started).toBeLessThan(2000);
      expect(r).toMatchObject({ status: 503, json: { status: 'unavailable', checks: { database: expect.stringMatching(/busy/) } } });
      // Liveness does not depend on the database.
      expect((await get('/health/live')).status).toBe(200);
      other.exec('ROLLBACK');
      expect((await get('/health')).status).toBe(200);
    } finally {
      other.close();
    }
  });

  it('keeps every other route behind authentication', async () => {
    const res = await fetch(`${api.base}/accounts/${api.accountId}/rulesets`);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { errors: { code: number }[] }).errors[0]!.code).toBe(6003);
  });

  it('answers 503 once the database is closed', async () => {
    api.store.close();
    expect(await get('/health')).toMatchObject({ status: 503, json: { status: 'unavailable', checks: { database: 'the database is closed' } } });
    expect((await get('/health/live')).status).toBe(200);
  });
});
