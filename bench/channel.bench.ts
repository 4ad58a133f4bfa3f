// The control channel's fan-out (issue #17, part 1; on PostgreSQL, #20):
// `moat serve` (the built binary, its own process) with 1,000 connected
// daemons simulated by light clients in another process (plain `ws` clients
// that say hello, parse each bundle and ack it, nothing else), on each side of
// bench/backends.ts: SQLite (a real file, one server) and PostgreSQL with 1, 2
// and 3 replicas sharing one database (fsync on), the daemons spread
// round-robin over a side's replicas. Each round adds a rule through the
// side's first replica (rounds alternate between the sides, so each meets the
// same conditions); the figures, p50, p99 and max over every (round, daemon)
// pair: the time from sending that write to each daemon's ack of the version
// it made (so it includes the write's own commit); from the API's answer to
// each ack, split between the daemons on the replica written to and those on
// the others (whom the change reaches through the database's change feed);
// and the control plane's memory per connection (RSS of a side's replicas
// grown from before the daemons connected to after).
// Reference in the same run: a bare `ws` server in its own process that sends
// a message of the same size to the same 1,000 clients when told on stdin (the
// floor of a WebSocket fan-out on this machine, with no database, no
// authentication, no bundle).
// The second part, commit to the first packet judged on a real daemon and the
// packet loop's pauses meanwhile, is in channel-daemon.bench.ts.
// Knobs: MOAT_BENCH_CHANNEL_DAEMONS (default 1000), MOAT_BENCH_CHANNEL_ROUNDS (default 20),
// MOAT_BENCH_CHANNEL_PART (1 or 2: only that part; default both),
// MOAT_BENCH_CHANNEL_WARMUP (unmeasured rounds per side first, default 2),
// MOAT_BENCH_CHANNEL_BACKENDS (sqlite,pg1,pg2,pg3 by default).

import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { newId } from '../src/store/index.js';
import { Backends, selectedSides, type Side, type SideName } from './backends.js';
import { runChannelDaemonBench } from './channel-daemon.bench.js';
import { lines } from './harness.js';

const DAEMONS = Number(process.env.MOAT_BENCH_CHANNEL_DAEMONS ?? 1000);
const ROUNDS = Number(process.env.MOAT_BENCH_CHANNEL_ROUNDS ?? 20);
const WARMUP = Number(process.env.MOAT_BENCH_CHANNEL_WARMUP ?? 2);
const ROOT = new URL('../..', import.meta.url).pathname;

/**
 * The light daemons, as a CommonJS script for `node -e`: SUBS (JSON: urls,
 * tokens) in the environment, daemon i connecting to urls[i % urls.length]; opens at most 8 connections waiting for their
 * first bundle at a time (the hub closes a flood of unauthenticated ones from
 * one address); prints "ready" once all have their first bundle, then for each
 * key (a version) acked by every client "acked KEY [[replica index, time]...]".
 */
