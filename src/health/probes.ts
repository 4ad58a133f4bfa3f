// One health probe of one origin, by monitor type: HTTP(S) status, body and
// redirects; TCP connect; the SMTP dialogue (greeting 220, HELO 250, QUIT
// 221); ICMP echo through the system's ping; UDP with ICMP port-unreachable.
// A probe never throws: it resolves with pass or fail, a failure reason in the
// words Cloudflare's health endpoints use, the status code and the RTT.

import { spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect, isIPv6 } from 'node:net';

/** What a probe needs of the monitor (its stored body). */
export interface ProbeMonitor {
  type: string;
  port: number;
  timeout: number;
  method: string;
  path: string;
  header: Record<string, string[]>;
  expected_codes: string;
  expected_body: string;
  follow_redirects: boolean;
  allow_insecure: boolean;
}

/** What a probe needs of the origin. */
export interface ProbeOrigin {
  address: string;
  port: number;
  /** The origin's `header.host`, which takes precedence over the monitor's Host. */
  host?: string | undefined;
}

/** The outcome of one probe. */
export interface ProbeResult {
  ok: boolean;
  /** "" when ok; else e.g. "HTTP 503", "timeout", "connection refused". */
  reason: string;
  timedOut: boolean;
  responseCode: number | null;
  rttMs: number | null;
}

/** The User-Agent of HTTP probes (monitors cannot override it, as on Cloudflare). */
export const PROBE_USER_AGENT = 'Mozilla/5.0 (compatible; Moat-Health-Checks/1.0)';
/** How much of a body is searched for expected_body (Cloudflare: 100 MB; bounded lower so that 2,000 probes cannot hold 200 GB). */
export const MAX_BODY_BYTES = 1024 * 1024;
const MAX_REDIRECTS = 5;

const fail = (reason: string, extra: Partial<ProbeResult> = {}): ProbeResult => ({ ok: false, reason, timedOut: false, responseCode: null, rttMs: null, ...extra });
const timeout = (): ProbeResult => fail('timeout', { timedOut: true });

/** Whether `code` is one of `expected` ("200", "2xx", "200, 302"). */
export function codeExpected(expected: string, code: number): boolean {
  for (const token of expected.split(/[\s,]+/)) {
    if (token === '') continue;
    if (/^[1-5]xx$/i.test(token)) {
      if (Math.floor(code / 100) === Number(token[0])) return true;
    } else if (Number(token) === code) return true;
  }
  return false;
}

function socketReason(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'ECONNREFUSED':
      return 'connection refused';
    case 'ECONNRESET':
      return 'connection reset';
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return 'no route to host';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'DNS resolution failed';
    default:
      return err.code !== undefined ? `connection failed (${err.code})` : err.message.startsWith('SSL') || /certificate|TLS/i.test(err.message) ? `TLS error: ${err.message}` : err.message;
  }
}

function hostPart(address: string): string {
  return isIPv6(address) ? `[${address}]` : address;
}

/**
 * Plain HTTP without expected_body: one request on a raw socket, read up to
 * the end of the response headers. node:http's client cost 340 us of CPU per
 * probe (a new connection each time), a third of a core at 1,000 probes/s;
 * this costs about what a TCP connect does. Anything else (TLS, a body to
 * search, a redirect to follow) goes through node:http.
 */
function probeHttpFast(m: ProbeMonitor, o: ProbeOrigin, port: number, signal: AbortSignal): Promise<ProbeResult | 'full'> {
  const started = performance.now();
  let head = `${m.method} ${m.path} HTTP/1.1\r\n`;
  let host = o.host;
  for (const [k, vs] of Object.entries(m.header)) {
    if (k.toLowerCase() === 'host') {
      host ??= vs[0];
      continue;
    }
    for (const v of vs) head += `${k}: ${v}\r\n`;
  }
  host ??= port === 80 ? hostPart(o.address) : `${hostPart(o.address)}:${port}`;
  head += `Host: ${host}\r\nUser-Agent: ${PROBE_USER_AGENT}\r\nConnection: close\r\n\r\n`;
  return new Promise((resolve) => {
    const s = connect({ host: o.address, port, signal });
    let buffer = '';
    const finish = (r: ProbeResult | 'full') => {
      s.destroy();
      resolve(r);
    };
    s.setEncoding('latin1');
    s.once('connect', () => s.write(head));
    s.on('data', (chunk: string) => {
      buffer += chunk;
      const end = buffer.indexOf('\r\n\r\n');
      if (end < 0) {
        if (buffer.length > 64 * 1024) finish(fail('response headers too long'));
        return;
      }
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(buffer);
      if (status === null) return finish(fail('not an HTTP response'));
      const code = Number(status[1]);
      const rttMs = performance.now() - started;
      const redirect = code >= 300 && code < 400 && /\r\nlocation:/i.test(buffer.slice(0, end));
      if (redirect && m.follow_redirects) return finish('full');
      if (!codeExpected(m.expected_codes, code)) return finish(fail(redirect ? `HTTP ${code} (redirects are not followed)` : `HTTP ${code}`, { responseCode: code, rttMs }));
      finish({ ok: true, reason: '', timedOut: false, responseCode: code, rttMs });
    });
    s.on('error', (err: NodeJS.ErrnoException) => resolve(signal.aborted ? timeout() : fail(socketReason(err))));
    s.once('end', () => {
      if (!s.destroyed) finish(fail('connection closed before the response headers'));
    });
  });
}

