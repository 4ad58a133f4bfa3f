// The control channel's server end against a real server on loopback, a real
// SQLite file and real WebSocket clients speaking the protocol as README
// documents it: hello, bundles and pushes after API writes, lists sent once,
// coalescing, account and zone isolation, heartbeats and every kind of bad input.
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_DAEMON_MESSAGE } from '../../src/channel/index.js';
import { readAccountDeployment } from '../../src/api/account-deployment.js';
import { Daemons, Database } from '../../src/store/index.js';
import { startApi, type TestApi } from '../support/api.js';
import { ChannelClient, listDigest, type Msg } from '../support/channel-client.js';

let api: TestApi;
let url: string;

beforeAll(async () => {
  api = await startApi({ channel: { heartbeatSeconds: 0.3, helloTimeoutMs: 400, maxUnauthenticatedPerAddress: 4 } });
  url = api.base.replace(/^http/, 'ws').replace(/\/client\/v4$/, '/moat/channel');
});
afterAll(async () => {
  await api.dispose();
});

let names = 0;
function token(accountId = api.accountId, zoneId?: string): { id: string; token: string } {
  const r = api.services.daemons.create({ accountId, zoneId, name: `gw-${++names}` });
  return { id: r.info.id, token: r.token };
}

async function ok(p: Promise<{ status: number; json: Msg }>): Promise<Msg> {
  const r = await p;
  expect(r.status, JSON.stringify(r.json)).toBeLessThan(300);
  return r.json.result;
}

/** Creates a list with `entries` and waits for its bulk operation to finish. */
async function makeList(call: TestApi['call'], accountId: string, name: string, entries: string[]): Promise<string> {
  const list = await ok(call('POST', `/accounts/${accountId}/rules/lists`, { name, kind: 'ip' }));
  await replaceItems(call, accountId, list.id, entries);
  return list.id as string;
}