const SUBSCRIBERS = `
const WebSocket = require('ws');
const { urls, tokens } = JSON.parse(process.env.SUBS);
const now = () => performance.timeOrigin + performance.now();
const times = new Map();
let next = 0, ready = 0;
function record(key, replica, t) {
  let a = times.get(key);
  if (a === undefined) times.set(key, (a = []));
  a.push([replica, t]);
  if (a.length === tokens.length) { process.stdout.write('acked ' + key + ' ' + JSON.stringify(a) + '\\n'); times.delete(key); }
}
function connect() {
  if (next >= tokens.length) return;
  const replica = next % urls.length;
  const token = tokens[next++];
  const ws = new WebSocket(urls[replica], { perMessageDeflate: false });
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
    record(m.account ? m.account.version : m.key, replica, t);
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

/** The light daemons against `urls` (spread round-robin); resolves once every one has its first bundle. */
async function subscribers(urls: string[], tokens: string[]): Promise<{ child: ChildProcess; acked: Map<string, [number, number][]> }> {
  const child = spawn(process.execPath, ['-e', SUBSCRIBERS], { cwd: ROOT, env: { ...process.env, SUBS: JSON.stringify({ urls, tokens }) }, stdio: ['ignore', 'pipe', 'inherit'] });
  const acked = new Map<string, [number, number][]>();
  lines(child, (l) => {
    const m = /^acked (\S+) (.*)$/.exec(l);
    if (m !== null) acked.set(m[1]!, JSON.parse(m[2]!) as [number, number][]);
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

function summary(samples: number[], kibPerConnection: number): Result {
  samples.sort((a, b) => a - b);
  return { p50: percentile(samples, 50), p99: percentile(samples, 99), max: samples[samples.length - 1]!, kibPerConnection };
}

const SIDE_LABEL: Record<SideName, string> = {
  sqlite: 'SQLite, 1 server',
  pg1: 'PostgreSQL, 1 replica',
  pg2: 'PostgreSQL, 2 replicas',
  pg3: 'PostgreSQL, 3 replicas',
};

/** A side with its daemons connected, ready for rounds. */
interface FanOutSide {
  side: Side;
  subs: { child: ChildProcess; acked: Map<string, [number, number][]> };
  base: string;
  headers: Record<string, string>;
  account: string;
  entrypoint: string;
  kibPerConnection: number;
  bundleBytes: number;
  /** Write sent -> each daemon's ack (includes the commit). */
  total: number[];
  /** API answered the write -> each daemon's ack, daemons on the replica that took the write. */
  same: number[];
  /** Likewise, daemons on the other replicas (the change reached them through the database). */
  other: number[];
  /** Write sent -> API answer. */
  writes: number[];
}

function rssKiBOf(side: Side): number {
  return side.replicas.reduce((n, r) => n + rssKiB(r.child.pid!), 0);
}

/** Starts side `name` with DAEMONS daemon tokens, a 20-rule entrypoint, and the light daemons connected round-robin to its replicas. */
async function connect(backends: Backends, name: SideName): Promise<FanOutSide> {
  const email = 'bench@example.com';
  const key = 'k' + newId();
  const account = newId();
  let tokens: string[] = [];
  // Daemon tokens in one transaction, as `moat daemons create` would make them one by one.
  const side = await backends.start(name, async (store) => {
    await store.users.create({ email, accounts: [account], key });
    tokens = await store.write(async (tx) => {
      const out: string[] = [];
      for (let i = 0; i < DAEMONS; i++) out.push((await tx.daemons.create({ accountId: account, name: `bench-${i}` })).token);
      return out;
    });
  });
  const base = side.replicas[0]!.base;
  const headers = { 'X-Auth-Email': email, 'X-Auth-Key': key, 'Content-Type': 'application/json' };
  // A rules-only entrypoint of 20 rules: what a typical gateway policy looks like.
  const rules = Array.from({ length: 20 }, (_, i) => ({ action: 'block', expression: `tcp.dstport == ${1000 + i} and ip.src in {10.${i}.0.0/16}`, description: `rule ${i}` }));
  const put = await fetch(`${base}/accounts/${account}/rulesets/phases/network_transit/entrypoint`, { method: 'PUT', headers, body: JSON.stringify({ rules }) });
  if (put.status !== 200) throw new Error(`setup PUT entrypoint failed: ${put.status} ${await put.text()}`);
  const ep = ((await put.json()) as { result: { id: string } }).result;
  const before = rssKiBOf(side);
  const subs = await subscribers(side.replicas.map((r) => r.channel), tokens);
  const after = rssKiBOf(side);
  return { side, subs, base, headers, account, entrypoint: ep.id, kibPerConnection: (after - before) / DAEMONS, bundleBytes: 0, total: [], same: [], other: [], writes: [] };
}

/** One round on `s`: a rule added through its first replica, then every daemon's ack of that version. */
async function round(s: FanOutSide, r: number): Promise<void> {
  const t0 = now();
  const res = await fetch(`${s.base}/accounts/${s.account}/rulesets/${s.entrypoint}/rules`, { method: 'POST', headers: s.headers, body: JSON.stringify({ action: 'log', expression: `udp.dstport == ${r + 1}`, description: `round ${r}` }) });
  const body = (await res.json()) as { result: { version: string } };
  const answered = now();
  s.writes.push(answered - t0);
  s.bundleBytes = JSON.stringify(body.result).length;
  const v = body.result.version;
  await until(() => s.subs.acked.has(v));
  for (const [replica, t] of s.subs.acked.get(v)!) {
    s.total.push(t - t0);
    (replica === 0 ? s.same : s.other).push(t - answered);
  }
}

async function runBare(padBytes: number): Promise<Result> {
  const server = spawn(process.execPath, ['-e', BARE], { cwd: ROOT, env: { ...process.env, PAD: String(padBytes) }, stdio: ['pipe', 'pipe', 'inherit'] });
  try {
    const port = (await waitLine(server, /^port (\d+)$/))[1]!;
    const before = rssKiB(server.pid!);
    const subs = await subscribers([`ws://127.0.0.1:${port}/`], Array.from({ length: DAEMONS }, (_, i) => `t${i}`));
    const after = rssKiB(server.pid!);
    const samples: number[] = [];
    try {
      for (let r = 1; r <= ROUNDS; r++) {
        const t0 = now();
        server.stdin!.write(`push ${r}\n`);
        await until(() => subs.acked.has(String(r)));
        for (const [, t] of subs.acked.get(String(r))!) samples.push(t - t0);
      }
    } finally {
      subs.child.kill();
    }
    return summary(samples, (after - before) / DAEMONS);
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
  const names = selectedSides('MOAT_BENCH_CHANNEL_BACKENDS');
  console.log(`\n## Control channel: commit to ack by ${DAEMONS} daemons (light clients in another process, spread round-robin over a side's replicas), ${ROUNDS} rounds after ${WARMUP} unmeasured; sides: ${names.map((n) => SIDE_LABEL[n]).join('; ')}`);
  const backends = new Backends();
  const sides: FanOutSide[] = [];
  try {
    for (const n of names) sides.push(await connect(backends, n));
    const settings = await backends.settings();
    if (settings !== '') console.log(`(PostgreSQL: one throwaway cluster on loopback, ${settings}; SQLite: WAL, synchronous=FULL)`);
    // Unmeasured rounds first (a side's replicas share its work, so from cold each one's JIT warm-up would weigh more).
    for (let w = 0; w < WARMUP; w++) for (const s of sides) await round(s, ROUNDS + w);
    for (const s of sides) for (const a of [s.total, s.same, s.other, s.writes]) a.length = 0;
    // Rounds interleaved across the sides, so that each meets the same conditions on a shared machine.
    for (let r = 0; r < ROUNDS; r++) for (const s of sides) await round(s, r);
    for (const s of sides) s.subs.child.kill();
    const bare = await runBare(sides[0]!.bundleBytes);
    const row = (name: string, r: Result, kib = true) =>
      console.log(`${name.padEnd(60)} p50 ${r.p50.toFixed(1).padStart(6)} ms  p99 ${r.p99.toFixed(1).padStart(6)} ms  max ${r.max.toFixed(1).padStart(6)} ms${kib ? `  ${r.kibPerConnection.toFixed(1).padStart(6)} KiB RSS/connection` : ''}`);
    const ref = sides[0]!;
    for (const s of sides) {
      const total = summary(s.total, s.kibPerConnection);
      const ratio = s === ref ? '' : `  (p99 ${(total.p99 / summary(ref.total, 0).p99).toFixed(2)}x ${ref.side.name})`;
      console.log(`${SIDE_LABEL[s.side.name]}${ratio}`);
      row('  API write -> every daemon acked', total);
      row('  API answer -> ack, daemons on the replica written to', summary(s.same, 0), false);
      if (s.other.length > 0) row('  API answer -> ack, daemons on the other replicas', summary(s.other, 0), false);
      console.log(`  (the API answered each write in ${summary(s.writes, 0).p50.toFixed(1)} ms, p50: the commit, fsync included, is part of the first figure; aim p99 <= 100 ms: ${total.p99 <= 100 ? 'met' : 'NOT met'})`);
    }
    row(`reference: bare ws broadcast of ${ref.bundleBytes} B, no database`, bare);
    console.log(`${ref.side.name} p99 is ${(summary(ref.total, 0).p99 / bare.p99).toFixed(2)}x the bare broadcast's`);
  } finally {
    for (const s of sides) s.subs.child.kill();
    await backends.close();
  }
}
