// The control channel's fan-out (issue #17, part 1): `moat serve` (the built
// binary, its own process, a real SQLite file) with 1,000 connected daemons
// simulated by light clients in another process (plain `ws` clients that say
// hello, parse each bundle and ack it, nothing else). Each round adds a rule
// through the API; the figure is the time from sending that write to each
// daemon's ack of the version it made (so it includes the write's own commit),
// p50 and p99 over every (round, daemon) pair, and the control plane's memory
// per connection (RSS grown from before the daemons connected to after).
// Reference in the same run: a bare `ws` server in its own process that sends
// a message of the same size to the same 1,000 clients when told on stdin (the
// floor of a WebSocket fan-out on this machine, with no database, no
// authentication, no bundle).
// The second part, commit to the first packet judged on a real daemon and the
// packet loop's pauses meanwhile, is in channel-daemon.bench.ts.
// Knobs: MOAT_BENCH_CHANNEL_DAEMONS (default 1000), MOAT_BENCH_CHANNEL_ROUNDS (default 20),
// MOAT_BENCH_CHANNEL_PART (1 or 2: only that part; default both).

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Daemons, Database } from '../src/store/index.js';
import { runChannelDaemonBench } from './channel-daemon.bench.js';
import { lines } from './harness.js';

const DAEMONS = Number(process.env.MOAT_BENCH_CHANNEL_DAEMONS ?? 1000);
const ROUNDS = Number(process.env.MOAT_BENCH_CHANNEL_ROUNDS ?? 20);
const BIN = new URL('../src/cli/main.js', import.meta.url).pathname;
const ROOT = new URL('../..', import.meta.url).pathname;

/**
 * The light daemons, as a CommonJS script for `node -e`: SUBS (JSON: url,
 * tokens) in the environment; opens at most 8 connections waiting for their
 * first bundle at a time (the hub closes a flood of unauthenticated ones from
 * one address); prints "ready" once all have their first bundle, then for each
 * key (a version) acked by every client "acked KEY [times...]".
 */
const SUBSCRIBERS = `
const WebSocket = require('ws');
const { url, tokens } = JSON.parse(process.env.SUBS);
const now = () => performance.timeOrigin + performance.now();
const times = new Map();
let next = 0, ready = 0;
function record(key, t) {
  let a = times.get(key);
  if (a === undefined) times.set(key, (a = []));
  a.push(t);
  if (a.length === tokens.length) { process.stdout.write('acked ' + key + ' ' + JSON.stringify(a) + '\\n'); times.delete(key); }
}
function connect() {
  if (next >= tokens.length) return;
  const token = tokens[next++];
  const ws = new WebSocket(url, { perMessageDeflate: false });
  let first = true;
  ws.on('open', () => ws.send(JSON.stringify({ type: 'hello', protocol: 1, token, moat: 'bench', digest: null, lists: [] })));
  ws.on('message', (d) => {
    const m = JSON.parse(d.toString());
    if (m.type !== 'bundle') return;
    ws.send(JSON.stringify({ type: 'ack', seq: m.seq, result: 'applied', digest: m.digest, versions: { account: m.account ? m.account.version : null, zone: null } }));
    const t = now();
    if (first) {
      first = false;
      if (++ready === tokens.length) process.stdout.write('ready\\n');
      connect();
      return;
    }
    record(m.account ? m.account.version : m.key, t);
  });
  ws.on('close', (code, reason) => process.stderr.write('subscriber closed ' + code + ' ' + reason + '\\n'));
  ws.on('error', (e) => process.stderr.write('subscriber error ' + e.message + '\\n'));
}
for (let i = 0; i < 8; i++) connect();
`;

