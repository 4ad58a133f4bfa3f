// The two stores answer the v4 API byte for byte alike (issue #20): one
// scripted sequence of requests (rulesets, rules, versions, entrypoints, lists
// and their items with cursors, tokens, daemons, monitors and pools, policies,
// and the error cases: 400s with pointers, 403s, 404s, bad JSON, a 304) is
// sent to two in-process servers, one on SQLite and one on PostgreSQL, with
// the same first user, account and zone. Every answer's status, content type,
// ETag and body bytes are compared after one substitution: generated ids,
// timestamps and opaque tags become placeholders numbered in order of first
// appearance (per server), so an id that is the same twice on one server must
// be the same twice on the other. Any difference fails the test; the fix
// belongs in the store, not here.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type TestApi } from '../support/api.js';
import { requirePostgres, usePostgres } from '../support/postgres.js';

const run = requirePostgres();
const cluster = usePostgres(run);

/** One answer as compared: everything generated replaced by placeholders. */
interface Exchange {
  step: string;
  status: number;
  contentType: string | null;
  etag: string | null;
  body: string;
}

const ACCOUNT = 'a0'.repeat(16);
const ZONE = 'b0'.repeat(16);
const EMAIL = 'differential@example.com';
const KEY = 'k' + 'c0'.repeat(16);
const ID = /\b[0-9a-f]{32}\b/g;
const STAMP = /\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\b/g;

/** A server and what it answered, normalised. */
class Session {
  readonly exchanges: Exchange[] = [];
  /** Raw values of the last answer, for the script to take ids and ETags from. */
  private readonly ids = new Map<string, string>();
  private readonly tags = new Map<string, string>();

  constructor(readonly api: TestApi) {
    // The fixed ids are the same on both servers: named, not numbered.
    this.ids.set(ACCOUNT, '<account>');
    this.ids.set(ZONE, '<zone>');
  }

  private normalise(text: string): string {
    return text.replace(ID, (id) => {
      let p = this.ids.get(id);
      if (p === undefined) this.ids.set(id, (p = `<id${this.ids.size - 1}>`));
      return p;
    }).replace(STAMP, (t) => `<time ${t.replace(/\d/g, '0')}>`); // the stamp's digits aside, its form (microseconds, Z) must match
  }

  private tag(etag: string | null): string | null {
    if (etag === null) return null;
    let p = this.tags.get(etag);
    // Numbered, and with its kind: a ruleset's version tag ("<id>-<version>-<token>") or a digest of the body.
    const kind = /^"[0-9a-f]{32}-\d+-[0-9a-z]+"$/.test(etag) ? `version ${etag.split('-')[1]}` : /^"[A-Za-z0-9_-]{27}"$/.test(etag) ? 'digest' : etag;
    if (p === undefined) this.tags.set(etag, (p = `<etag${this.tags.size} ${kind}>`));
    return p;
  }

  /** Sends a request (a string body is sent as is), records the normalised answer, and returns the raw one. */
  async send(step: string, method: string, path: string, body?: unknown, headers: Record<string, string | undefined> = {}) {
    const r = await this.api.call(method, path, body, headers);
    this.exchanges.push({ step, status: r.status, contentType: r.headers.get('content-type'), etag: this.tag(r.headers.get('etag')), body: this.normalise(r.text) });
    return r;
  }

  /** Polls a bulk operation until it is over, without recording the polls (their number is timing). */
  async settle(operationId: string): Promise<void> {
    for (let i = 0; i < 300; i++) {
      const r = await this.api.call('GET', `/accounts/${ACCOUNT}/rules/lists/bulk_operations/${operationId}`);
      if (r.json?.result?.status === 'completed' || r.json?.result?.status === 'failed') return;
      await new Promise((res) => setTimeout(res, 10));
    }
    throw new Error(`operation ${operationId} did not finish`);
  }
}