async function replaceItems(call: TestApi['call'], accountId: string, listId: string, entries: string[]): Promise<void> {
  const op = await ok(call('PUT', `/accounts/${accountId}/rules/lists/${listId}/items`, entries.map((ip) => ({ ip }))));
  for (let i = 0; i < 200; i++) {
    const s = await ok(call('GET', `/accounts/${accountId}/rules/lists/bulk_operations/${op.operation_id}`));
    if (s.status === 'completed') return;
    if (s.status === 'failed') throw new Error(JSON.stringify(s));
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('bulk operation did not complete');
}

const entrypoint = (accountId: string) => `/accounts/${accountId}/rulesets/phases/network_transit/entrypoint`;
const rule = (expression: string, description = 'r') => ({ action: 'block', expression, description });

describe('a daemon that says hello', () => {
  let listEntries: string[];
  beforeAll(async () => {
    await makeList(api.call, api.accountId, 'office', ['198.51.100.0/24', '192.0.2.7']);
    listEntries = ['192.0.2.7', '198.51.100.0/24'];
    await ok(api.call('PUT', entrypoint(api.accountId), { rules: [rule('ip.src in $office', 'office')] }));
  });

  it('gets a welcome naming it, then the account bundle with the list contents and their digests', async () => {
    const t = token();
    const c = await ChannelClient.hello(url, t.token);
    const welcome = await c.next();
    expect(welcome).toEqual({ type: 'welcome', protocol: 1, heartbeat_seconds: 0.3, daemon: { id: t.id, name: `gw-${names}`, account_id: api.accountId, zone_id: null } });
    const b = await c.next();
    expect(b.type).toBe('bundle');
    expect(b.seq).toBe(1);
    expect(b.digest).toMatch(/^[0-9a-f]{64}$/);
    expect(b.account.version).toBe('1');
    expect(b.account.rules.map((r: Msg) => r.expression)).toEqual(['ip.src in $office']);
    expect(b.zone).toBeNull();
    expect(b.managed).toEqual([]);
    expect(b.lists).toEqual({ office: { digest: listDigest(listEntries), entries: listEntries } });
    c.close();
  });

  it('records it connected and, after its ack, the digest, versions and rulesets it runs', async () => {
    const t = token();
    const c = await ChannelClient.hello(url, t.token, { moat: '9.9.9' });
    const b = await c.next('bundle');
    c.applied(b);
    await waitFor(() => api.services.daemons.get(t.id)?.digest === b.digest);
    const d = api.services.daemons.get(t.id)!;
    expect(d.connected).toBe(true);
    expect(d.moat_version).toBe('9.9.9');
    expect(d.remote_address).toMatch(/127\.0\.0\.1/);
    expect(d.versions).toEqual({ account: '1', zone: null });
    expect(d.rulesets).toEqual([{ id: b.account.id, version: '1' }]);
    expect(d.applied_on).not.toBeNull();
    c.send({ type: 'status', counters: { passed: 10, dropped: 2, undecodable: 1, swaps: 1 } });
    await waitFor(() => api.services.daemons.get(t.id)?.counters?.passed === 10);
    expect(api.services.daemons.get(t.id)!.counters).toEqual({ passed: 10, dropped: 2, undecodable: 1, swaps: 1 });
    c.close();
    await waitFor(() => api.services.daemons.get(t.id)?.connected === false);
    expect(api.services.daemons.get(t.id)!.disconnected_at).not.toBeNull();
  });

  it('that runs the current digest gets up_to_date, not the bundle again', async () => {
    const t = token();
    const first = await ChannelClient.hello(url, t.token);
    const b = await first.next('bundle');
    first.close();
    await first.closed;
    const again = await ChannelClient.hello(url, t.token, { digest: b.digest, lists: [listDigest(listEntries)] });
    await again.next('welcome');
    expect(await again.next()).toEqual({ type: 'up_to_date', digest: b.digest });
    await again.nothingMore('bundle', 300);
    again.close();
  });

  it('that holds a list already gets only its digest', async () => {
    const t = token();
    const c = await ChannelClient.hello(url, t.token, { lists: [listDigest(listEntries)] });
    const b = await c.next('bundle');
    expect(b.lists).toEqual({ office: { digest: listDigest(listEntries) } });
    c.close();
  });
});

describe('pushes', () => {
  it('send a new bundle after an API write; a rule change sends the list digest only, a list change its new contents', async () => {
    const user = api.newUser();
    await makeList(user.call, user.accountId, 'blocked', ['203.0.113.1']);
    const ep = await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('ip.src in $blocked')] }));
    const t = token(user.accountId);
    const c = await ChannelClient.hello(url, t.token);
    const b1 = await c.next('bundle');
    expect(b1.lists.blocked.entries).toEqual(['203.0.113.1']);
    c.applied(b1);
    const started = Date.now();
    await ok(user.call('POST', `/accounts/${user.accountId}/rulesets/${ep.id}/rules`, rule('tcp.dstport == 23', 'telnet')));
    const b2 = await c.next('bundle', 2000);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(b2.seq).toBe(2);
    expect(b2.account.version).toBe('2');
    expect(b2.lists).toEqual({ blocked: { digest: listDigest(['203.0.113.1']) } });
    c.applied(b2);
    await replaceItems(user.call, user.accountId, (await ok(user.call('GET', `/accounts/${user.accountId}/rules/lists`)))[0].id, ['203.0.113.1', '203.0.113.9']);
    const b3 = await c.next('bundle', 2000);
    expect(b3.account.version).toBe('2');
    expect(b3.lists).toEqual({ blocked: { digest: listDigest(['203.0.113.1', '203.0.113.9']), entries: ['203.0.113.1', '203.0.113.9'] } });
    c.close();
  });

  it('read a list\'s contents from the database once per change: a rule change reuses them, a list change (or a new list of the same name) reads them again', async () => {
    const user = api.newUser();
    const listId = await makeList(user.call, user.accountId, 'reused', ['203.0.113.1']);
    await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('ip.src in $reused')] }));
    const memo = new Map<string, string[]>();
    const first = (await readAccountDeployment(api.services.store, user.accountId, undefined, memo)).lists['reused']!;
    await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('ip.src in $reused'), rule('tcp.dstport == 23')] }));
    const afterRule = (await readAccountDeployment(api.services.store, user.accountId, undefined, memo)).lists['reused']!;
    await replaceItems(user.call, user.accountId, listId, ['203.0.113.1', '203.0.113.9']);
    const afterList = (await readAccountDeployment(api.services.store, user.accountId, undefined, memo)).lists['reused']!;
    // Deleted and made again under the same name: another list, whatever its generation.
    await ok(user.call('PUT', entrypoint(user.accountId), { rules: [] }));
    await ok(user.call('DELETE', `/accounts/${user.accountId}/rules/lists/${listId}`));
    await makeList(user.call, user.accountId, 'reused', ['192.0.2.5']);
    await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('ip.src in $reused')] }));
    const remade = (await readAccountDeployment(api.services.store, user.accountId, undefined, memo)).lists['reused']!;
    expect([afterRule === first, afterList, remade, memo.size]).toEqual([true, ['203.0.113.1', '203.0.113.9'], ['192.0.2.5'], 2]);
  });

  it('deliver a bundle whose list is larger than one frame\'s copy threshold (64 KiB) whole, as one message', async () => {
    const user = api.newUser();
    // 6,000 addresses of 10-15 characters: about 100 KB of entries.
    const entries = Array.from({ length: 6000 }, (_, i) => `10.${(i >> 8) & 255}.${i & 255}.${1 + (i % 200)}`);
    await makeList(user.call, user.accountId, 'big', entries);
    await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('ip.src in $big')] }));
    const c = await ChannelClient.hello(url, token(user.accountId).token);
    const b = await c.next('bundle');
    expect(b.lists.big.entries.length).toBe(new Set(entries).size);
    expect(b.lists.big.digest).toBe(listDigest(b.lists.big.entries));
    expect(JSON.stringify(b.lists.big.entries).length).toBeGreaterThan(64 * 1024);
    // A second daemon that holds the list gets the small variant of the same bundle.
    const d = await ChannelClient.hello(url, token(user.accountId).token, { lists: [b.lists.big.digest] });
    const small = await d.next('bundle');
    expect(small.digest).toBe(b.digest);
    expect(small.lists.big).toEqual({ digest: b.lists.big.digest });
    c.close();
    d.close();
  });

  it('handle a status sent right behind its hello after the hello, while the hello still awaits the store (a connection\'s messages keep their order)', async () => {
    const user = api.newUser();
    await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('tcp.dstport == 3')] }));
    const t = token(user.accountId);
    const c = await ChannelClient.open(url);
    // One write, two frames: the hello's token check and bundle build await the store before the status is read.
    c.send({ type: 'hello', protocol: 1, token: t.token, moat: '0.0.0-test', digest: null, lists: [] });
    c.send({ type: 'status', counters: { passed: 7, dropped: 1, undecodable: 0, swaps: 0 } });
    expect((await c.next()).type).toBe('welcome');
    expect((await c.next()).type).toBe('bundle');
    await waitFor(() => api.services.daemons.get(t.id)?.counters?.passed === 7);
    expect(api.services.daemons.get(t.id)!.counters).toEqual({ passed: 7, dropped: 1, undecodable: 0, swaps: 0 });
    expect(api.services.daemons.get(t.id)!.connected).toBe(true);
    c.close();
  });

  it('build one bundle per account and change, shared by all its daemons', async () => {
    const user = api.newUser();
    const ep = await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('tcp.dstport == 1')] }));
    const before = api.services.hub.builds;
    const clients = await Promise.all(Array.from({ length: 3 }, () => ChannelClient.hello(url, token(user.accountId).token)));
    const firsts = await Promise.all(clients.map((c) => c.next('bundle')));
    expect(api.services.hub.builds - before).toBe(1);
    for (let i = 0; i < 3; i++) clients[i]!.applied(firsts[i]);
    await ok(user.call('POST', `/accounts/${user.accountId}/rulesets/${ep.id}/rules`, rule('tcp.dstport == 2')));
    const seconds = await Promise.all(clients.map((c) => c.next('bundle', 2000)));
    expect(new Set(seconds.map((b) => b.digest)).size).toBe(1);
    expect(api.services.hub.builds - before).toBe(2);
    for (const c of clients) c.close();
  });

  it('coalesce: a daemon that acks late gets only the latest of three writes', async () => {
    const user = api.newUser();
    const ep = await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('tcp.dstport == 1')] }));
    const c = await ChannelClient.hello(url, token(user.accountId).token);
    const b1 = await c.next('bundle');
    for (const port of [2, 3, 4]) await ok(user.call('POST', `/accounts/${user.accountId}/rulesets/${ep.id}/rules`, rule(`tcp.dstport == ${port}`)));
    await c.nothingMore('bundle', 400);
    c.applied(b1);
    const b2 = await c.next('bundle', 2000);
    expect(b2.account.version).toBe('4');
    expect(b2.seq).toBe(2);
    c.applied(b2);
    await c.nothingMore('bundle', 400);
    c.close();
  });

  it('never reach another account: a daemon of account A gets nothing of B, also after B writes', async () => {
    const a = api.newUser();
    const b = api.newUser();
    await ok(a.call('PUT', entrypoint(a.accountId), { rules: [rule('tcp.dstport == 100', 'a-rule')] }));
    await ok(b.call('PUT', entrypoint(b.accountId), { rules: [rule('tcp.dstport == 200', 'b-rule')] }));
    const c = await ChannelClient.hello(url, token(a.accountId).token);
    const first = await c.next('bundle');
    expect(first.account.rules.map((r: Msg) => r.description)).toEqual(['a-rule']);
    c.applied(first);
    await ok(b.call('PUT', entrypoint(b.accountId), { rules: [rule('tcp.dstport == 201', 'b-rule-2')] }));
    await c.nothingMore('bundle', 500);
    expect(JSON.stringify(c.messages)).not.toContain('b-rule');
    c.close();
  });

  it('give a zone-bound daemon its zone entrypoint beside the account one', async () => {
    const user = api.newUser();
    await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('tcp.dstport == 1', 'account')] }));
    await ok(user.call('PUT', `/zones/${user.zoneId}/rulesets/phases/network_transit/entrypoint`, { rules: [rule('tcp.dstport == 2', 'zone')] }));
    const zoned = await ChannelClient.hello(url, token(user.accountId, user.zoneId).token);
    const welcome = await zoned.next('welcome');
    expect(welcome.daemon.zone_id).toBe(user.zoneId);
    const b = await zoned.next('bundle');
    expect(b.account.rules[0].description).toBe('account');
    expect(b.zone.rules[0].description).toBe('zone');
    const plain = await ChannelClient.hello(url, token(user.accountId).token);
    const pb = await plain.next('bundle');
    expect(pb.zone).toBeNull();
    expect(pb.digest).not.toBe(b.digest);
    zoned.close();
    plain.close();
  });

  it('to a daemon that neither reads nor acks hold up no other daemon', async () => {
    const user = api.newUser();
    const ep = await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('tcp.dstport == 1')] }));
    const stuck = await ChannelClient.hello(url, token(user.accountId).token);
    await stuck.next('bundle');
    stuck.ws.pause(); // stops reading its socket
    const healthy = await ChannelClient.hello(url, token(user.accountId).token);
    healthy.applied(await healthy.next('bundle'));
    await ok(user.call('POST', `/accounts/${user.accountId}/rulesets/${ep.id}/rules`, rule('tcp.dstport == 9')));
    expect((await healthy.next('bundle', 2000)).account.version).toBe('2');
    stuck.ws.resume();
    stuck.close();
    healthy.close();
  });
});

