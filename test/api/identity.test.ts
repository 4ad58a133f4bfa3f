// GET /accounts and GET /zones list what the caller may reach, in Cloudflare's
// shapes and page-number pagination, as the SDK's accounts.list and zones.list
// read them; one user never sees another's; on each store.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/store/index.js';
import { type TestApi } from '../support/api.js';
import { apiBackends } from '../support/backends.js';

let api: TestApi;
const email = 'many@example.com';
const accounts = Array.from({ length: 3 }, () => newId()).sort();
const zones: string[] = [];
let key: string;
const backends = apiBackends();

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    api = await backend.start();
    // Zones of accounts[0], one granted zone of accounts[1].
    zones.splice(0, zones.length, ...Array.from({ length: 2 }, () => newId()));
    key = (await api.services.store.users.create({ email, accounts, zones })).key;
  });

  afterAll(async () => {
    await api.dispose();
  });

  async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
    const out: T[] = [];
    for await (const x of it) out.push(x);
    return out;
  }

  describe('GET /accounts', () => {
    it('lists the caller\'s accounts in Cloudflare\'s shape, page by page through the SDK', async () => {
      const sdk = api.client(email, key);
      const listed = await all(sdk.accounts.list({ per_page: 2 }));
      expect(listed.map((a) => a.id)).toEqual(accounts);
      expect(listed[0]).toMatchObject({ id: accounts[0], name: accounts[0], type: 'standard', settings: { enforce_twofactor: false } });
      expect(listed[0]!.created_on).toMatch(/^\d{4}-\d\d-\d\dT/);
      const first = await sdk.accounts.list({ per_page: 2 });
      expect(first.result.length).toBe(2);
      const raw = await api.call('GET', '/accounts?per_page=2&page=2', undefined, { 'X-Auth-Email': email, 'X-Auth-Key': key });
      expect(raw.json.result_info).toEqual({ page: 2, per_page: 2, count: 1, total_count: 3, total_pages: 2 });
      expect((await sdk.accounts.get({ account_id: accounts[1]! })).id).toBe(accounts[1]);
    });

    it('shows another user only its own account, and refuses a bad page', async () => {
      const other = await api.addUser();
      expect((await all(other.client.accounts.list())).map((a) => a.id)).toEqual([other.accountId]);
      const foreign = await other.call('GET', `/accounts/${accounts[0]}`);
      expect([foreign.status, foreign.json.errors[0].code]).toEqual([403, 10000]);
      for (const q of ['page=0', 'page=x', 'per_page=51']) {
        const r = await other.call('GET', `/accounts?${q}`);
        expect([r.status, r.json.errors[0].code], q).toEqual([400, 7014]);
      }
    });
  });

  describe('GET /zones', () => {
    it('lists the zones of the caller\'s accounts and its granted zones, filtered by account, through the SDK', async () => {
      const sdk = api.client(email, key);
      const listed = await all(sdk.zones.list({ per_page: 1 }));
      expect(listed.map((z) => z.id).sort()).toEqual([...zones].sort());
      expect(listed[0]).toMatchObject({ status: 'active', paused: false, type: 'full', account: { id: accounts[0] } });
      const byAccount = await all(sdk.zones.list({ account: { id: accounts[0]! } }));
      expect(byAccount.length).toBe(2);
      expect(await all(sdk.zones.list({ account: { id: accounts[2]! } }))).toEqual([]);
      expect((await sdk.zones.get({ zone_id: zones[0]! })).id).toBe(zones[0]);
      // The first user sees its own zone only.
      expect((await all(api.client().zones.list())).map((z) => z.id)).toEqual([api.zoneId]);
    });
  });
});
