// The Load Balancing API (#18 items 1-3) through Cloudflare's official SDK
// against a real server on loopback: monitors and pools with their defaults,
// validation with codes and pointers, account isolation, the pools listing's
// two pagination styles and the bulk update's page arithmetic at its edges;
// on each store.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/store/index.js';
import { type TestApi } from '../support/api.js';
import { apiBackends } from '../support/backends.js';

let api: TestApi;
let account_id: string;
const backends = apiBackends();

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    api = await backend.start({ loadBalancing: { minIntervalSeconds: 1, rawSockets: false } });
    account_id = api.accountId;
  });
  afterAll(async () => {
    await api.dispose();
  });

  /** The SDK's error as the tests read it. */
  async function failure(p: Promise<unknown>): Promise<{ status?: number; errors?: { code: number; message: string; source?: { pointer: string } }[] }> {
    return (await p.then(
      () => ({}),
      (e: unknown) => e,
    )) as { status?: number; errors?: { code: number; message: string; source?: { pointer: string } }[] };
  }

  describe('monitors', () => {
    it('are created with Cloudflare\'s defaults, read, listed, replaced, patched and deleted through the SDK', async () => {
      const sdk = api.client();
      const created = await sdk.loadBalancers.monitors.create({ account_id, description: 'web' });
      expect(created).toMatchObject({
        type: 'http',
        description: 'web',
        interval: 60,
        timeout: 5,
        retries: 2,
        method: 'GET',
        path: '/',
        port: 0,
        expected_codes: '200',
        expected_body: '',
        follow_redirects: false,
        allow_insecure: false,
        consecutive_up: 0,
        consecutive_down: 0,
        header: {},
      });
      expect(created.id).toMatch(/^[0-9a-f]{32}$/);
      expect(created.created_on).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
      const id = created.id!;
      expect(await sdk.loadBalancers.monitors.get(id, { account_id })).toEqual(created);
      const listed = [];
      for await (const m of sdk.loadBalancers.monitors.list({ account_id })) listed.push(m.id);
      expect(listed).toContain(id);
      const tcp = await sdk.loadBalancers.monitors.update(id, { account_id, type: 'tcp', port: 8080, interval: 1, timeout: 1 } as never);
      expect(tcp).toMatchObject({ type: 'tcp', port: 8080, method: 'connection_established', interval: 1, description: '' });
      const patched = await sdk.loadBalancers.monitors.edit(id, { account_id, description: 'db' } as never);
      expect(patched).toMatchObject({ type: 'tcp', port: 8080, description: 'db' });
      expect(await sdk.loadBalancers.monitors.delete(id, { account_id })).toEqual({ id });
      expect(await failure(sdk.loadBalancers.monitors.get(id, { account_id }))).toMatchObject({ status: 404, errors: [{ code: 7601 }] });
    });

    it('refuse bad fields with 7013 and the pointer of each, and an interval under the operator\'s minimum', async () => {
      const err = await failure(
        api.client().loadBalancers.monitors.create({ account_id, type: 'tcp', interval: 0, expected_codes: '2x', header: { 'User-Agent': ['x'] }, color: 'red' } as never),
      );
      expect(err.status).toBe(400);
      const pointers = err.errors!.map((e) => [e.code, e.source?.pointer]);
      expect(pointers).toEqual(expect.arrayContaining([[7013, '/interval'], [7013, '/port'], [7013, '/header/User-Agent'], [7013, '/color']]));
      const strict = await backend.start();
      try {
        const r = await strict.call('POST', `/accounts/${strict.accountId}/load_balancers/monitors`, { interval: 5 });
        expect([r.status, r.json.errors[0].code, r.json.errors[0].source.pointer]).toEqual([400, 7013, '/interval']);
        expect(r.json.errors[0].message).toContain('--monitor-min-interval');
      } finally {
        await strict.dispose();
      }
    });

    it('refuse icmp_ping and udp_icmp with 7604 where the process cannot open raw sockets', async () => {
      const err = await failure(api.client().loadBalancers.monitors.create({ account_id, type: 'icmp_ping' }));
      expect(err).toMatchObject({ status: 400, errors: [{ code: 7604, source: { pointer: '/type' } }] });
      expect(err.errors![0]!.message).toContain('CAP_NET_RAW');
    });

    it('cannot be deleted while a pool uses one (7602 naming the pool)', async () => {
      const sdk = api.client();
      const m = await sdk.loadBalancers.monitors.create({ account_id });
      const pool = await sdk.loadBalancers.pools.create({ account_id, name: 'uses-monitor', origins: [{ name: 'a', address: '192.0.2.1' }], monitor: m.id });
      const err = await failure(sdk.loadBalancers.monitors.delete(m.id!, { account_id }));
      expect(err).toMatchObject({ status: 400, errors: [{ code: 7602 }] });
      expect(err.errors![0]!.message).toContain('"uses-monitor"');
      await sdk.loadBalancers.pools.delete(pool.id!, { account_id });
      expect(await sdk.loadBalancers.monitors.delete(m.id!, { account_id })).toEqual({ id: m.id });
    });
  });

  describe('pools', () => {
    it('are created with the reference\'s defaults and read back the same through the SDK', async () => {
      const sdk = api.client();
      const pool = await sdk.loadBalancers.pools.create({
        account_id,
        name: 'primary',
        origins: [{ name: 'web-1', address: '192.0.2.10', header: { Host: ['example.com'] } }, { name: 'web-2', address: '192.0.2.11', enabled: false, weight: 0.5 }],
        notification_email: 'ops@example.com, oncall@example.com',
      });
      expect(pool).toMatchObject({
        name: 'primary',
        description: '',
        enabled: true,
        minimum_origins: 1,
        notification_email: 'ops@example.com, oncall@example.com',
        notification_filter: null,
        check_regions: null,
        origin_steering: { policy: 'random' },
        origins: [
          { name: 'web-1', address: '192.0.2.10', enabled: true, weight: 1, port: 0, header: { Host: ['example.com'] } },
          { name: 'web-2', address: '192.0.2.11', enabled: false, weight: 0.5, port: 0 },
        ],
      });
      // No monitor: health is unknown, so neither the pool nor its origins say healthy.
      expect(pool).not.toHaveProperty('healthy');
      expect(pool.origins![0]).not.toHaveProperty('healthy');
      expect(await sdk.loadBalancers.pools.get(pool.id!, { account_id })).toEqual(pool);
      const edited = await sdk.loadBalancers.pools.edit(pool.id!, { account_id, description: 'main', notification_filter: { pool: { healthy: false } } });
      expect(edited).toMatchObject({ name: 'primary', description: 'main', notification_filter: { pool: { healthy: false } }, notification_email: 'ops@example.com, oncall@example.com' });
      expect(edited.modified_on! > pool.modified_on!).toBe(true);
      const replaced = await sdk.loadBalancers.pools.update(pool.id!, { account_id, name: 'primary-2', origins: [{ name: 'only', address: '192.0.2.12' }] });
      expect(replaced).toMatchObject({ name: 'primary-2', description: '', notification_email: '', notification_filter: null, origins: [{ name: 'only' }] });
      expect(await sdk.loadBalancers.pools.delete(pool.id!, { account_id })).toEqual({ id: pool.id });
      expect(await failure(sdk.loadBalancers.pools.get(pool.id!, { account_id }))).toMatchObject({ status: 404, errors: [{ code: 7600 }] });
    });

    it('refuse a bad notification_email, a duplicate origin name and a monitor of another account, each with its pointer', async () => {
      const sdk = api.client();
      const err = await failure(
        sdk.loadBalancers.pools.create({ account_id, name: 'bad pool', origins: [{ name: 'a', address: '192.0.2.1' }, { name: 'a', address: '192.0.2.2', weight: 2 }], notification_email: 'ops@example.com, not-an-address' }),
      );
      expect(err.status).toBe(400);
      expect(err.errors!.map((e) => e.source?.pointer).sort()).toEqual(['/name', '/notification_email', '/origins/1/name', '/origins/1/weight']);
      expect(err.errors!.find((e) => e.source?.pointer === '/notification_email')!.message).toContain('"not-an-address"');
      const other = await api.addUser();
      const theirs = await other.client.loadBalancers.monitors.create({ account_id: other.accountId });
      const foreign = await failure(sdk.loadBalancers.pools.create({ account_id, name: 'p', origins: [{ name: 'a', address: '192.0.2.1' }], monitor: theirs.id }));
      expect(foreign).toMatchObject({ status: 400, errors: [{ code: 7603, source: { pointer: '/monitor' } }] });
      // Nor can the other account read or change this account's pools.
      const mine = await sdk.loadBalancers.pools.create({ account_id, name: 'mine', origins: [{ name: 'a', address: '192.0.2.1' }] });
      expect(await failure(other.client.loadBalancers.pools.get(mine.id!, { account_id: other.accountId }))).toMatchObject({ status: 404, errors: [{ code: 7600 }] });
      expect(await failure(other.client.loadBalancers.pools.get(mine.id!, { account_id }))).toMatchObject({ status: 403, errors: [{ code: 10000 }] });
      await sdk.loadBalancers.pools.delete(mine.id!, { account_id });
    });

    it('answer GET .../health in the reference\'s shape, unknown before any probe', async () => {
      const sdk = api.client();
      const m = await sdk.loadBalancers.monitors.create({ account_id, interval: 3600 });
      const pool = await sdk.loadBalancers.pools.create({ account_id, name: 'health-shape', origins: [{ name: 'a', address: '192.0.2.1' }], monitor: m.id });
      const r = await api.call('GET', `/accounts/${account_id}/load_balancers/pools/${pool.id}/health`);
      expect(r.status).toBe(200);
      expect(r.json.result).toEqual({ pool_id: pool.id, pop_health: { moat: { healthy: null, origins: [{ '192.0.2.1': { healthy: null, rtt: null, failure_reason: 'No result yet', response_code: null } }] } } });
      await sdk.loadBalancers.pools.delete(pool.id!, { account_id });
      await sdk.loadBalancers.monitors.delete(m.id!, { account_id });
    });
  });

  describe('pool listing and the bulk update', () => {
    let user: ReturnType<TestApi['newUser']>;
    const names = Array.from({ length: 30 }, (_, i) => `pool-${String(i).padStart(2, '0')}`);

    beforeAll(async () => {
      user = await api.addUser();
      // Created out of order: the listing sorts by name.
      for (const name of [...names].reverse()) {
        await user.client.loadBalancers.pools.create({ account_id: user.accountId, name, origins: [{ name: 'a', address: '192.0.2.1' }], notification_email: `${name}@example.com` });
      }
    });

    const path = () => `/accounts/${user.accountId}/load_balancers/pools`;
    const emails = async () => {
      const r = await user.call('GET', path());
      return (r.json.result as { name: string; notification_email: string }[]).map((p) => (p.notification_email === '' ? '' : p.name));
    };

    it('lists every pool by name without pagination parameters, through the SDK', async () => {
      const listed: string[] = [];
      for await (const p of user.client.loadBalancers.pools.list({ account_id: user.accountId })) listed.push(p.name!);
      expect(listed).toEqual(names);
    });

    it('pages with page/per_page and limit/offset, with result_info in the style asked for', async () => {
      const byPage = await user.call('GET', `${path()}?page=2&per_page=7`);
      expect(byPage.json.result.map((p: { name: string }) => p.name)).toEqual(names.slice(7, 14));
      expect(byPage.json.result_info).toEqual({ page: 2, per_page: 7, count: 7, total_count: 30, total_pages: 5 });
      const last = await user.call('GET', `${path()}?page=5&per_page=7`);
      expect(last.json.result.map((p: { name: string }) => p.name)).toEqual(['pool-28', 'pool-29']);
      const byOffset = await user.call('GET', `${path()}?offset=28&limit=5`);
      expect(byOffset.json.result.map((p: { name: string }) => p.name)).toEqual(['pool-28', 'pool-29']);
      expect(byOffset.json.result_info).toEqual({ offset: 28, limit: 5, count: 2, total_count: 30 });
      const past = await user.call('GET', `${path()}?offset=30`);
      expect([past.status, past.json.result, past.json.result_info.count]).toEqual([200, [], 0]);
      const both = await user.call('GET', `${path()}?page=1&limit=5`);
      expect([both.status, both.json.errors[0].code, both.json.errors[0].source.pointer]).toEqual([400, 7014, 'page']);
      const zero = await user.call('GET', `${path()}?per_page=0`);
      expect([zero.status, zero.json.errors[0].code]).toEqual([400, 7014]);
    });

    it('clears notification_email on the first 25 pools only without pagination parameters, and returns them (SDK bulkEdit)', async () => {
      const changed: string[] = [];
      for await (const p of user.client.loadBalancers.pools.bulkEdit({ account_id: user.accountId, notification_email: '' })) {
        expect(p.notification_email).toBe('');
        changed.push(p.name!);
      }
      expect(changed).toEqual(names.slice(0, 25));
      expect(await emails()).toEqual([...Array(25).fill(''), ...names.slice(25)]);
    });

    it('changes only the requested page: a last partial page, a page past the end (nothing), and offset style', async () => {
      const past = await user.call('PATCH', `${path()}?page=7&per_page=5`, { notification_email: '' });
      expect([past.status, past.json.result, past.json.result_info]).toEqual([200, [], { page: 7, per_page: 5, count: 0, total_count: 30, total_pages: 6 }]);
      const offsetPast = await user.call('PATCH', `${path()}?offset=30&limit=10`, { notification_email: '' });
      expect(offsetPast.json.result).toEqual([]);
      expect(await emails()).toEqual([...Array(25).fill(''), ...names.slice(25)]);
      const partial = await user.call('PATCH', `${path()}?page=3&per_page=12`, { notification_email: '' });
      expect(partial.json.result.map((p: { name: string }) => p.name)).toEqual(names.slice(24, 30));
      expect(await emails()).toEqual(Array(30).fill(''));
    });

    it('changes a page in offset style, and refuses both styles at once and anything but ""', async () => {
      await user.call('PATCH', `${path()}/${(await user.call('GET', `${path()}?offset=3&limit=1`)).json.result[0].id}`, { notification_email: 'x@example.com' });
      await user.call('PATCH', `${path()}/${(await user.call('GET', `${path()}?offset=4&limit=1`)).json.result[0].id}`, { notification_email: 'y@example.com' });
      const both = await user.call('PATCH', `${path()}?offset=0&per_page=10`, { notification_email: '' });
      expect([both.status, both.json.errors[0].code, both.json.errors[0].source.pointer]).toEqual([400, 7014, 'per_page']);
      const set = await user.call('PATCH', path(), { notification_email: 'a@example.com' });
      expect([set.status, set.json.errors[0].code, set.json.errors[0].source.pointer]).toEqual([400, 7013, '/notification_email']);
      expect((await emails()).filter((e) => e !== '')).toEqual(['pool-03', 'pool-04']);
      const one = await user.call('PATCH', `${path()}?offset=4&limit=1`, { notification_email: '' });
      expect(one.json.result.map((p: { name: string }) => p.name)).toEqual(['pool-04']);
      expect((await emails()).filter((e) => e !== '')).toEqual(['pool-03']);
    });

    it('on an account with no pools, changes nothing and answers an empty page', async () => {
      const empty = await api.addUser();
      const r = await empty.call('PATCH', `/accounts/${empty.accountId}/load_balancers/pools`, { notification_email: '' });
      expect([r.status, r.json.result, r.json.result_info]).toEqual([200, [], { page: 1, per_page: 25, count: 0, total_count: 0, total_pages: 0 }]);
    });

    it('filters the listing by monitor (the SDK\'s list parameter)', async () => {
      const m = await user.client.loadBalancers.monitors.create({ account_id: user.accountId });
      const p = await user.client.loadBalancers.pools.create({ account_id: user.accountId, name: 'zz-monitored', origins: [{ name: 'a', address: '192.0.2.1' }], monitor: m.id });
      const listed: string[] = [];
      for await (const x of user.client.loadBalancers.pools.list({ account_id: user.accountId, monitor: m.id })) listed.push(x.name!);
      expect(listed).toEqual(['zz-monitored']);
      await user.client.loadBalancers.pools.delete(p.id!, { account_id: user.accountId });
      expect(newId()).toMatch(/^[0-9a-f]{32}$/);
    });
  });
});
