// The response cache: a least-recently-used map bounded by bytes, and the GETs
// of rulesets, versions and entrypoints it serves. Cached bytes must be those
// the uncached path writes, and a GET after a committed write (by this server
// or by another `moat serve` process on the same database file) must never
// answer the bytes or the ETag of the version it replaced.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ok, type RulesetView } from '../../src/api/index.js';
import { ResponseCache, type CachedResponse } from '../../src/api/response-cache.js';
import { ensureBuilt } from '../support/cli.js';
import { serveProcess, startApi, type ServeProcess, type TestApi } from '../support/api.js';

function entry(text: string, etag = '"e"'): CachedResponse {
  return { body: Buffer.from(text), etag };
}

describe('the response cache', () => {
  it('evicts the least recently used entries when the bytes of a new one do not fit', () => {
    const one = entry('x'.repeat(1000));
    // Three entries of 1000 bytes fit with their overhead (about 170 bytes each), a fourth does not.
    const cache = new ResponseCache(3700);
    cache.set('a', one);
    cache.set('b', one);
    cache.set('c', one);
    expect(cache.get('a')).toBe(one); // a is now the most recently used
    cache.set('d', one);
    expect([cache.get('a'), cache.get('b'), cache.get('c'), cache.get('d')]).toEqual([one, undefined, one, one]);
    expect(cache.size).toBe(3);
    expect(cache.bytes).toBeLessThanOrEqual(3700);
  });

  it('does not keep an entry larger than the whole cache, and caches nothing when its size is 0', () => {
    const cache = new ResponseCache(500);
    cache.set('small', entry('s'));
    cache.set('big', entry('x'.repeat(600)));
    expect([cache.get('big'), cache.get('small')?.body.toString()]).toEqual([undefined, 's']);
    const none = new ResponseCache(0);
    none.set('a', entry('a'));
    expect([none.get('a'), none.size, none.bytes]).toEqual([undefined, 0, 0]);
  });

  it('counts a replaced entry once', () => {
    const cache = new ResponseCache(10_000);
    cache.set('a', entry('x'.repeat(100)));
    const before = cache.bytes;
    cache.set('a', entry('y'.repeat(100)));
    expect([cache.bytes, cache.size, cache.get('a')?.body.toString()]).toEqual([before, 1, 'y'.repeat(100)]);
  });
});

const RULES = [
  { action: 'block', expression: 'tcp.dstport == 22', description: 'ssh' },
  { action: 'log', expression: 'ip.src in {192.0.2.0/24}', description: 'doc net \u00e9\u2603' },
  { action: 'skip', action_parameters: { ruleset: 'current' }, expression: 'udp.dstport == 53', description: 'dns' },
];

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.dispose();
});