/** The reference: a bare ws server that answers hello with a first message and broadcasts `push KEY` lines from stdin. */
const BARE = `
const { WebSocketServer } = require('ws');
const pad = 'x'.repeat(Number(process.env.PAD));
const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
let seq = 0;
wss.on('connection', (ws) => { ws.on('message', (d) => { if (JSON.parse(d.toString()).type === 'hello') ws.send(JSON.stringify({ type: 'bundle', seq: 1, digest: 'd', key: '0', pad })); }); });
wss.on('listening', () => process.stdout.write('port ' + wss.address().port + '\\n'));
let buf = '';
process.stdin.on('data', (d) => {
  buf += d; const lines = buf.split('\\n'); buf = lines.pop();
  for (const l of lines) { const key = l.split(' ')[1]; seq++; const msg = JSON.stringify({ type: 'bundle', seq, digest: 'd', key, pad }); for (const c of wss.clients) c.send(msg); }
});
`;

function rssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? NaN : Number(m[1]);
}

function waitLine(child: ChildProcess, re: RegExp, ms = 120_000): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`timed out waiting for ${re}`)), ms);
    lines(child, (l) => {
      const m = re.exec(l);
      if (m !== null) {
        clearTimeout(t);
        resolve(m);
      }
    });
  });
}

/** The light daemons against `url`; resolves once every one has its first bundle. */
async function subscribers(url: string, tokens: string[]): Promise<{ child: ChildProcess; acked: Map<string, number[]> }> {
  const child = spawn(process.execPath, ['-e', SUBSCRIBERS], { cwd: ROOT, env: { ...process.env, SUBS: JSON.stringify({ url, tokens }) }, stdio: ['ignore', 'pipe', 'inherit'] });
  const acked = new Map<string, number[]>();
  lines(child, (l) => {
    const m = /^acked (\S+) (.*)$/.exec(l);
    if (m !== null) acked.set(m[1]!, JSON.parse(m[2]!) as number[]);
  });
  await waitLine(child, /^ready$/);
  return { child, acked };
}

async function until(cond: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('a round did not complete: some daemon did not ack');
    await new Promise((r) => setTimeout(r, 2));
  }
}

const now = () => performance.timeOrigin + performance.now();

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

interface Result {
  p50: number;
  p99: number;
  max: number;
  kibPerConnection: number;
}

