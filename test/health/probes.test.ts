// Probes against real servers on 127.0.0.1: HTTP status classes, expected
// body, redirects, the Host header and User-Agent, timeouts with immediate
// retries, TCP connect, and the SMTP dialogue.
import { createServer as createHttpServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codeExpected, probe, PROBE_USER_AGENT, type ProbeMonitor } from '../../src/health/index.js';

let http: Server;
let port: number;
let lastRequest: IncomingMessage | undefined;
let hits = 0;

const monitor = (over: Partial<ProbeMonitor & { retries: number }> = {}): ProbeMonitor & { retries: number } => ({
  type: 'http',
  port,
  timeout: 1,
  retries: 0,
  method: 'GET',
  path: '/',
  header: {},
  expected_codes: '200',
  expected_body: '',
  follow_redirects: false,
  allow_insecure: false,
  ...over,
});

beforeAll(async () => {
  http = createHttpServer((req, res) => {
    lastRequest = req;
    hits++;
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/status') return res.writeHead(Number(url.searchParams.get('code'))).end('status');
    if (url.pathname === '/redirect') return res.writeHead(302, { location: '/body' }).end();
    if (url.pathname === '/body') return res.writeHead(200).end('<html>All Systems OK</html>');
    if (url.pathname === '/slow') return; // never answers
    res.writeHead(200).end('ok');
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  port = (http.address() as AddressInfo).port;
});
afterAll(async () => {
  http.closeAllConnections();
  await new Promise((r) => http.close(r));
});

describe('expected_codes', () => {
  it('matches a code, a class and a list', () => {
    expect([codeExpected('200', 200), codeExpected('200', 204), codeExpected('2xx', 204), codeExpected('2xx', 301), codeExpected('200, 302', 302), codeExpected('200 302', 404)]).toEqual([
      true,
      false,
      true,
      false,
      true,
      false,
    ]);
  });
});

describe('HTTP probes', () => {
  it('pass on an expected code, with the RTT and code, sending the monitor\'s headers, the origin\'s Host first, and Moat\'s User-Agent', async () => {
    const r = await probe(monitor({ header: { Host: ['monitor.example'], 'X-Probe': ['1'] } }), { address: '127.0.0.1', port: 0, host: 'origin.example' });
    expect(r).toMatchObject({ ok: true, reason: '', responseCode: 200 });
    expect(r.rttMs).toBeGreaterThan(0);
    expect(lastRequest!.headers.host).toBe('origin.example');
    expect(lastRequest!.headers['x-probe']).toBe('1');
    expect(lastRequest!.headers['user-agent']).toBe(PROBE_USER_AGENT);
  });

  it('fail on another code with "HTTP <code>", and pass it with a class', async () => {
    expect(await probe(monitor({ path: '/status?code=503' }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: false, reason: 'HTTP 503', responseCode: 503 });
    expect(await probe(monitor({ path: '/status?code=204', expected_codes: '2xx' }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: true, responseCode: 204 });
  });

  it('fail on a redirect unless follow_redirects, then check the final body case-insensitively', async () => {
    expect(await probe(monitor({ path: '/redirect' }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: false, reason: 'HTTP 302 (redirects are not followed)' });
    expect(await probe(monitor({ path: '/redirect', follow_redirects: true, expected_body: 'all systems ok' }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: true, responseCode: 200 });
    expect(await probe(monitor({ path: '/body', expected_body: 'degraded' }), { address: '127.0.0.1', port: 0 })).toMatchObject({
      ok: false,
      reason: 'response body does not contain expected_body',
    });
  });

  it('retry immediately on a timeout only, `retries` times', async () => {
    hits = 0;
    const started = Date.now();
    const r = await probe(monitor({ path: '/slow', retries: 2 }), { address: '127.0.0.1', port: 0 });
    expect(r).toMatchObject({ ok: false, reason: 'timeout', timedOut: true });
    expect(hits).toBe(3);
    expect(Date.now() - started).toBeGreaterThanOrEqual(2900);
    hits = 0;
    await probe(monitor({ path: '/status?code=500', retries: 2 }), { address: '127.0.0.1', port: 0 });
    expect(hits).toBe(1);
  });

  it('fail with "connection refused" where nothing listens', async () => {
    const closed = createTcpServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const p = (closed.address() as AddressInfo).port;
    await new Promise((r) => closed.close(r));
    expect(await probe(monitor({ port: p }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: false, reason: 'connection refused' });
    expect(await probe(monitor({ type: 'tcp', port: p, method: 'connection_established' }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: false, reason: 'connection refused' });
  });
});

describe('TCP and SMTP probes', () => {
  let smtp: TcpServer;
  let smtpPort: number;
  let greeting = '220 mx.example ESMTP\r\n';
  beforeAll(async () => {
    smtp = createTcpServer((s) => {
      s.on('error', () => undefined); // the probe may reset the connection after its last reply
      s.write(greeting);
      s.on('data', (d) => {
        const line = d.toString();
        if (line.startsWith('HELO')) s.write('250 mx.example\r\n');
        else if (line.startsWith('QUIT')) s.end('221 bye\r\n');
      });
    });
    await new Promise<void>((r) => smtp.listen(0, '127.0.0.1', r));
    smtpPort = (smtp.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((r) => smtp.close(r));
  });

  it('pass a TCP connect to a listening port, at the origin\'s port when the monitor has none', async () => {
    expect(await probe(monitor({ type: 'tcp', port: smtpPort }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: true });
  });

  it('pass SMTP on 220, 250, 221, and fail on another greeting with its code', async () => {
    greeting = '220-mx.example first line\r\n220 ESMTP ready\r\n';
    expect(await probe(monitor({ type: 'smtp', port: smtpPort }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: true, responseCode: 221 });
    greeting = '554 no service\r\n';
    expect(await probe(monitor({ type: 'smtp', port: smtpPort }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: false, reason: 'SMTP 554 (expected 220)', responseCode: 554 });
  });
});