describe('GET of a ruleset, a version and an entrypoint', () => {
  it('answers the same bytes from the cache as a server without one, and as the envelope of the uncached view', async () => {
    const user = api.newUser();
    const ep = `/accounts/${user.accountId}/rulesets/phases/network_transit/entrypoint`;
    const put = await user.call('PUT', ep, { description: 'edge', rules: RULES });
    expect(put.status).toBe(200);
    const id = put.json.result.id as string;
    const paths = [ep, `${ep}/versions/1`, `/accounts/${user.accountId}/rulesets/${id}`, `/accounts/${user.accountId}/rulesets/${id}/versions/1`];
    const first = await user.call('GET', paths[0]!);
    const cachedEntries = api.services.rulesets.responses.size;
    expect(cachedEntries).toBeGreaterThan(0);
    const answers = [first];
    for (const p of paths) answers.push(await user.call('GET', p));
    // Every path read the one entry: nothing more was serialized.
    expect(api.services.rulesets.responses.size).toBe(cachedEntries);
    // What was stored, from the test's own input, not from the code under test.
    const result = first.json.result;
    expect([result.id, result.name, result.kind, result.phase, result.version, result.description]).toEqual([id, 'default', 'root', 'network_transit', '1', 'edge']);
    expect(result.rules.map((r: Record<string, unknown>) => [r['action'], r['expression'], r['description'], r['action_parameters']])).toEqual(
      RULES.map((r) => [r.action, r.expression, r.description, r.action_parameters]),
    );
    // A second server over the same file with no cache serializes every answer.
    const uncached = await startApi({ dataDir: api.dataDir, email: user.email, key: user.key, limits: { responseCacheBytes: 0 } });
    try {
      for (const p of paths) {
        const u = await uncached.call('GET', p, undefined, { 'X-Auth-Email': user.email, 'X-Auth-Key': user.key });
        expect(u.status).toBe(200);
        expect(uncached.services.rulesets.responses.size).toBe(0);
        for (const a of answers) expect(Buffer.from(a.text).equals(Buffer.from(u.text))).toBe(true);
        expect(u.headers.get('etag')).toBe(first.headers.get('etag'));
      }
    } finally {
      await uncached.stop();
    }
    // And the envelope fastify would have serialized from the view, as before the cache.
    const view: RulesetView = await api.services.rulesets.get({ level: 'account', accountId: user.accountId, zoneId: null }, id);
    expect(first.text).toBe(JSON.stringify(ok(view)));
    expect(first.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(first.headers.get('content-length')).toBe(String(Buffer.byteLength(first.text)));
  });

  it('answers the new version and a new ETag after a write, and the old version under its own path', async () => {
    const user = api.newUser();
    const base = `/accounts/${user.accountId}/rulesets`;
    const created = await user.call('POST', base, { name: 'c', kind: 'custom', phase: 'network_transit', rules: [RULES[0]] });
    const id = created.json.result.id as string;
    const v1 = await user.call('GET', `${base}/${id}`);
    const added = await user.call('POST', `${base}/${id}/rules`, RULES[1]);
    expect(added.json.result.version).toBe('2');
    const v2 = await user.call('GET', `${base}/${id}`);
    expect(v2.json.result.version).toBe('2');
    expect(v2.json.result.rules.map((r: { description: string }) => r.description)).toEqual(['ssh', RULES[1]!.description]);
    expect(v2.headers.get('etag')).not.toBe(v1.headers.get('etag'));
    const old = await user.call('GET', `${base}/${id}/versions/1`);
    expect([old.json.result.version, old.headers.get('etag'), old.text]).toEqual(['1', v1.headers.get('etag'), v1.text]);
    // Deleting the latest version makes version 1 the ruleset's answer again.
    expect((await user.call('DELETE', `${base}/${id}/versions/2`)).status).toBe(204);
    const back = await user.call('GET', `${base}/${id}`);
    expect([back.json.result.version, back.headers.get('etag')]).toEqual(['1', v1.headers.get('etag')]);
    expect((await user.call('GET', `${base}/${id}/versions/2`)).status).toBe(404);
  });

  it('answers 404 for an entrypoint that does not exist yet, and its first version once it does', async () => {
    const user = api.newUser();
    const ep = `/accounts/${user.accountId}/rulesets/phases/network_transit/entrypoint`;
    const none = await user.call('GET', ep);
    expect([none.status, none.json.errors[0].code, none.headers.get('etag')]).toEqual([404, 10003, null]);
    await user.call('PUT', ep, { rules: [RULES[0]] });
    const some = await user.call('GET', ep);
    expect([some.status, some.json.result.version]).toEqual([200, '1']);
  });

  it("does not serve another account's ruleset from the cache", async () => {
    const owner = api.newUser();
    const other = api.newUser();
    const created = await owner.call('POST', `/accounts/${owner.accountId}/rulesets`, { name: 'mine', kind: 'custom', phase: 'network_transit' });
    const id = created.json.result.id as string;
    expect((await owner.call('GET', `/accounts/${owner.accountId}/rulesets/${id}`)).status).toBe(200);
    const theirs = await other.call('GET', `/accounts/${other.accountId}/rulesets/${id}`);
    const theirVersion = await other.call('GET', `/accounts/${other.accountId}/rulesets/${id}/versions/1`);
    expect([theirs.status, theirs.json.errors[0].code, theirVersion.status, theirVersion.json.errors[0].code]).toEqual([404, 7200, 404, 7200]);
  });
});

describe('GET after a write by another process on the same database', () => {
  let other: ServeProcess | undefined;
  afterAll(() => {
    other?.child.kill('SIGKILL');
  });

  it('never answers the replaced version, however quickly it asks', async () => {
    ensureBuilt();
    other = await serveProcess(api.dataDir);
    const headers = { 'X-Auth-Email': api.email, 'X-Auth-Key': api.key, 'Content-Type': 'application/json' };
    const ep = `/accounts/${api.accountId}/rulesets/phases/network_transit/entrypoint`;
    const put = await api.call('PUT', ep, { rules: [RULES[0]] });
    expect(put.status).toBe(200);
    const id = put.json.result.id as string;
    let before = await api.call('GET', ep);
    for (let i = 0; i < 20; i++) {
      // The other process writes; as soon as it answered, this server is asked.
      const res = await fetch(`${other.url}/accounts/${api.accountId}/rulesets/${id}/rules`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ action: 'block', expression: `tcp.dstport == ${1000 + i}`, description: `round ${i}` }),
      });
      expect(res.status).toBe(200);
      const written = ((await res.json()) as { result: { version: string } }).result.version;
      expect(written).toBe(String(2 + i));
      const after = await api.call('GET', ep);
      expect(after.json.result.version).toBe(written);
      expect(after.json.result.rules.at(-1).description).toBe(`round ${i}`);
      expect(after.headers.get('etag')).not.toBe(before.headers.get('etag'));
      // A client revalidating with the tag it held gets the new body, not 304.
      const revalidated = await api.call('GET', `/accounts/${api.accountId}/rulesets/${id}`, undefined, { 'If-None-Match': before.headers.get('etag')! });
      expect([revalidated.status, revalidated.json.result.version]).toEqual([200, written]);
      before = after;
    }
    // A version deleted by the other process is not answered from the cache.
    const del = await fetch(`${other.url}/accounts/${api.accountId}/rulesets/${id}/versions/21`, { method: 'DELETE', headers: { 'X-Auth-Email': api.email, 'X-Auth-Key': api.key } });
    expect(del.status).toBe(204);
    const gone = await api.call('GET', `/accounts/${api.accountId}/rulesets/${id}/versions/21`);
    expect([gone.status, gone.json.errors[0].code]).toEqual([404, 7201]);
    const latest = await api.call('GET', ep);
    expect(latest.json.result.version).toBe('20');
  });
});