/** The scripted sequence; every request goes through `s.send`, ids are taken from its own answers. */
async function script(s: Session): Promise<void> {
  const acct = `/accounts/${ACCOUNT}`;
  const rs = `${acct}/rulesets`;

  // Rulesets, rules and versions.
  await s.send('list rulesets (empty)', 'GET', rs);
  const created = await s.send('create ruleset', 'POST', rs, {
    name: 'edge', kind: 'custom', phase: 'network_transit', description: 'first',
    rules: [{ action: 'block', expression: 'tcp.dstport == 23', description: 'telnet' }, { action: 'log', expression: 'udp.dstport == 1900', enabled: false }],
  });
  const id = created.json.result.id as string;
  const got = await s.send('get ruleset', 'GET', `${rs}/${id}`);
  await s.send('get ruleset, If-None-Match', 'GET', `${rs}/${id}`, undefined, { 'If-None-Match': got.headers.get('etag') ?? '' });
  await s.send('update ruleset', 'PUT', `${rs}/${id}`, { description: 'second', rules: [{ id: got.json.result.rules[0].id, action: 'block', expression: 'tcp.dstport in {23 2323}' }] });
  await s.send('list versions', 'GET', `${rs}/${id}/versions`);
  await s.send('get version 1', 'GET', `${rs}/${id}/versions/1`);
  await s.send('delete version 1', 'DELETE', `${rs}/${id}/versions/1`);
  await s.send('get deleted version', 'GET', `${rs}/${id}/versions/1`);
  await s.send('delete the latest version', 'DELETE', `${rs}/${id}/versions/2`);
  const added = await s.send('add rule', 'POST', `${rs}/${id}/rules`, { action: 'block', expression: 'ip.src == 192.0.2.1', position: { index: 1 } });
  const ruleId = (added.json.result.rules as { id: string }[])[0]!.id;
  await s.send('edit rule', 'PATCH', `${rs}/${id}/rules/${ruleId}`, { action: 'log', expression: 'ip.src == 192.0.2.2', description: 'edited' });
  await s.send('delete rule', 'DELETE', `${rs}/${id}/rules/${ruleId}`);
  await s.send('list rulesets', 'GET', rs);
  await s.send('put entrypoint', 'PUT', `${rs}/phases/network_transit/entrypoint`, { rules: [{ action: 'block', expression: 'tcp.dstport == 445' }] });
  await s.send('get entrypoint', 'GET', `${rs}/phases/network_transit/entrypoint`);
  await s.send('entrypoint versions', 'GET', `${rs}/phases/network_transit/entrypoint/versions`);
  await s.send('zone ruleset', 'POST', `/zones/${ZONE}/rulesets`, { name: 'zone edge', kind: 'zone', phase: 'network_transit', rules: [] });
  await s.send('zone rulesets', 'GET', `/zones/${ZONE}/rulesets`);

  // Ruleset errors.
  await s.send('bad JSON', 'POST', rs, '{"name": ');
  await s.send('bad kind', 'POST', rs, { name: 'x', kind: 'managed', phase: 'network_transit', rules: [] });
  await s.send('bad phase', 'POST', rs, { name: 'x', kind: 'custom', phase: 'http_request_firewall_custom', rules: [] });
  await s.send('bad expression', 'POST', rs, { name: 'x', kind: 'custom', phase: 'network_transit', rules: [{ action: 'block', expression: 'tcp.dstport ==' }] });
  await s.send('bad action', 'POST', rs, { name: 'x', kind: 'custom', phase: 'network_transit', rules: [{ action: 'explode', expression: 'tcp' }] });
  await s.send('unknown ruleset', 'GET', `${rs}/${newIdLike(1)}`);
  await s.send('malformed ruleset id', 'GET', `${rs}/not-an-id`);
  await s.send('unknown rule', 'PATCH', `${rs}/${id}/rules/${newIdLike(2)}`, { action: 'block', expression: 'tcp' });
  await s.send('unknown version', 'GET', `${rs}/${id}/versions/99`);
  await s.send('foreign account', 'GET', `/accounts/${newIdLike(3)}/rulesets`);
  await s.send('delete ruleset', 'DELETE', `${rs}/${id}`);
  await s.send('delete ruleset again', 'DELETE', `${rs}/${id}`);

  // Lists, items, bulk operations and cursors.
  const lists = `${acct}/rules/lists`;
  const list = await s.send('create list', 'POST', lists, { name: 'office', kind: 'ip', description: 'the office' });
  const listId = list.json.result.id as string;
  await s.send('duplicate list name', 'POST', lists, { name: 'office', kind: 'ip' });
  await s.send('bad list kind', 'POST', lists, { name: 'other', kind: 'asn' });
  const ips = ['192.0.2.9', '10.0.0.0/8', '2001:db8::/48', '192.0.2.1', '198.51.100.0/24', '203.0.113.7', '192.0.2.2'];
  const op = await s.send('append items', 'POST', `${lists}/${listId}/items`, ips.map((ip, i) => ({ ip, comment: `item ${i}` })));
  await s.settle(op.json.result.operation_id as string);
  await s.send('operation status', 'GET', `${lists}/bulk_operations/${op.json.result.operation_id as string}`);
  let page = await s.send('items page 1', 'GET', `${lists}/${listId}/items?per_page=3`);
  for (let n = 2; page.json.result_info?.cursors?.after !== undefined && n < 5; n++) {
    page = await s.send(`items page ${n}`, 'GET', `${lists}/${listId}/items?per_page=3&cursor=${page.json.result_info.cursors.after as string}`);
  }
  await s.send('items page back', 'GET', `${lists}/${listId}/items?per_page=3&cursor=${page.json.result_info.cursors.before as string}`);
  await s.send('items search', 'GET', `${lists}/${listId}/items?search=192.0.2`);
  await s.send('items bad cursor', 'GET', `${lists}/${listId}/items?cursor=%21%21`);
  await s.send('items of an unknown list', 'GET', `${lists}/${newIdLike(5)}/items?per_page=3`);
  const item = (page.json.result as { id: string }[])[0]!;
  await s.send('get item', 'GET', `${lists}/${listId}/items/${item.id}`);
  await s.send('unknown item', 'GET', `${lists}/${listId}/items/${newIdLike(4)}`);
  await s.send('bad items', 'POST', `${lists}/${listId}/items`, [{ ip: '192.0.2.300' }, { ip: '10.0.0.1', comment: 7 }]);
  const del = await s.send('delete items', 'DELETE', `${lists}/${listId}/items`, { items: [{ id: item.id }] });
  await s.settle(del.json.result.operation_id as string);
  const put = await s.send('replace items', 'PUT', `${lists}/${listId}/items`, [{ ip: '192.0.2.50' }, { ip: '192.0.2.51', comment: 'kept' }]);
  await s.settle(put.json.result.operation_id as string);
  await s.send('items after replace', 'GET', `${lists}/${listId}/items`);
  await s.send('update list', 'PUT', `${lists}/${listId}`, { description: 'moved' });
  await s.send('lists', 'GET', lists);
  const used = await s.send('entrypoint using the list', 'PUT', `${rs}/phases/network_transit/entrypoint`, { rules: [{ action: 'block', expression: 'ip.src in $office' }] });
  await s.send('delete a used list', 'DELETE', `${lists}/${listId}`);
  await s.send('entrypoint without the list', 'PUT', `${rs}/phases/network_transit/entrypoint`, { rules: [] });
  await s.send('delete list', 'DELETE', `${lists}/${listId}`);
  await s.send('get deleted list', 'GET', `${lists}/${listId}`);
  expect(used.status).toBe(200);

  // Tokens (made by the operator, used over the API).
  const edit = await s.api.services.store.tokens.create({ email: EMAIL, name: 'deploys' });
  const readOnly = await s.api.services.store.tokens.create({ email: EMAIL, name: 'dashboards', readOnly: true });
  const bearer = (t: string) => ({ 'X-Auth-Email': undefined, 'X-Auth-Key': undefined, Authorization: `Bearer ${t}` });
  await s.send('verify token', 'GET', '/user/tokens/verify', undefined, bearer(edit.token));
  await s.send('read with a read-only token', 'GET', rs, undefined, bearer(readOnly.token));
  await s.send('write with a read-only token', 'POST', lists, { name: 'ro', kind: 'ip' }, bearer(readOnly.token));
  await s.api.services.store.tokens.revoke(edit.info.id);
  await s.send('verify a revoked token', 'GET', '/user/tokens/verify', undefined, bearer(edit.token));

  // Daemons (made by the operator, listed and revoked over the API).
  await s.api.services.store.daemons.create({ accountId: ACCOUNT, name: 'gw-1' });
  const gw2 = await s.api.services.store.daemons.create({ accountId: ACCOUNT, zoneId: ZONE, name: 'gw-2' });
  await s.send('daemons', 'GET', `${acct}/moat/daemons`);
  await s.send('revoke daemon', 'DELETE', `${acct}/moat/daemons/${gw2.info.id}`);
  await s.send('daemon', 'GET', `${acct}/moat/daemons/${gw2.info.id}`);
  await s.send('unknown daemon', 'GET', `${acct}/moat/daemons/${newIdLike(5)}`);

  // Monitors and pools.
  const lb = `${acct}/load_balancers`;
  const monitor = await s.send('create monitor', 'POST', `${lb}/monitors`, { type: 'tcp', port: 443, interval: 60, description: 'tls' });
  const monitorId = monitor.json.result.id as string;
  await s.send('bad monitor', 'POST', `${lb}/monitors`, { type: 'tcp', interval: 0, expected_codes: '2x', color: 'red' });
  await s.send('patch monitor', 'PATCH', `${lb}/monitors/${monitorId}`, { description: 'tls check', retries: 3 });
  await s.send('monitors', 'GET', `${lb}/monitors`);
  const pool = await s.send('create pool', 'POST', `${lb}/pools`, { name: 'web', origins: [{ name: 'a', address: '192.0.2.10' }, { name: 'b', address: '192.0.2.11', weight: 0.5 }], monitor: monitorId });
  const poolId = pool.json.result.id as string;
  await s.send('second pool', 'POST', `${lb}/pools`, { name: 'api', origins: [{ name: 'c', address: '192.0.2.12' }] });
  await s.send('bad pool', 'POST', `${lb}/pools`, { name: 'bad pool', origins: [] });
  await s.send('pools', 'GET', `${lb}/pools`);
  await s.send('pools by monitor', 'GET', `${lb}/pools?monitor=${monitorId}`);
  await s.send('pools page', 'GET', `${lb}/pools?page=2&per_page=1`);
  await s.send('patch pool', 'PATCH', `${lb}/pools/${poolId}`, { enabled: false, description: 'paused' });
  await s.send('delete a used monitor', 'DELETE', `${lb}/monitors/${monitorId}`);
  await s.send('pool', 'GET', `${lb}/pools/${poolId}`);
  await s.send('unknown pool', 'GET', `${lb}/pools/${newIdLike(6)}`);

  // Policies.
  const policies = `${acct}/alerting/v3/policies`;
  const policy = await s.send('create policy', 'POST', policies, {
    name: 'LB health', alert_type: 'load_balancing_health_alert', enabled: true, filters: { pool_id: [poolId], new_health: ['Unhealthy'] }, mechanisms: { email: [{ id: 'ops@example.com' }] },
  });
  const policyId = policy.json.result.id as string;
  await s.send('bad policy', 'POST', policies, { name: 'x', alert_type: 'load_balancing_health_alert', enabled: true, filters: { new_health: ['Down'] }, mechanisms: {} });
  await s.send('update policy', 'PUT', `${policies}/${policyId}`, { enabled: false });
  await s.send('policies', 'GET', policies);
  await s.send('policy', 'GET', `${policies}/${policyId}`);
  await s.send('webhooks', 'GET', `${acct}/alerting/v3/destinations/webhooks`);
  await s.send('private webhook', 'POST', `${acct}/alerting/v3/destinations/webhooks`, { name: 'h', url: 'http://127.0.0.1:9/' });
  await s.send('delete policy', 'DELETE', `${policies}/${policyId}`);
  await s.send('deleted policy', 'GET', `${policies}/${policyId}`);
  await s.send('history', 'GET', `${acct}/alerting/v3/history`);
  await s.send('delete pool', 'DELETE', `${lb}/pools/${poolId}`);
  await s.send('delete monitor', 'DELETE', `${lb}/monitors/${monitorId}`);

  // Identity.
  await s.send('accounts', 'GET', '/accounts');
  await s.send('zones', 'GET', '/zones');
}

