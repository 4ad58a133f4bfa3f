// What the HTTP layer answers before (or instead of) a route: over-long path
// segments, bad percent-encodings, malformed request lines and headers,
// CONNECT, a method a route does not have, and bodies that are not UTF-8 or
// hold lone surrogates. Each is a v4 envelope with a registry code, never
// fastify's or node's own body, and never an echo of the URI. Raw requests go
// through node:net so that nothing between the test and the server fixes them up.
import { connect } from 'node:net';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERRORS } from '../../src/errors/index.js';
import { clientErrorHandler } from '../../src/api/server.js';
import { newId } from '../../src/store/index.js';
import { startApi, type TestApi } from '../support/api.js';

let api: TestApi;
let port: number;

beforeAll(async () => {
  api = await startApi();
  port = Number(new URL(api.base).port);
});

afterAll(async () => {
  await api.dispose();
});

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests assert on the envelope's shape
  json: any;
}

/** Writes `request` as is on a new connection and reads the answer until the server closes it. */
function raw(request: string | Buffer): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.setTimeout(5000, () => socket.destroy(new Error('no answer within 5 s')));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const all = Buffer.concat(chunks).toString('utf8');
      const split = all.indexOf('\r\n\r\n');
      if (split < 0) return reject(new Error(`no HTTP answer: ${JSON.stringify(all)}`));
      const [statusLine, ...headerLines] = all.slice(0, split).split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of headerLines) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      const text = all.slice(split + 4);
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
      resolve({ status: Number(statusLine!.split(' ')[1]), headers, text, json });
    });
    socket.write(request);
  });
}

/** A request line and headers with the first user's credentials, closing the connection after the answer. */
function request(method: string, path: string, extra = '', body = ''): string {
  const length = body === '' ? '' : `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`;
  return `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Auth-Email: ${api.email}\r\nX-Auth-Key: ${api.key}\r\nConnection: close\r\n${length}${extra}\r\n${body}`;
}

function expectFailure(r: RawResponse, status: number, code: number): void {
  expect(r.status, r.text).toBe(status);
  expect(r.headers['content-type']).toMatch(/^application\/json\b/);
  expect(r.json).toMatchObject({ success: false, messages: [], result: null });
  expect(r.json.errors[0].code).toBe(code);
  expect(Object.values(ERRORS).some((d) => d.code === code)).toBe(true);
  expect(r.text).not.toMatch(/FST_|statusCode|"error":/);
}

const rulesets = () => `/client/v4/accounts/${api.accountId}/rulesets`;

