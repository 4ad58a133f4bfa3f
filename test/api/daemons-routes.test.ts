// The fleet status API on a real server and SQLite file or PostgreSQL database, fed by real channel
// clients: what each daemon runs after its ack and status, pagination, the
// filter by ruleset version, account isolation, and DELETE revoking a daemon
// and closing its connection.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApi } from '../support/api.js';
import { apiBackends } from '../support/backends.js';
import { ChannelClient, type Msg } from '../support/channel-client.js';

let api: TestApi;
let url: string;
const backends = apiBackends();
const path = () => `/accounts/${api.accountId}/moat/daemons`;

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    api = await backend.start({ channel: { heartbeatSeconds: 0.3 } });
    url = api.base.replace(/^http/, 'ws').replace(/\/client\/v4$/, '/moat/channel');
  });
  afterAll(async () => {
    await api.dispose();
  });

  async function waitFor(cond: () => Promise<boolean>, ms = 3000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!(await cond())) {
      if (Date.now() > deadline) throw new Error('condition not met in time');
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  describe('the fleet API', () => {
    let gw1: { id: string; token: string };
    let gw2: { id: string; token: string };
    let c1: ChannelClient;
    let rulesetId: string;
    let b1: Msg;

    beforeAll(async () => {
      const put = await api.call('PUT', `/accounts/${api.accountId}/rulesets/phases/network_transit/entrypoint`, { rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] });
      rulesetId = put.json.result.id;
      for (const n of ['gw-1', 'gw-2']) {
        const r = await api.services.store.daemons.create({ accountId: api.accountId, name: n });
        if (n === 'gw-1') gw1 = { id: r.info.id, token: r.token };
        else gw2 = { id: r.info.id, token: r.token };
      }
      c1 = await ChannelClient.hello(url, gw1.token, { moat: '1.2.3' });
      b1 = await c1.next('bundle');
      c1.applied(b1);
      c1.send({ type: 'status', counters: { passed: 42, dropped: 7, undecodable: 1, swaps: 1 } });
    });
    afterAll(() => c1.close());

    it('shows each daemon of the account: connected, from where, which Moat, what it runs and its counters', async () => {
      await waitFor(async () => (await api.call('GET', `${path()}/${gw1.id}`)).json.result?.counters?.passed === 42);
      const r = await api.call('GET', path());
      expect(r.status).toBe(200);
      expect(r.json.success).toBe(true);
      expect(r.json.result_info).toEqual({ page: 1, per_page: 20, count: 2, total_count: 2, total_pages: 1 });
      const [one, two] = r.json.result;
      expect(one).toMatchObject({
        id: gw1.id,
        name: 'gw-1',
        zone_id: null,
        connected: true,
        remote_address: expect.stringContaining('127.0.0.1'),
        moat_version: '1.2.3',
        digest: b1.digest,
        versions: { account: '1', zone: null },
        rulesets: [{ id: rulesetId, version: '1' }],
        last_rejection: null,
        counters: { passed: 42, dropped: 7, undecodable: 1, swaps: 1 },
        revoked_on: null,
      });
      expect(Date.parse(one.connected_since)).not.toBeNaN();
      expect(Date.parse(one.applied_on)).not.toBeNaN();
      expect(two).toMatchObject({ id: gw2.id, name: 'gw-2', connected: false, connected_since: null, digest: null, rulesets: [] });
    });

    it('records a rejection with the engine\'s codes, leaving what the daemon runs as it was', async () => {
      await api.call('POST', `/accounts/${api.accountId}/rulesets/${rulesetId}/rules`, { action: 'block', expression: 'tcp.dstport == 25' });
      const b2 = await c1.next('bundle');
      c1.send({ type: 'ack', seq: b2.seq, result: 'rejected', digest: b2.digest, errors: [{ code: 5011, message: 'needs GeoIP data', pointer: '/rules/1/expression' }] });
      await waitFor(async () => (await api.call('GET', `${path()}/${gw1.id}`)).json.result.last_rejection !== null);
      const d = (await api.call('GET', `${path()}/${gw1.id}`)).json.result;
      expect(d.last_rejection).toMatchObject({ digest: b2.digest, errors: [{ code: 5011, message: 'needs GeoIP data', pointer: '/rules/1/expression' }] });
      expect(d.digest).toBe(b1.digest);
      expect(d.versions.account).toBe('1');
    });

    it('tells which daemons run a ruleset version (?ruleset_id=&version=)', async () => {
      const v1 = await api.call('GET', `${path()}?ruleset_id=${rulesetId}&version=1`);
      expect(v1.json.result.map((d: Msg) => d.name)).toEqual(['gw-1']);
      const v2 = await api.call('GET', `${path()}?ruleset_id=${rulesetId}&version=2`);
      expect(v2.json.result).toEqual([]);
      const any = await api.call('GET', `${path()}?ruleset_id=${rulesetId}`);
      expect(any.json.result_info.total_count).toBe(1);
      expect((await api.call('GET', `${path()}?connected=false`)).json.result.map((d: Msg) => d.name)).toEqual(['gw-2']);
    });

    it('pages with page and per_page', async () => {
      const r = await api.call('GET', `${path()}?per_page=1&page=2`);
      expect(r.json.result.map((d: Msg) => d.name)).toEqual(['gw-2']);
      expect(r.json.result_info).toEqual({ page: 2, per_page: 1, count: 1, total_count: 2, total_pages: 2 });
    });

    it('answers bad queries with 7014 and the parameter', async () => {
      for (const q of ['ruleset_id=nope', 'version=1', `ruleset_id=${rulesetId}&version=x`, 'connected=maybe', 'per_page=1000']) {
        const r = await api.call('GET', `${path()}?${q}`);
        expect(r.status, q).toBe(400);
        expect(r.json.errors[0].code, q).toBe(7014);
        expect(r.json.errors[0].source?.pointer, q).toBeDefined();
      }
    });

    it('keeps accounts apart: another user gets 403 on this account and 404 for this daemon under its own', async () => {
      const other = await api.addUser();
      expect((await other.call('GET', path())).json.errors[0].code).toBe(10000);
      const r = await other.call('GET', `/accounts/${other.accountId}/moat/daemons/${gw1.id}`);
      expect(r.status).toBe(404);
      expect(r.json.errors[0].code).toBe(7500);
      expect((await other.call('DELETE', `/accounts/${other.accountId}/moat/daemons/${gw1.id}`)).status).toBe(404);
      expect((await other.call('GET', `/accounts/${other.accountId}/moat/daemons`)).json.result).toEqual([]);
    });

    it('lets a read-only token read and not revoke (7402)', async () => {
      const { token } = await api.services.store.tokens.create({ email: api.email, name: 'ro', readOnly: true });
      const h = { 'X-Auth-Email': undefined, 'X-Auth-Key': undefined, Authorization: `Bearer ${token}` };
      expect((await api.call('GET', path(), undefined, h)).status).toBe(200);
      const del = await api.call('DELETE', `${path()}/${gw1.id}`, undefined, h);
      expect(del.json.errors[0].code).toBe(7402);
    });

    it('revokes with DELETE and closes the daemon\'s connection with 4003 at once', async () => {
      const started = Date.now();
      const r = await api.call('DELETE', `${path()}/${gw1.id}`);
      expect(r.status).toBe(200);
      expect(r.json.result.revoked_on).not.toBeNull();
      expect((await c1.closed).code).toBe(4003);
      expect(Date.now() - started).toBeLessThan(1000);
      expect((await api.call('DELETE', `${path()}/${gw1.id}`)).status).toBe(200);
    });
  });
});