/** A fixed, well-formed id nobody has (the same on both servers). */
function newIdLike(n: number): string {
  return n.toString(16).padStart(2, '0').repeat(16);
}

describe.runIf(run)('the same v4 requests on SQLite and on PostgreSQL', () => {
  const servers: TestApi[] = [];
  beforeAll(async () => {
    const options = { email: EMAIL, key: KEY, accountId: ACCOUNT, zoneId: ZONE };
    servers.push(await startApi(options), await startApi({ ...options, database: await cluster().createDatabase('differential') }));
  });
  afterAll(async () => {
    for (const s of servers) await s.dispose();
  });

  it('answer with the same statuses, content types, ETags and body bytes, ids and times aside', async () => {
    const [sqlite, postgres] = servers.map((api) => new Session(api)) as [Session, Session];
    await script(sqlite);
    await script(postgres);
    expect(postgres.exchanges.length).toBe(sqlite.exchanges.length);
    // The script reached what it means to test (a broken script would compare two equal failures).
    expect(sqlite.exchanges.filter((e) => e.status < 300).length).toBeGreaterThan(55);
    expect(new Set(sqlite.exchanges.map((e) => e.status))).toEqual(new Set([200, 204, 304, 400, 403, 404]));
    expect([sqlite.exchanges.some((e) => e.etag?.includes(' version 1') === true), sqlite.exchanges.some((e) => e.etag?.endsWith(' digest>') === true)]).toEqual([true, true]);
    for (let i = 0; i < sqlite.exchanges.length; i++) expect(postgres.exchanges[i], sqlite.exchanges[i]!.step).toEqual(sqlite.exchanges[i]);
  }, 60_000);

  it('tells a difference: the normalised answers of one server differ from another script\'s', async () => {
    // The comparison above is not blind: a changed description shows.
    const s = new Session(servers[0]!);
    await s.send('one', 'POST', `/accounts/${ACCOUNT}/rulesets`, { name: 'probe', kind: 'custom', phase: 'network_transit', description: 'a', rules: [] });
    const t = new Session(servers[0]!);
    await t.send('one', 'POST', `/accounts/${ACCOUNT}/rulesets`, { name: 'probe', kind: 'custom', phase: 'network_transit', description: 'b', rules: [] });
    expect(t.exchanges[0]!.body).not.toBe(s.exchanges[0]!.body);
    expect(t.exchanges[0]!.body.replace('"b"', '"a"')).toBe(s.exchanges[0]!.body);
  });
});