async function probeHttp(m: ProbeMonitor, o: ProbeOrigin, signal: AbortSignal): Promise<ProbeResult> {
  if (m.type === 'http' && m.expected_body === '') {
    const fast = await probeHttpFast(m, o, m.port !== 0 ? m.port : o.port !== 0 ? o.port : 80, signal);
    if (fast !== 'full') return fast;
  }
  const https = m.type === 'https';
  const port = m.port !== 0 ? m.port : o.port !== 0 ? o.port : https ? 443 : 80;
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(m.header)) headers[k] = v;
  for (const k of Object.keys(headers)) if (k.toLowerCase() === 'host' && o.host !== undefined) delete headers[k];
  if (o.host !== undefined) headers.Host = o.host;
  headers['User-Agent'] = PROBE_USER_AGENT;
  const started = performance.now();
  let url = new URL(`${https ? 'https' : 'http'}://${hostPart(o.address)}:${port}${m.path}`);
  for (let hop = 0; ; hop++) {
    const res = await new Promise<{ res?: IncomingMessage; body?: string; err?: NodeJS.ErrnoException }>((resolve) => {
      const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, { method: m.method, headers, signal, rejectUnauthorized: !m.allow_insecure, agent: false }, (r) => {
        const chunks: Buffer[] = [];
        let size = 0;
        const done = () => resolve({ res: r, body: Buffer.concat(chunks).toString('utf8') });
        r.on('data', (c: Buffer) => {
          if (size < MAX_BODY_BYTES) {
            chunks.push(c);
            size += c.length;
          } else {
            r.destroy();
            done();
          }
        });
        r.on('end', done);
        r.on('error', (err) => resolve({ err }));
      });
      req.on('error', (err) => resolve({ err }));
      req.end();
    });
    if (signal.aborted) return timeout();
    if (res.err !== undefined || res.res === undefined) return fail(socketReason(res.err ?? new Error('no response')));
    const code = res.res.statusCode ?? 0;
    const rttMs = performance.now() - started;
    const location = res.res.headers.location;
    if (code >= 300 && code < 400 && location !== undefined && m.follow_redirects) {
      if (hop >= MAX_REDIRECTS) return fail(`more than ${MAX_REDIRECTS} redirects`, { responseCode: code, rttMs });
      url = new URL(location, url);
      continue;
    }
    if (!codeExpected(m.expected_codes, code)) return fail(code >= 300 && code < 400 && !m.follow_redirects ? `HTTP ${code} (redirects are not followed)` : `HTTP ${code}`, { responseCode: code, rttMs });
    if (m.expected_body !== '' && !(res.body ?? '').toLowerCase().includes(m.expected_body.toLowerCase())) {
      return fail('response body does not contain expected_body', { responseCode: code, rttMs });
    }
    return { ok: true, reason: '', timedOut: false, responseCode: code, rttMs };
  }
}

function probeTcp(m: ProbeMonitor, o: ProbeOrigin, signal: AbortSignal): Promise<ProbeResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    const s = connect({ host: o.address, port: m.port !== 0 ? m.port : o.port, signal });
    s.once('connect', () => {
      s.destroy();
      resolve({ ok: true, reason: '', timedOut: false, responseCode: null, rttMs: performance.now() - started });
    });
    s.on('error', (err: NodeJS.ErrnoException) => resolve(signal.aborted ? timeout() : fail(socketReason(err))));
  });
}

