// Conditional reads: If-None-Match as RFC 9110 defines it (one tag, lists,
// weak tags, `*`), and what the server answers with it: 304 without a body
// when a tag matches, 200 with the body when none does, the same for HEAD,
// authentication before any of it, and listings revalidated by their digest.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ifNoneMatches } from '../../src/api/conditional.js';
import { type TestApi, type TestUser } from '../support/api.js';
import { apiBackends } from '../support/backends.js';

describe('If-None-Match', () => {
  const tag = '"abc-1-xyz"';

  it('matches the tag alone, in a list, and as a weak tag', () => {
    expect(ifNoneMatches('"abc-1-xyz"', tag)).toBe(true);
    expect(ifNoneMatches('"other", "abc-1-xyz"', tag)).toBe(true);
    expect(ifNoneMatches('"other","abc-1-xyz" ,"third"', tag)).toBe(true);
    expect(ifNoneMatches('W/"abc-1-xyz"', tag)).toBe(true);
    expect(ifNoneMatches(' \t"abc-1-xyz"\t', tag)).toBe(true);
  });

  it('matches * alone', () => {
    expect(ifNoneMatches('*', tag)).toBe(true);
    expect(ifNoneMatches(' * ', tag)).toBe(true);
    expect(ifNoneMatches('"other", *', tag)).toBe(false);
  });

  it('does not match other tags, parts of the tag, or the tag unquoted', () => {
    expect(ifNoneMatches(undefined, tag)).toBe(false);
    expect(ifNoneMatches('', tag)).toBe(false);
    expect(ifNoneMatches('"abc-1-xy"', tag)).toBe(false);
    expect(ifNoneMatches('"abc-1-xyzz"', tag)).toBe(false);
    expect(ifNoneMatches('abc-1-xyz', tag)).toBe(false);
    expect(ifNoneMatches('w/"abc-1-xyz"', tag)).toBe(false);
    // A comma belongs to the tag inside quotes: this is one tag, not two.
    expect(ifNoneMatches('"x,"abc-1-xyz"', '"x,"')).toBe(true);
    expect(ifNoneMatches('"x,"abc-1-xyz"', tag)).toBe(false);
  });

  it('stops at a malformed list: only the tags before the fault count', () => {
    expect(ifNoneMatches('"abc-1-xyz", junk', tag)).toBe(true);
    expect(ifNoneMatches('junk, "abc-1-xyz"', tag)).toBe(false);
    expect(ifNoneMatches('"unterminated, "abc-1-xyz', tag)).toBe(false);
  });
});