async function runMoat(dataDir: string): Promise<Result & { bundleBytes: number; writeP50: number }> {
  const serve = spawn(process.execPath, [BIN, 'serve', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const out: string[] = [];
  lines(serve, (l) => out.push(l));
  try {
    await until(() => out.some((l) => l.includes('try: curl')), 30_000);
    const base = /listening on (\S+)/.exec(out.join('\n'))![1]!;
    const channel = /control channel for daemons on (\S+)/.exec(out.join('\n'))![1]!;
    const get = (label: string) => out.find((l) => l.includes(label))!.split(label)[1]!.trim();
    const headers = { 'X-Auth-Email': get('X-Auth-Email:'), 'X-Auth-Key': get('X-Auth-Key:'), 'Content-Type': 'application/json' };
    const account = get('account id:');
    // A rules-only entrypoint of 20 rules: what a typical gateway policy looks like.
    const rules = Array.from({ length: 20 }, (_, i) => ({ action: 'block', expression: `tcp.dstport == ${1000 + i} and ip.src in {10.${i}.0.0/16}`, description: `rule ${i}` }));
    const put = await fetch(`${base}/accounts/${account}/rulesets/phases/network_transit/entrypoint`, { method: 'PUT', headers, body: JSON.stringify({ rules }) });
    const ep = ((await put.json()) as { result: { id: string } }).result;
    // Tokens are created in one transaction through a second connection to the same file, as `moat daemons create` would.
    const store = Database.open(dataDir, { mustExist: true });
    const tokens = store.write(() => Array.from({ length: DAEMONS }, (_, i) => new Daemons(store).create({ accountId: account, name: `bench-${i}` }).token));
    store.close();
    const before = rssKiB(serve.pid!);
    const subs = await subscribers(channel, tokens);
    const after = rssKiB(serve.pid!);
    const samples: number[] = [];
    const writes: number[] = [];
    let bundleBytes = 0;
    try {
      for (let r = 0; r < ROUNDS; r++) {
        const t0 = now();
        const res = await fetch(`${base}/accounts/${account}/rulesets/${ep.id}/rules`, { method: 'POST', headers, body: JSON.stringify({ action: 'log', expression: `udp.dstport == ${r + 1}`, description: `round ${r}` }) });
        const body = (await res.json()) as { result: { version: string } };
        writes.push(now() - t0);
        bundleBytes = JSON.stringify(body.result).length;
        const v = body.result.version;
        await until(() => subs.acked.has(v));
        for (const t of subs.acked.get(v)!) samples.push(t - t0);
      }
    } finally {
      subs.child.kill();
    }
    samples.sort((a, b) => a - b);
    writes.sort((a, b) => a - b);
    return { p50: percentile(samples, 50), p99: percentile(samples, 99), max: samples[samples.length - 1]!, kibPerConnection: (after - before) / DAEMONS, bundleBytes, writeP50: percentile(writes, 50) };
  } finally {
    serve.kill('SIGTERM');
  }
}

async function runBare(padBytes: number): Promise<Result> {
  const server = spawn(process.execPath, ['-e', BARE], { cwd: ROOT, env: { ...process.env, PAD: String(padBytes) }, stdio: ['pipe', 'pipe', 'inherit'] });
  try {
    const port = (await waitLine(server, /^port (\d+)$/))[1]!;
    const before = rssKiB(server.pid!);
    const subs = await subscribers(`ws://127.0.0.1:${port}/`, Array.from({ length: DAEMONS }, (_, i) => `t${i}`));
    const after = rssKiB(server.pid!);
    const samples: number[] = [];
    try {
      for (let r = 1; r <= ROUNDS; r++) {
        const t0 = now();
        server.stdin!.write(`push ${r}\n`);
        await until(() => subs.acked.has(String(r)));
        for (const t of subs.acked.get(String(r))!) samples.push(t - t0);
      }
    } finally {
      subs.child.kill();
    }
    samples.sort((a, b) => a - b);
    return { p50: percentile(samples, 50), p99: percentile(samples, 99), max: samples[samples.length - 1]!, kibPerConnection: (after - before) / DAEMONS };
  } finally {
    server.kill();
  }
}

export async function runChannelBench(): Promise<void> {
  const part = process.env.MOAT_BENCH_CHANNEL_PART;
  if (part !== '2') await runFanOut();
  if (part !== '1') await runChannelDaemonBench();
}

async function runFanOut(): Promise<void> {
  console.log(`\n## Control channel: commit to ack by ${DAEMONS} daemons (light clients in another process), ${ROUNDS} rounds`);
  const dataDir = mkdtempSync(join(tmpdir(), 'moat-bench-channel-'));
  try {
    const moat = await runMoat(dataDir);
    const bare = await runBare(moat.bundleBytes);
    const row = (name: string, r: Result) =>
      console.log(`${name.padEnd(52)} p50 ${r.p50.toFixed(1).padStart(6)} ms  p99 ${r.p99.toFixed(1).padStart(6)} ms  max ${r.max.toFixed(1).padStart(6)} ms  ${r.kibPerConnection.toFixed(1).padStart(6)} KiB RSS/connection`);
    row('moat serve: API write -> every daemon acked', moat);
    row(`reference: bare ws broadcast of ${moat.bundleBytes} B, no database`, bare);
    console.log(`(the API answered each write in ${moat.writeP50.toFixed(1)} ms, p50: the commit, fsync included, is part of every figure above)`);
    console.log(`aim: p99 <= 100 ms (${moat.p99 <= 100 ? 'met' : 'NOT met'}); moat p99 is ${(moat.p99 / bare.p99).toFixed(2)}x the bare broadcast's`);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}