describe('the connection', () => {
  it('is closed with 4003 the moment its daemon is revoked through the API service', async () => {
    const t = token();
    const c = await ChannelClient.hello(url, t.token);
    await c.next('bundle');
    api.services.daemons.revoke(t.id);
    const started = Date.now();
    expect(await c.closed).toEqual({ code: 4003, reason: expect.stringContaining('revoked') });
    expect(Date.now() - started).toBeLessThan(1000);
    const again = await ChannelClient.hello(url, t.token);
    expect((await again.closed).code).toBe(4003);
  });

  it('of the same daemon connecting again closes the older one with 4009', async () => {
    const t = token();
    const older = await ChannelClient.hello(url, t.token);
    await older.next('bundle');
    const newer = await ChannelClient.hello(url, t.token);
    await newer.next('bundle');
    expect((await older.closed).code).toBe(4009);
    newer.close();
  });

  it('is closed with 4008 when nothing is heard for three heartbeat intervals (no pongs, no messages)', async () => {
    const ws = new WebSocket(url, { autoPong: false });
    const c = await new Promise<Msg>((resolve) => ws.once('open', resolve));
    void c;
    ws.send(JSON.stringify({ type: 'hello', protocol: 1, token: token().token, moat: 'x', digest: null, lists: [] }));
    const started = Date.now();
    const closed = await new Promise<{ code: number; reason: string }>((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    expect(closed.code).toBe(4008);
    // 3 intervals of 0.3 s, seen at the next tick: between 0.9 and ~1.5 s.
    expect(Date.now() - started).toBeGreaterThanOrEqual(800);
    expect(Date.now() - started).toBeLessThan(3000);
  });

  it('on another upgrade path gets 404 with an envelope', async () => {
    const ws = new WebSocket(url.replace('/moat/channel', '/moat/other'));
    const status = await new Promise<number>((resolve) => {
      ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.on('error', () => resolve(-1));
    });
    expect(status).toBe(404);
  });
});

describe('bad input', () => {
  const cases: Array<[string, (c: ChannelClient) => void, number, RegExp]> = [
    ['non-JSON', (c) => c.send('{not json'), 4000, /not JSON/],
    ['a binary frame', (c) => c.ws.send(Buffer.from('{"type":"hello"}')), 4000, /binary/],
    ['an unknown type', (c) => c.send({ type: 'gossip' }), 4000, /type/],
    ['a status before hello', (c) => c.send({ type: 'status', counters: { passed: 0, dropped: 0, undecodable: 0, swaps: 0 } }), 4000, /before hello/],
    ['a hello of a wrong shape', (c) => c.send({ type: 'hello', protocol: 1, token: 'x', moat: '1', digest: 'short', lists: [] }), 4000, /digest/],
    ['an unknown token', (c) => c.send({ type: 'hello', protocol: 1, token: 'moatd_' + 'a'.repeat(40), moat: '1', digest: null, lists: [] }), 4001, /unknown token/],
    ['a protocol version not spoken', (c) => c.send({ type: 'hello', protocol: 2, token: 'x', moat: '1', digest: null, lists: [] }), 4005, /speaks 1/],
    ['an oversized frame', (c) => c.send(JSON.stringify({ type: 'hello', pad: 'x'.repeat(MAX_DAEMON_MESSAGE) })), 1009, /.*/],
  ];
  for (const [what, act, code, reason] of cases) {
    it(`closes on ${what} with ${code} and a reason`, async () => {
      const c = await ChannelClient.open(url);
      act(c);
      const closed = await c.closed;
      expect(closed.code).toBe(code);
      expect(closed.reason).toMatch(reason);
    });
  }

  it('closes a connection that never says hello with 4004', async () => {
    const c = await ChannelClient.open(url);
    const closed = await c.closed;
    expect(closed).toEqual({ code: 4004, reason: expect.stringContaining('no hello') });
  });

  it('closes on a second hello and on an ack of a seq not in flight', async () => {
    const t = token();
    const c = await ChannelClient.hello(url, t.token);
    await c.next('bundle');
    c.send({ type: 'hello', protocol: 1, token: t.token, moat: '1', digest: null, lists: [] });
    expect(await c.closed).toEqual({ code: 4000, reason: expect.stringContaining('second hello') });
    const d = await ChannelClient.hello(url, token().token);
    const b = await d.next('bundle');
    d.send({ type: 'ack', seq: b.seq + 5, result: 'applied', digest: b.digest, versions: { account: null, zone: null } });
    expect(await d.closed).toEqual({ code: 4000, reason: expect.stringContaining('seq 6') });
  });

  it('closes a flood of connections from one address with 4029, and the daemons already connected keep their channel', async () => {
    const user = api.newUser();
    const ep = await ok(user.call('PUT', entrypoint(user.accountId), { rules: [rule('tcp.dstport == 1')] }));
    const good = await ChannelClient.hello(url, token(user.accountId).token);
    good.applied(await good.next('bundle'));
    const flood = await Promise.all(Array.from({ length: 8 }, () => ChannelClient.open(url)));
    const codes = await Promise.all(flood.map((f) => f.closed.then((x) => x.code)));
    expect(codes.filter((x) => x === 4029).length).toBe(4);
    expect(codes.filter((x) => x === 4004).length).toBe(4);
    await ok(user.call('POST', `/accounts/${user.accountId}/rulesets/${ep.id}/rules`, rule('tcp.dstport == 2')));
    expect((await good.next('bundle', 2000)).account.version).toBe('2');
    good.close();
  });
});

describe('a control plane that shuts down', () => {
  it('closes its daemons with 1001 and records them disconnected before its database closes', async () => {
    const other = await startApi({ channel: { heartbeatSeconds: 5 } });
    try {
      const r = other.services.daemons.create({ accountId: other.accountId, name: 'gw' });
      const c = await ChannelClient.hello(other.base.replace(/^http/, 'ws').replace(/\/client\/v4$/, '/moat/channel'), r.token);
      await c.next('bundle');
      await waitFor(() => other.services.daemons.get(r.info.id)?.connected === true);
      await other.stop();
      expect(await c.closed).toEqual({ code: 1001, reason: expect.stringContaining('shuts down') });
      const reopened = Database.open(other.dataDir, { mustExist: true });
      try {
        expect(new Daemons(reopened).get(r.info.id)).toMatchObject({ connected: false, disconnected_at: expect.any(String) });
      } finally {
        reopened.close();
      }
    } finally {
      await other.dispose();
    }
  });
});

async function waitFor(cond: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}