let api: TestApi;
let user: TestUser;
let entrypoint: string;
let body: string;
let etag: string;
const backends = apiBackends();

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    api = await backend.start();
    user = await api.addUser();
    entrypoint = `/accounts/${user.accountId}/rulesets/phases/network_transit/entrypoint`;
    const put = await user.call('PUT', entrypoint, { rules: [{ action: 'block', expression: 'tcp.dstport == 23', description: 'telnet' }] });
    expect(put.status).toBe(200);
    const got = await user.call('GET', entrypoint);
    body = got.text;
    etag = got.headers.get('etag')!;
  });
  afterAll(async () => {
    await api.dispose();
  });

  describe('a GET of a version with If-None-Match', () => {
    it('answers 200 with a strong ETag and Cache-Control: private, no-cache', async () => {
      const got = await user.call('GET', entrypoint);
      expect(got.status).toBe(200);
      expect(etag).toMatch(/^"[0-9a-f]{32}-1-[0-9a-z]+"$/);
      expect([got.headers.get('etag'), got.headers.get('cache-control')]).toEqual([etag, 'private, no-cache']);
    });

    it('answers 304 without a body when the tag matches', async () => {
      for (const field of [etag, `"nope", ${etag}`, `W/${etag}`, '*']) {
        const r = await user.call('GET', entrypoint, undefined, { 'If-None-Match': field });
        expect([r.status, r.text, r.headers.get('etag'), r.headers.get('cache-control')]).toEqual([304, '', etag, 'private, no-cache']);
        expect(r.headers.get('content-type')).toBeNull();
      }
    });

    it('answers 200 with the body when no tag matches', async () => {
      for (const field of ['"nope"', etag.slice(0, -2) + '"', 'W/"x", "y"']) {
        const r = await user.call('GET', entrypoint, undefined, { 'If-None-Match': field });
        expect([r.status, r.text, r.headers.get('etag')]).toEqual([200, body, etag]);
      }
    });

    it('answers 404, not 304, to * when the entrypoint does not exist', async () => {
      const r = await user.call('GET', `/zones/${user.zoneId}/rulesets/phases/network_transit/entrypoint`, undefined, { 'If-None-Match': '*' });
      expect([r.status, r.json.errors[0].code]).toEqual([404, 10003]);
    });

    it('authenticates before it compares tags: a wrong key gets 403, not 304', async () => {
      const r = await user.call('GET', entrypoint, undefined, { 'If-None-Match': etag, 'X-Auth-Key': 'k' + '0'.repeat(32) });
      expect([r.status, r.json.errors[0].code]).toEqual([403, 9103]);
      const other = await api.addUser();
      const foreign = await other.call('GET', entrypoint, undefined, { 'If-None-Match': etag });
      expect([foreign.status, foreign.json.errors[0].code]).toEqual([403, 10000]);
    });

    it('answers HEAD with the headers of GET and no body, and 304 when the tag matches', async () => {
      const head = await user.call('HEAD', entrypoint);
      expect([head.status, head.text, head.headers.get('etag'), head.headers.get('content-length'), head.headers.get('content-type')]).toEqual([
        200,
        '',
        etag,
        String(Buffer.byteLength(body)),
        'application/json; charset=utf-8',
      ]);
      // RFC 9110 section 8.6: a 304 has no Content-Length, or that of the 200's body (never 0).
      for (const method of ['HEAD', 'GET']) {
        const notModified = await user.call(method, entrypoint, undefined, { 'If-None-Match': etag });
        expect([notModified.status, notModified.text, notModified.headers.get('etag')]).toEqual([304, '', etag]);
        expect([null, String(Buffer.byteLength(body))]).toContain(notModified.headers.get('content-length'));
      }
    });
  });

  describe('a listing with If-None-Match', () => {
    it('answers 304 while the listing is unchanged and 200 with a new tag once it changes', async () => {
      const lister = await api.addUser();
      const list = `/accounts/${lister.accountId}/rulesets`;
      await lister.call('POST', list, { name: 'one', kind: 'custom', phase: 'network_transit' });
      const first = await lister.call('GET', list);
      const tag = first.headers.get('etag')!;
      expect([first.status, first.json.result.map((r: { name: string }) => r.name), first.headers.get('cache-control')]).toEqual([200, ['one'], 'private, no-cache']);
      const same = await lister.call('GET', list, undefined, { 'If-None-Match': tag });
      expect([same.status, same.text]).toEqual([304, '']);
      const created = await lister.call('POST', list, { name: 'two', kind: 'custom', phase: 'network_transit' });
      const changed = await lister.call('GET', list, undefined, { 'If-None-Match': tag });
      expect(changed.status).toBe(200);
      expect(changed.json.result.map((r: { name: string }) => r.name)).toEqual(['one', 'two']);
      expect(changed.headers.get('etag')).not.toBe(tag);
      // The versions listing of a ruleset too.
      const versions = `${list}/${created.json.result.id as string}/versions`;
      const v = await lister.call('GET', versions);
      expect((await lister.call('GET', versions, undefined, { 'If-None-Match': v.headers.get('etag')! })).status).toBe(304);
      await lister.call('POST', `${list}/${created.json.result.id as string}/rules`, { action: 'block', expression: 'tcp.dstport == 1' });
      const v2 = await lister.call('GET', versions, undefined, { 'If-None-Match': v.headers.get('etag')! });
      expect([v2.status, v2.json.result.map((x: { version: string }) => x.version)]).toEqual([200, ['1', '2']]);
    });
  });

  describe('an IP list read with If-None-Match', () => {
    it('answers 304 while the list is unchanged, and 200 with a new tag once its description changes', async () => {
      const owner = await api.addUser();
      const lists = `/accounts/${owner.accountId}/rules/lists`;
      const created = await owner.call('POST', lists, { name: 'office', kind: 'ip', description: 'before' });
      expect(created.status).toBe(200);
      const one = `${lists}/${created.json.result.id as string}`;
      for (const path of [lists, one, `${one}/items`]) {
        const first = await owner.call('GET', path);
        const tag = first.headers.get('etag')!;
        expect([first.status, first.headers.get('cache-control')]).toEqual([200, 'private, no-cache']);
        expect(tag).toMatch(/^"[A-Za-z0-9_-]{27}"$/);
        const same = await owner.call('GET', path, undefined, { 'If-None-Match': tag });
        expect([same.status, same.text]).toEqual([304, '']);
      }
      const before = await owner.call('GET', one);
      expect((await owner.call('PUT', one, { description: 'after' })).status).toBe(200);
      const after = await owner.call('GET', one, undefined, { 'If-None-Match': before.headers.get('etag')! });
      expect([after.status, after.json.result.description]).toEqual([200, 'after']);
      expect(after.headers.get('etag')).not.toBe(before.headers.get('etag'));
    });
  });
});