describe('what the HTTP layer refuses', () => {
  it('answers a 300-character id with 414/7015, without echoing the URI', async () => {
    const id = 'a'.repeat(300);
    const r = await raw(request('GET', `${rulesets()}/${id}`));
    expectFailure(r, 414, 7015);
    expect(r.text).not.toContain(id);
  });

  it('answers a bad percent-encoding (%ff%fe, a lone %, %zz) with 400/7016, without echoing it', async () => {
    for (const bad of ['%ff%fe', '%', '%zz', 'x%zzsecret']) {
      const r = await raw(request('GET', `${rulesets()}/${bad}`));
      expectFailure(r, 400, 7016);
      expect(r.text).not.toContain(bad);
    }
  });

  it('cuts what a 404, 7003 or 501 repeats of a long path after 200 characters', async () => {
    const tail = 'abc/'.repeat(2500);
    for (const path of [`/client/v4/nowhere/${tail}`, `/client/v4/accounts/${api.accountId}/load_balancers/pools/${tail}`]) {
      const r = await raw(request('GET', path));
      expect([404, 501], r.text.slice(0, 300)).toContain(r.status);
      expect(r.text.length).toBeLessThan(1000);
      expect(r.text).toContain(`… (${path.length} characters)`);
    }
    const badId = await raw(request('GET', `/client/v4/accounts/${'z'.repeat(150)}/rules/lists/${'y'.repeat(150)}`));
    expect(badId.json.errors[0].code).toBe(7003);
    expect(badId.text).toContain('characters)');
  });

  it('authenticates before answering a bad URI: a wrong key gets the authentication error', async () => {
    const r = await raw(`GET ${rulesets()}/${'a'.repeat(300)} HTTP/1.1\r\nHost: x\r\nX-Auth-Email: ${api.email}\r\nX-Auth-Key: wrong${newId()}\r\nConnection: close\r\n\r\n`);
    expect(r.status).toBe(403);
    expect(r.json.errors[0].code).toBe(9103);
    const noAuth = await raw(`GET ${rulesets()}/%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(noAuth.status).toBe(400);
    expect(noAuth.json.errors[0].code).toBe(6003);
  });

  it('answers a NUL byte in a header, and a malformed request line, with 400/7016', async () => {
    expectFailure(await raw(request('GET', rulesets(), 'X-Bad: a\0b\r\n')), 400, 7016);
    expectFailure(await raw('GET /client/v4 /x HTTP/1.1 junk\r\n\r\n'), 400, 7016);
    expectFailure(await raw('FOO\r\n\r\n'), 400, 7016);
  });

  it('answers headers over node\'s limit with 431/7017', async () => {
    expectFailure(await raw(request('GET', rulesets(), `X-Big: ${'b'.repeat(20_000)}\r\n`)), 431, 7017);
  });

  it('answers CONNECT with 405/7001 and an Allow header, after authentication', async () => {
    const r = await raw(request('CONNECT', '127.0.0.1:443'));
    expectFailure(r, 405, 7001);
    expect(r.headers['allow']).toContain('GET');
    const noAuth = await raw('CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n');
    expect(noAuth.status).toBe(400);
    expect(noAuth.json.errors[0].code).toBe(6003);
  });
});

describe('node\'s client errors without a real connection', () => {
  const answer = (code: string | undefined) => {
    const socket = new PassThrough();
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    clientErrorHandler(Object.assign(new Error('x'), { code }), socket);
    return Buffer.concat(chunks).toString('utf8');
  };

  it('answers a request timeout with 408/7018 and closes the connection', () => {
    const text = answer('ERR_HTTP_REQUEST_TIMEOUT');
    expect(text).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(text).toContain('Connection: close');
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toMatchObject({ success: false, errors: [{ code: 7018 }], result: null });
  });

  it('writes nothing on a connection the client reset', () => {
    expect(answer('ECONNRESET')).toBe('');
  });
});

describe('a method the route does not have', () => {
  it('answers 405/7001 with an Allow header listing the route\'s methods', async () => {
    const a = `/accounts/${api.accountId}`;
    const z = `/zones/${api.zoneId}`;
    const id = newId();
    for (const [method, path, allow] of [
      ['PATCH', `${a}/rulesets`, 'GET, HEAD, POST'],
      ['DELETE', `${z}/rulesets`, 'GET, HEAD, POST'],
      ['POST', `${a}/rulesets/phases/network_transit/entrypoint`, 'GET, HEAD, PUT'],
      ['PATCH', `${a}/rulesets/${id}`, 'DELETE, GET, HEAD, PUT'],
      ['PUT', `${a}/rulesets/${id}/rules`, 'POST'],
      ['PUT', `${a}/rules/lists`, 'GET, HEAD, POST'],
      ['DELETE', `/user/tokens/verify`, 'GET, HEAD'],
      ['POST', `/zones/${api.zoneId}`, 'GET, HEAD'],
    ] as const) {
      const r = await api.call(method, path);
      expect(r.status, `${method} ${path}: ${r.text}`).toBe(405);
      expect(r.json.errors[0].code).toBe(7001);
      expect(r.headers.get('allow'), `${method} ${path}`).toBe(allow);
      expect(r.json.success).toBe(false);
    }
  });

  it('authenticates first, and keeps 404/7000 for paths no route has', async () => {
    const wrongKey = await api.call('PATCH', `/accounts/${api.accountId}/rulesets`, undefined, { 'X-Auth-Key': 'wrong' + newId() });
    expect(wrongKey.status).toBe(403);
    expect(wrongKey.headers.get('allow')).toBeNull();
    const none = await api.call('PATCH', `/accounts/${api.accountId}/nothing-here`);
    expect(none.status).toBe(404);
    expect(none.json.errors[0].code).toBe(7000);
  });
});

describe('bodies that are not UTF-8', () => {
  const body = (name: Buffer) => Buffer.concat([Buffer.from('{"name":"'), name, Buffer.from('","kind":"root","phase":"network_transit","rules":[]}')]);

  it('refuses invalid UTF-8 with 400/7019 naming the offset, and writes nothing', async () => {
    // The name starts at byte 9 of the body; a real U+FFFD before the bad byte is not mistaken for it.
    for (const [bad, offset] of [
      [Buffer.from([0xff, 0xfe]), 9],
      [Buffer.from([0xc3]), 9],
      [Buffer.from([0xed, 0xa0, 0x80]), 9],
      [Buffer.from('ok\x80', 'latin1'), 11],
      [Buffer.concat([Buffer.from('\uFFFD\u{1F600}\uFFFD', 'utf8'), Buffer.from([0xc0, 0x80])]), 9 + 10],
    ] as const) {
      const b = body(bad);
      const head = request('POST', `/client/v4/zones/${api.zoneId}/rulesets`, `Content-Type: application/json\r\nContent-Length: ${b.length}\r\n`);
      const r = await raw(Buffer.concat([Buffer.from(head), b]));
      expectFailure(r, 400, 7019);
      expect(r.json.errors[0].message).toBe(`Request body is not valid UTF-8 (first invalid byte at offset ${offset})`);
    }
    expect((await api.call('GET', `/zones/${api.zoneId}/rulesets`)).json.result).toEqual([]);
  });

  it('refuses a lone surrogate escape with 400/7019 and the pointer of the string', async () => {
    const r = await api.call('POST', `/zones/${api.zoneId}/rulesets`, '{"name":"a\\ud800b","kind":"zone","phase":"network_transit"}');
    expect(r.status).toBe(400);
    expect(r.json.errors[0]).toMatchObject({ code: 7019, source: { pointer: '/name' } });
    const deep = await api.call('POST', `/zones/${api.zoneId}/rulesets`, '{"name":"n","kind":"zone","phase":"network_transit","rules":[{"action":"block","expression":"ip.src eq 192.0.2.1","description":"\\udc00"}]}');
    expect(deep.json.errors[0]).toMatchObject({ code: 7019, source: { pointer: '/rules/0/description' } });
    const key = await api.call('POST', `/zones/${api.zoneId}/rulesets`, '{"a/\\ud800":1}');
    expect(key.json.errors[0]).toMatchObject({ code: 7019, source: { pointer: '/a~1\ud800' } });
    expect((await api.call('GET', `/zones/${api.zoneId}/rulesets`)).json.result).toEqual([]);
  });

  it('stores what was sent: valid pairs, raw or escaped, and U+FFFD itself come back unchanged', async () => {
    const name = 'x \u{1F600} \uFFFD é';
    const r = await api.call('POST', `/zones/${api.zoneId}/rulesets`, `{"name":"${name.replace('\u{1F600}', '\\ud83d\\ude00')}","kind":"zone","phase":"network_transit"}`);
    expect(r.status, r.text).toBe(200);
    expect(r.json.result.name).toBe(name);
    const back = await api.call('GET', `/zones/${api.zoneId}/rulesets/${r.json.result.id}`);
    expect(back.json.result.name).toBe(name);
    await api.call('DELETE', `/zones/${api.zoneId}/rulesets/${r.json.result.id}`);
  });
});