/** SMTP: the greeting must be 220, HELO 250 and QUIT 221 (Cloudflare's criteria). */
function probeSmtp(m: ProbeMonitor, o: ProbeOrigin, signal: AbortSignal): Promise<ProbeResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    const s = connect({ host: o.address, port: m.port !== 0 ? m.port : o.port !== 0 ? o.port : 25, signal });
    let buffer = '';
    let step = 0;
    const expect = ['220', '250', '221'];
    const finish = (r: ProbeResult) => {
      s.destroy();
      resolve(r);
    };
    s.setEncoding('latin1');
    s.on('data', (chunk: string) => {
      buffer += chunk;
      if (buffer.length > 64 * 1024) return finish(fail('SMTP reply too long'));
      // A reply is complete at a line "NNN " (multi-line replies use "NNN-").
      for (;;) {
        const m2 = /^(\d{3})([ -])[^\n]*\n/.exec(buffer);
        if (m2 === null) return;
        buffer = buffer.slice(m2[0].length);
        if (m2[2] === '-') continue;
        if (m2[1] !== expect[step]) return finish(fail(`SMTP ${m2[1]} (expected ${expect[step]})`, { responseCode: Number(m2[1]) }));
        step++;
        if (step === 1) s.write('HELO moat-health-check\r\n');
        else if (step === 2) s.write('QUIT\r\n');
        else return finish({ ok: true, reason: '', timedOut: false, responseCode: 221, rttMs: performance.now() - started });
      }
    });
    s.on('error', (err: NodeJS.ErrnoException) => resolve(signal.aborted ? timeout() : fail(socketReason(err))));
    s.once('end', () => {
      if (step < 3) finish(fail('connection closed before the SMTP dialogue ended'));
    });
  });
}

/** ICMP echo through the system's `ping` (one packet, the monitor's timeout). */
function probeIcmp(m: ProbeMonitor, o: ProbeOrigin, signal: AbortSignal): Promise<ProbeResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    const p = spawn('ping', ['-n', '-c', '1', '-W', String(m.timeout), o.address], { stdio: 'ignore', signal });
    p.once('error', () => resolve(signal.aborted ? timeout() : fail('ping could not run')));
    p.once('exit', (code) => resolve(code === 0 ? { ok: true, reason: '', timedOut: false, responseCode: null, rttMs: performance.now() - started } : signal.aborted ? timeout() : fail('no ICMP echo reply')));
  });
}

/** UDP-ICMP: a ping, then a datagram on a connected socket; an ICMP port unreachable (ECONNREFUSED) is a failure, silence a pass. */
async function probeUdpIcmp(m: ProbeMonitor, o: ProbeOrigin, signal: AbortSignal): Promise<ProbeResult> {
  const ping = await probeIcmp(m, o, signal);
  if (!ping.ok) return ping;
  return new Promise((resolve) => {
    const s = createSocket(isIPv6(o.address) ? 'udp6' : 'udp4');
    const end = (r: ProbeResult) => {
      try {
        s.close();
      } catch {
        // already closed
      }
      resolve(r);
    };
    // Half the timeout is left for an ICMP answer; none means the port is not closed.
    const wait = setTimeout(() => end({ ...ping }), (m.timeout * 1000) / 2);
    s.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(wait);
      end(fail(err.code === 'ECONNREFUSED' ? 'ICMP port unreachable' : socketReason(err)));
    });
    s.connect(m.port, o.address, () => s.send(Buffer.from('moat-health-check\n')));
  });
}

/** Probes an origin once with the monitor's timeout (retries are the caller's). */
export async function probeOnce(m: ProbeMonitor, o: ProbeOrigin): Promise<ProbeResult> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), m.timeout * 1000);
  try {
    switch (m.type) {
      case 'http':
      case 'https':
        return await probeHttp(m, o, controller.signal);
      case 'tcp':
        return await probeTcp(m, o, controller.signal);
      case 'smtp':
        return await probeSmtp(m, o, controller.signal);
      case 'icmp_ping':
        return await probeIcmp(m, o, controller.signal);
      case 'udp_icmp':
        return await probeUdpIcmp(m, o, controller.signal);
      default:
        return fail(`unknown monitor type ${m.type}`);
    }
  } finally {
    clearTimeout(timer);
  }
}

/** Probes with Cloudflare's retries: up to `retries` more attempts, immediately, and only after a timeout. */
export async function probe(m: ProbeMonitor & { retries: number }, o: ProbeOrigin): Promise<ProbeResult> {
  let r = await probeOnce(m, o);
  for (let i = 0; i < m.retries && r.timedOut; i++) r = await probeOnce(m, o);
  return r;
}
