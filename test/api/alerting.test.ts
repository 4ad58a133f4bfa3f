// The alerting v3 API through Cloudflare's official SDK: notification
// policies (filters validated per alert type, pool ids of the account,
// returned exactly as given), webhook destinations (tested on create, the
// test's status code in the error, the secret never returned, loopback and
// metadata hosts refused unless the operator allows them), available alert
// types, and the delivery history with since/before and pages; on each store.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/store/index.js';
import { healthEvent } from '../notify/support.js';
import { TestClock } from '../notify/support.js';
import { Receiver } from '../notify/receiver.js';
import { type TestApi } from '../support/api.js';
import { apiBackends } from '../support/backends.js';

const HEALTH = 'load_balancing_health_alert' as const;
let api: TestApi;
let strict: TestApi;
const receiver = new Receiver('hook secret');
const clock = new TestClock();
const backends = apiBackends();

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    await receiver.up();
    api = await backend.start({ notify: { allowPrivateWebhooks: true, clock } });
    strict = await backend.start({ notify: { resolver: async (host) => (host === 'metadata.test' ? ['169.254.169.254'] : ['192.0.2.80']) } });
  });
  afterAll(async () => {
    await api.dispose();
    await strict.dispose();
    await receiver.down();
  });

  /** The SDK's error of a failing call: HTTP status and envelope errors. */
  async function failure(p: Promise<unknown>): Promise<{ status: number; errors: { code: number; message: string; source?: { pointer: string } }[] }> {
    const err = (await p.then(
      () => undefined,
      (e: unknown) => e,
    )) as { status: number; errors: { code: number; message: string; source?: { pointer: string } }[] } | undefined;
    if (err === undefined) throw new Error('the call succeeded');
    return err;
  }

  describe('notification policies', () => {
    it('creates, reads, lists, updates and deletes a policy, returning filters and mechanisms exactly as given', async () => {
      const sdk = api.client();
      // A real pool of the account (policies check pool ids against the pools store).
      const pool = (await sdk.loadBalancers.pools.create({ account_id: api.accountId, name: 'watched', origins: [{ name: 'a', address: '192.0.2.1' }] })).id!;
      const filters = { pool_id: [pool], new_health: ['Unhealthy', 'Healthy'], event_source: ['origin'] };
      const created = await sdk.alerting.policies.create({
        account_id: api.accountId,
        name: 'LB health',
        alert_type: HEALTH,
        enabled: true,
        filters,
        mechanisms: { email: [{ id: 'ops@example.com' }] },
        description: 'pages the on-call',
      });
      expect(Object.keys(created)).toEqual(['id']);
      const got = await sdk.alerting.policies.get(created.id!, { account_id: api.accountId });
      expect(got).toMatchObject({ id: created.id, name: 'LB health', alert_type: HEALTH, enabled: true, description: 'pages the on-call', mechanisms: { email: [{ id: 'ops@example.com' }] } });
      expect(JSON.stringify(got.filters)).toBe(JSON.stringify(filters));
      // PUT changes what it is given and keeps the rest.
      await sdk.alerting.policies.update(created.id!, { account_id: api.accountId, enabled: false });
      const list = [];
      for await (const p of sdk.alerting.policies.list({ account_id: api.accountId })) list.push(p);
      expect(list.map((p) => [p.id, p.enabled, p.name, JSON.stringify(p.filters)])).toEqual([[created.id, false, 'LB health', JSON.stringify(filters)]]);
      const deleted = await sdk.alerting.policies.delete(created.id!, { account_id: api.accountId });
      expect(deleted.success).toBe(true);
      const gone = await failure(sdk.alerting.policies.get(created.id!, { account_id: api.accountId }));
      expect([gone.status, gone.errors[0]!.code]).toEqual([404, 7700]);
    });

    it.each([
      ['a health value that is not one', { new_health: ['Down'] }, '/filters/new_health/0', /"Down" is not a value of new_health: use Healthy or Unhealthy/],
      ['an unknown event source', { event_source: ['pool', 'region'] }, '/filters/event_source/1', /"region" is not a value of event_source/],
      ['a pool of no account', { pool_id: ['0123456789abcdef0123456789abcdef'] }, '/filters/pool_id/0', /no pool 0123456789abcdef0123456789abcdef in this account/],
      ['a filter of another alert type', { zones: ['x'] }, '/filters/zones', /filter "zones" does not apply to this alert type; it takes pool_id, new_health, event_source/],
      ['an empty filter', { new_health: [] }, '/filters/new_health', /leave it out to match every value/],
    ])('refuses %s with 7013 and its pointer', async (_name, filters, pointer, message) => {
      const e = await failure(api.client().alerting.policies.create({ account_id: api.accountId, name: 'x', alert_type: HEALTH, enabled: true, filters, mechanisms: {} }));
      expect([e.status, e.errors[0]!.code, e.errors[0]!.source?.pointer]).toEqual([400, 7013, pointer]);
      expect(e.errors[0]!.message).toMatch(message);
    });

    it("refuses another account's pool, an unknown webhook destination, a bad address and an unsupported alert type", async () => {
      const other = await api.addUser();
      // A pool of the first account, named by the other user in its own account.
      const theirPool = (await api.client().loadBalancers.pools.create({ account_id: api.accountId, name: 'not-theirs', origins: [{ name: 'a', address: '192.0.2.1' }] })).id!;
      const e1 = await failure(other.client.alerting.policies.create({ account_id: other.accountId, name: 'x', alert_type: HEALTH, enabled: true, filters: { pool_id: [theirPool] }, mechanisms: {} }));
      expect(e1.errors[0]!.source?.pointer).toBe('/filters/pool_id/0');
      const e2 = await failure(api.client().alerting.policies.create({ account_id: api.accountId, name: 'x', alert_type: HEALTH, enabled: true, mechanisms: { webhooks: [{ id: newId() }], email: [{ id: 'not an address' }] } }));
      expect(e2.errors.map((e) => e.source?.pointer).sort()).toEqual(['/mechanisms/email/0/id', '/mechanisms/webhooks/0/id']);
      const e3 = await failure(api.client().alerting.policies.create({ account_id: api.accountId, name: 'x', alert_type: 'universal_ssl_event_type', enabled: true, mechanisms: {} }));
      expect([e3.status, e3.errors[0]!.code]).toEqual([400, 7705]);
      const missing = await api.call('POST', `/accounts/${api.accountId}/alerting/v3/policies`, { name: 'x' });
      expect(missing.json.errors.map((e: { source: { pointer: string } }) => e.source.pointer).sort()).toEqual(['/alert_type', '/enabled', '/mechanisms']);
    });

    it("keeps accounts apart: another user's account is 403, and a policy id of another account is 404", async () => {
      const other = await api.addUser();
      const { id } = await other.client.alerting.policies.create({ account_id: other.accountId, name: 'theirs', alert_type: HEALTH, enabled: true, mechanisms: {} });
      const foreign = await failure(api.client().alerting.policies.list({ account_id: other.accountId }));
      expect([foreign.status, foreign.errors[0]!.code]).toEqual([403, 10000]);
      const cross = await failure(api.client().alerting.policies.get(id!, { account_id: api.accountId }));
      expect([cross.status, cross.errors[0]!.code]).toEqual([404, 7700]);
    });

    it('lists the supported alert types with their filter options', async () => {
      const available = await api.client().alerting.availableAlerts.list({ account_id: api.accountId });
      const lb = available['Load Balancing']!;
      expect(lb.map((t) => t.type)).toEqual([HEALTH, 'load_balancing_pool_enablement_alert']);
      expect((lb[0]!.filter_options as { Key: string }[]).map((o) => o.Key)).toEqual(['pool_id', 'new_health', 'event_source']);
    });
  });

  describe('webhook destinations', () => {
    it('tests the URL on create (with the secret), never returns the secret, and updates and deletes', async () => {
      const sdk = api.client();
      const before = receiver.received.length;
      const { id } = await sdk.alerting.destinations.webhooks.create({ account_id: api.accountId, name: 'pager', url: receiver.url, secret: 'hook secret' });
      const test = receiver.received[before]!;
      expect(JSON.parse(test.body).text).toMatch(/^Hello World!/);
      expect(test.headers['cf-webhook-auth']).toBe('hook secret');
      expect(test.signed).toBe(true);
      const got = await sdk.alerting.destinations.webhooks.get(id!, { account_id: api.accountId });
      expect(got).toEqual({ id, name: 'pager', url: receiver.url, type: 'generic', created_at: expect.stringMatching(/Z$/), last_success: null, last_failure: null });
      const raw = await api.call('GET', `/accounts/${api.accountId}/alerting/v3/destinations/webhooks`);
      expect(raw.text).not.toContain('hook secret');
      // A new name alone is not tested again.
      const n = receiver.received.length;
      await sdk.alerting.destinations.webhooks.update(id!, { account_id: api.accountId, name: 'pager 2', url: receiver.url });
      expect(receiver.received.length).toBe(n);
      expect((await sdk.alerting.destinations.webhooks.get(id!, { account_id: api.accountId })).name).toBe('pager 2');
      // In use by a policy: refused, naming it.
      const policy = await sdk.alerting.policies.create({ account_id: api.accountId, name: 'uses it', alert_type: HEALTH, enabled: true, mechanisms: { webhooks: [{ id }] } });
      const inUse = await failure(sdk.alerting.destinations.webhooks.delete(id!, { account_id: api.accountId }));
      expect([inUse.status, inUse.errors[0]!.code]).toEqual([400, 7704]);
      expect(inUse.errors[0]!.message).toContain('"uses it"');
      await sdk.alerting.policies.delete(policy.id!, { account_id: api.accountId });
      await sdk.alerting.destinations.webhooks.delete(id!, { account_id: api.accountId });
      const gone = await failure(sdk.alerting.destinations.webhooks.get(id!, { account_id: api.accountId }));
      expect([gone.status, gone.errors[0]!.code]).toEqual([404, 7701]);
    });

    it('fails the create when the test POST is not answered 2xx, with the status code, and saves nothing', async () => {
      receiver.answer = { status: 403 };
      try {
        const e = await failure(api.client().alerting.destinations.webhooks.create({ account_id: api.accountId, name: 'x', url: receiver.url }));
        expect([e.status, e.errors[0]!.code, e.errors[0]!.message]).toEqual([400, 7702, 'Webhook test failed with status code 403']);
      } finally {
        receiver.answer = { status: 200 };
      }
      const refused = await failure(api.client().alerting.destinations.webhooks.create({ account_id: api.accountId, name: 'x', url: 'http://127.0.0.1:1/' }));
      expect(refused.errors[0]!.code).toBe(7702);
      expect(refused.errors[0]!.message).toMatch(/^Webhook test failed: connect ECONNREFUSED/);
      const names = [];
      for await (const w of api.client().alerting.destinations.webhooks.list({ account_id: api.accountId })) names.push(w.name);
      expect(names).toEqual([]);
    });

    it.each([
      ['a loopback address', 'http://127.0.0.1:9/hook', /127\.0\.0\.1, a loopback address/],
      ['the metadata address', 'http://169.254.169.254/latest', /169\.254\.169\.254, a metadata address/],
      ['a name resolving to the metadata address', 'http://metadata.test/x', /metadata\.test resolves to 169\.254\.169\.254, a metadata address/],
      ['an IPv6 loopback', 'http://[::1]:8080/', /::1, a loopback address/],
    ])('refuses %s without --allow-private-webhooks (7703)', async (_name, url, message) => {
      const e = await failure(strict.client().alerting.destinations.webhooks.create({ account_id: strict.accountId, name: 'x', url }));
      expect([e.status, e.errors[0]!.code, e.errors[0]!.source?.pointer]).toEqual([400, 7703, '/url']);
      expect(e.errors[0]!.message).toMatch(message);
    });
  });

  describe('history', () => {
    it('lists every attempt newest first, in pages, between since and before', async () => {
      const sdk = api.client();
      const { id: hook } = await sdk.alerting.destinations.webhooks.create({ account_id: api.accountId, name: 'h', url: receiver.url, secret: 'hook secret' });
      await sdk.alerting.policies.create({ account_id: api.accountId, name: 'history policy', alert_type: HEALTH, enabled: true, mechanisms: { webhooks: [{ id: hook! }] } });
      const t0 = clock.t;
      const count = async () => (await api.services.store.outbox.history(api.accountId, { page: 1, perPage: 1 })).total;
      // Three events an hour apart; the server's running worker delivers each.
      for (let i = 0; i < 3; i++) {
        clock.t = t0 + i * 3_600_000;
        await api.services.store.write((tx) => api.services.notifier.onHealthEvent(healthEvent(api.accountId, { id: newId(), name: `pool${i}` }), tx));
        const want = i + 1;
        for (let tries = 0; (await count()) < want && tries < 200; tries++) await new Promise((r) => setTimeout(r, 10));
        expect(await count()).toBe(want);
      }
      const all = [];
      for await (const h of sdk.alerting.history.list({ account_id: api.accountId, per_page: 2 })) all.push(h);
      expect(all.map((h) => [h.name, h.mechanism, h.mechanism_type, h.alert_type])).toEqual([
        ['history policy', hook, 'webhook', HEALTH],
        ['history policy', hook, 'webhook', HEALTH],
        ['history policy', hook, 'webhook', HEALTH],
      ]);
      expect(all.map((h) => JSON.parse(h.alert_body!).data.pool_name)).toEqual(['pool2', 'pool1', 'pool0']);
      const page = await sdk.alerting.history.list({ account_id: api.accountId, per_page: 2, page: 2 });
      expect(page.result.length).toBe(1);
      expect(page.result_info).toMatchObject({ page: 2, per_page: 2, count: 1, total_count: 3 });
      const iso = (ms: number) => new Date(ms).toISOString();
      const window = [];
      for await (const h of sdk.alerting.history.list({ account_id: api.accountId, since: iso(t0 + 1_800_000), before: iso(t0 + 5_400_000) })) window.push(JSON.parse(h.alert_body!).data.pool_name);
      expect(window).toEqual(['pool1']);
      const bad = await api.call('GET', `/accounts/${api.accountId}/alerting/v3/history?since=yesterday`);
      expect([bad.status, bad.json.errors[0].code, bad.json.errors[0].source.pointer]).toEqual([400, 7014, 'since']);
    });
  });
});
