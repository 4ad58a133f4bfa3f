// The control channel's second part (issue #17 item 14): from an API write to
// the first packet judged by the new version on a real daemon. A `moat serve`
// child process (the built binary, a real SQLite file) feeds a Daemon in this
// process over the channel on loopback; the daemon's captures are in-memory
// sources that a pump (bench/loop-pause.ts) feeds a few frames every turn of
// the event loop, as a capture's callbacks would, and a probe frame after
// them. Each round writes through the API and times the write's start to the
// first probe dropped by the rule (or list entry) the write added; the pump
// also records the longest pause of the packet loop in the round, and then,
// for as long again, without a change (the noise floor of a shared machine).
//
// Two kinds of change: rules-only (a rule added to the account entrypoint; a
// ~5 KB bundle, its lists not sent again), and a 100k-prefix list changed by a
// bulk operation (one address added; the whole list travels, ~2 MB). Two
// daemons, each with its own `moat serve` and data directory, take turns
// round by round (the machine is shared and noisy; interleaving spreads its
// noise over both): A, the daemon as it is (bundle messages taken and bundles
// loaded in worker threads), and B, the reference, the daemon before issue
// #17's item 11 (both on the event loop).
//
// A third daemon, C, is the daemon as `moat daemon` runs by default: the ring
// engine, whose packet loops are packet worker threads (packet-workers.ts).
// Its ports are replay ports (bench/paced-replay-port.ts) handing each worker a
// batch of the same background frames every ~1 ms per port, for ever; its
// main thread takes the channel's messages and loads bundles in the loader
// worker as A's does. Per round, C's figure is each worker's longest gap
// between the starts of two batches (W_LONGEST_GAP_MS, zeroed at the round's
// start): with a batch due every ~1 ms, any gap beyond that is a pause of that
// worker's loop (a prepare's steps, the prepare message's deserialisation, a
// GC of its heap, the thread descheduled). C's change time is the write to
// the flip of the workers' generation (each judges with it from its next
// batch, within ~1 ms); it has no probe frame. A fourth, D, is C with thread
// priorities off (capture.priority 0/0: packet workers, loader and intake all
// at nice 0, the daemon before them); with sides CD they take turns as A and B
// do, and the report compares their workers' gaps.
// Knobs: MOAT_BENCH_CHANNEL_RULE_ROUNDS (10), MOAT_BENCH_CHANNEL_LIST_ROUNDS
// (3), MOAT_BENCH_CHANNEL_SIDES (ABC: which daemons run; D too when named),
// MOAT_BENCH_CHANNEL_PRIORITY (off: A and B without thread priorities; main:
// their main thread raised to -10 as well, a variant measured and not taken), MOAT_BENCH_CHANNEL_WORKERS
// (C's packet workers, 2), MOAT_BENCH_REPLAY_INTERVAL_MS (C's pacing, 1),
// MOAT_BENCH_CHANNEL_CPUS (P/B, e.g. 1/0: the ring side's capture.cpus, its
// packet workers on CPU P and every other thread of this process on B, and
// its `moat serve` started under taskset -c B: the control plane and the
// update's work on one core, the packet loop alone on the other. Pinning takes
// every thread of this process, so it runs with one side alone: SIDES=C).

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Worker } from 'node:worker_threads';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { pino } from 'pino';
import { validateDaemonConfig } from '../src/config/index.js';
import { buildPcap, setThreadPriority } from '../src/capture/index.js';
import { ChannelBundleSource, Daemon, WorkerLoading, type PacketWorkers, type Port } from '../src/daemon/index.js';
import { Daemons, Database } from '../src/store/index.js';
import { MemorySource } from '../test/support/memory-source.js';
import { buildFrame, TCP } from '../test/support/packet-builder.js';
import { LoopPauseMeter } from './loop-pause.js';
import type { BenchGap } from './paced-replay-port.js';
import { lines } from './harness.js';

const RULE_ROUNDS = Number(process.env.MOAT_BENCH_CHANNEL_RULE_ROUNDS ?? 10);
const LIST_ROUNDS = Number(process.env.MOAT_BENCH_CHANNEL_LIST_ROUNDS ?? 3);
const SIDES = process.env.MOAT_BENCH_CHANNEL_SIDES ?? 'ABC';
const RING_WORKERS = Number(process.env.MOAT_BENCH_CHANNEL_WORKERS ?? 2);
const LIST_SIZE = 100_000;
/** MOAT_BENCH_CHANNEL_CPUS=P/B: the ring side's packet CPU and background CPU (its moat serve pinned there too); undefined: no pinning. */
const CPUS = ((v) => {
  if (v === undefined || v === '') return undefined;
  const m = /^(\d+)\/(\d+)$/.exec(v);
  if (m === null || m[1] === m[2]) throw new Error(`MOAT_BENCH_CHANNEL_CPUS=${v}: give P/B, two different CPUs (e.g. 1/0)`);
  return { packet: Number(m[1]), background: Number(m[2]) };
})(process.env.MOAT_BENCH_CHANNEL_CPUS);
/** MOAT_BENCH_CHANNEL_PRIORITY=off: A and B with capture.priority 0/0 (their loader and intake at nice 0, the main thread not raised). */
const PRIORITY_OFF = process.env.MOAT_BENCH_CHANNEL_PRIORITY === 'off';
const BIN = new URL('../src/cli/main.js', import.meta.url).pathname;
/** Frames the pump delivers per turn, before the probe. */
const PUMP_BATCH = 16;
/** How long the pump runs on after the probe was dropped: the swap's tail (warm-up slices, the cache's fsyncs, the ack). */
const TAIL_MS = 150;
const AIMS = { rulesP99: 50, pause: 5 };
const PROBE_PORT = 61_000;

const now = () => performance.timeOrigin + performance.now();
const frame = (src: string, port: number): Buffer => Buffer.from(buildFrame({ ip: { version: 4, src, dst: '100.64.0.1', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: port, flags: TCP.SYN } }));

/** Traffic between probes: sources in and out of the list, ports in and out of the rules, none dropped by the changes. */
const background = Array.from({ length: 64 }, (_, i) => frame(i % 2 === 0 ? `11.${i}.${i}.9` : `100.64.${i}.10`, i % 3 === 0 ? 443 : 1000 + (i % 20)));

interface Side {
  readonly name: string;
  readonly serve: ChildProcess;
  readonly daemon: Daemon;
  input: MemorySource;
  port: Port;
  readonly base: string;
  readonly headers: Record<string, string>;
  readonly account: string;
  readonly rulesetId: string;
  readonly listId: string;
  readonly dataDir: string;
  readonly rules: number[];
  readonly lists: number[];
  readonly pauseRules: number[];
  readonly pauseLists: number[];
  readonly gc: number[];
  /** Per round: the API's answer, and the bundle message's arrival at the daemon (ms from the write's start). */
  readonly answered: number[];
  readonly arrived: number[];
  /** Per round, from the bundle message's arrival to the first packet judged by it: the daemon's share (rules-only, list). */
  readonly daemonRules: number[];
  readonly daemonLists: number[];
  /** Longest pause of the same pump in windows without any change: the machine's noise floor. */
  readonly idle: number[];
  /** When the daemon's source last received a message (this process's clock). */
  lastMessageAt: number;
  /** What the swap's own steps cost the packet loop, per round (ms): the message handed over, the worker's result made again (its longest slice, and in how many), the ports' paths, the longest warm-up slice. */
  readonly steps: Array<{ list: boolean; takeMs: number; importMs: number; importSlices: number; pathsMs: number; sliceMs: number }>;
  lastTakeMs: number;
}

async function until(what: string, cond: () => boolean, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function api(side: Pick<Side, 'base' | 'headers'>, method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${side.base}${path}`, { method, headers: side.headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = (await res.json()) as { success: boolean; result: Record<string, unknown>; errors: unknown };
  if (!json.success) throw new Error(`${method} ${path}: ${JSON.stringify(json.errors)}`);
  return json.result;
}

/** A `moat serve` with a 20-rule entrypoint and a 100k-prefix list it uses, and a daemon connected to it, holding its first bundle. */
async function side(name: string, kind: 'worker' | 'in-thread'): Promise<Side> {
  const dataDir = mkdtempSync(join(tmpdir(), 'moat-bench-chd-'));
  const serve = spawn(process.execPath, [BIN, 'serve', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    return await connected(name, kind, dataDir, serve);
  } catch (err) {
    serve.kill('SIGTERM');
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
}

/** What a side's `moat serve` holds: its API's address and credentials, the entrypoint and list, a daemon's channel and token. */
interface Served {
  readonly base: string;
  readonly headers: Record<string, string>;
  readonly account: string;
  readonly rulesetId: string;
  readonly listId: string;
  readonly channel: string;
  readonly token: string;
}

async function served(name: string, dataDir: string, serve: ChildProcess): Promise<Served> {
  const out: string[] = [];
  lines(serve, (l) => out.push(l));
  await until('moat serve', () => out.some((l) => l.includes('try: curl')), 30_000);
  const text = out.join('\n');
  const base = /listening on (\S+)/.exec(text)![1]!;
  const channel = /control channel for daemons on (\S+)/.exec(text)![1]!;
  const get = (label: string) => out.find((l) => l.includes(label))!.split(label)[1]!.trim();
  const s0 = { base, headers: { 'X-Auth-Email': get('X-Auth-Email:'), 'X-Auth-Key': get('X-Auth-Key:'), 'Content-Type': 'application/json' } };
  const account = get('account id:');
  const list = await api(s0, 'POST', `/accounts/${account}/rules/lists`, { name: 'bench_blocklist', kind: 'ip' });
  // 100,000 distinct /24s in 11.0.0.0/8 and 12.0.0.0/8.
  const items = Array.from({ length: LIST_SIZE }, (_, i) => ({ ip: `${11 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}.0/24` }));
  const op = await api(s0, 'PUT', `/accounts/${account}/rules/lists/${list['id'] as string}/items`, items);
  await operationDone(s0, account, op['operation_id'] as string);
  const rules = [
    ...Array.from({ length: 20 }, (_, i) => ({ action: 'block', expression: `tcp.dstport == ${1000 + i} and ip.src in {10.${i}.0.0/16}`, description: `rule ${i}` })),
    { action: 'block', expression: 'ip.src in $bench_blocklist', description: 'the list' },
  ];
  const ep = await api(s0, 'PUT', `/accounts/${account}/rulesets/phases/network_transit/entrypoint`, { rules });
  const store = Database.open(dataDir, { mustExist: true });
  const token = store.write(() => new Daemons(store).create({ accountId: account, name: `bench-${name}` }).token);
  store.close();
  return { base, headers: s0.headers, account, rulesetId: ep['id'] as string, listId: list['id'] as string, channel, token };
}

async function connected(name: string, kind: 'worker' | 'in-thread', dataDir: string, serve: ChildProcess): Promise<Side> {
  const { base, headers, account, rulesetId, listId, channel, token } = await served(name, dataDir, serve);
  const s0 = { headers };
  const config = validateDaemonConfig(
    { mode: 'inline', interfaces: ['in0', 'out0'], ...(PRIORITY_OFF ? { capture: { priority: { packet: 0, background: 0 } } } : {}), controlPlane: { url: channel, token, stateDir: join(dataDir, 'daemon-state') }, metrics: { enabled: false } },
    join(dataDir, 'daemon.jsonc'),
  );
  const sources = new Map<string, MemorySource>();
  const source = new ChannelBundleSource(config, { moat: 'bench', intake: kind });
  // Where the time goes: a message's arrival is its handing to the intake (the first thing the source does with it).
  const take = source.intake.take.bind(source.intake);
  source.intake.take = (data: Buffer) => {
    side.lastMessageAt = now();
    const p = take(data);
    // On the worker's path, what take() does before it returns is all the packet loop does with the message.
    side.lastTakeMs = now() - side.lastMessageAt;
    return p;
  };
  const daemon = new Daemon(config, pino({ level: 'warn' }), (iface) => {
    const s = new MemorySource(iface, false);
    sources.set(iface, s);
    return s;
  }, source);
  const side: Side = { name, serve, daemon, input: undefined as unknown as MemorySource, port: undefined as unknown as Port, base, headers: s0.headers, account, rulesetId, listId, dataDir, rules: [], lists: [], pauseRules: [], pauseLists: [], gc: [], answered: [], arrived: [], daemonRules: [], daemonLists: [], idle: [], lastMessageAt: 0, steps: [], lastTakeMs: 0 };
  await daemon.start();
  side.input = sources.get('in0')!;
  side.port = daemon.ports[0]!;
  await until(`${name}'s first bundle`, () => daemon.bundles.status!().bundle === 'live', 60_000);
  return side;
}

/** C: the daemon as `moat daemon` runs it by default (ring engine, packet workers), its ports paced replays. */
interface RingSide {
  readonly name: 'C' | 'D';
  readonly serve: ChildProcess;
  readonly daemon: Daemon;
  readonly workers: PacketWorkers;
  readonly base: string;
  readonly headers: Record<string, string>;
  readonly account: string;
  readonly rulesetId: string;
  readonly listId: string;
  readonly dataDir: string;
  /** Per round: write to flip (ms). */
  readonly rules: number[];
  readonly lists: number[];
  /** Per round, the longest gap between two batches of any worker (ms), and each worker's. */
  readonly pauseRules: number[];
  readonly pauseLists: number[];
  readonly perWorker: number[][];
  /** Per round, the longest gap of any worker in a window as long, after it, without a change. */
  readonly idle: number[];
  /** Per round, the prepare's steps on the workers (their longest, over workers): functions made, paths built, longest warm-up slice, warm-up slices. */
  readonly steps: Array<{ list: boolean; importMs: number; pathsMs: number; sliceMs: number; slices: number; stepMs: number }>;
  /** The prepare costs the workers reported in the current round. */
  costs: Array<{ importMs: number; pathsMs: number; slices: number; longestSliceMs: number }>;
  /** Main thread's longest loop pause per round (no packets there: what the channel's messages and the swap cost it). */
  readonly mainPause: number[];
  /** Gaps over 3 ms the workers' ports reported (paced-replay-port.ts), with their split; and the windows they fall in. */
  readonly gaps: BenchGap[];
  readonly windows: Array<{ from: number; to: number; change: boolean }>;
}

/** Where C's replay ports read: in0 (outside, judged) the background frames, out0 (inside, unjudged) their replies. */
function replayFiles(dir: string): void {
  writeFileSync(join(dir, 'in0.pcap'), buildPcap(background.map((data) => ({ data }))));
  const replies = Array.from({ length: 16 }, (_, i) => Buffer.from(buildFrame({ ip: { version: 4, src: '100.64.0.1', dst: `100.64.${i}.10`, ttl: 64 }, l4: { kind: 'tcp', srcPort: 443, dstPort: 40000 + i, flags: TCP.SYN | TCP.ACK } })));
  writeFileSync(join(dir, 'out0.pcap'), buildPcap(replies.map((data) => ({ data }))));
}

async function ringSide(name: 'C' | 'D'): Promise<RingSide> {
  const dataDir = mkdtempSync(join(tmpdir(), 'moat-bench-chd-'));
  const serveArgs = [BIN, 'serve', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-level', 'warn'];
  // Pinned: the control plane on the background CPU with the daemon's update work.
  const serve = CPUS === undefined ? spawn(process.execPath, serveArgs, { stdio: ['ignore', 'pipe', 'inherit'] }) : spawn('taskset', ['-c', String(CPUS.background), process.execPath, ...serveArgs], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const sv = await served(name, dataDir, serve);
    replayFiles(dataDir);
    // The workers inherit this process's environment when they start: where their ports read.
    process.env.MOAT_BENCH_REPLAY_DIR = dataDir;
    const config = validateDaemonConfig(
      { mode: 'inline', interfaces: ['in0', 'out0'], capture: { workers: RING_WORKERS, ...(name === 'D' ? { priority: { packet: 0, background: 0 } } : {}), ...(CPUS === undefined ? {} : { cpus: { packet: [CPUS.packet], background: [CPUS.background] } }) }, controlPlane: { url: sv.channel, token: sv.token, stateDir: join(dataDir, 'daemon-state') }, metrics: { enabled: false } },
      join(dataDir, 'daemon.jsonc'),
    );
    const source = new ChannelBundleSource(config, { moat: 'bench', intake: 'worker' });
    const daemon = new Daemon(config, pino({ level: 'warn' }), () => {
      throw new Error('the ring engine opens no FrameSource');
    }, source, { ring: { host: { ringProblem: undefined, cores: RING_WORKERS, rxQueues: () => undefined }, opener: { module: new URL('./paced-replay-port.js', import.meta.url).href, name: 'openPacedReplayPort' } } });
    await daemon.start();
    const workers = daemon.packetWorkers;
    if (workers === undefined || daemon.plan?.engine !== 'ring') throw new Error(`${name} runs ${daemon.plan?.engine ?? 'no'} engine, not ring`);
    const side: RingSide = { name, serve, daemon, workers, base: sv.base, headers: sv.headers, account: sv.account, rulesetId: sv.rulesetId, listId: sv.listId, dataDir, rules: [], lists: [], pauseRules: [], pauseLists: [], perWorker: [], idle: [], steps: [], costs: [], mainPause: [], gaps: [], windows: [] };
    for (let w = 0; w < RING_WORKERS; w++) {
      (workers.thread(w) as Worker).on('message', (m: { type: string; ok?: boolean; cost?: RingSide['costs'][number] }) => {
        if (m.type === 'prepared' && m.ok === true) side.costs.push(m.cost!);
        if (m.type === 'bench-gap') side.gaps.push(m as unknown as BenchGap);
      });
    }
    await until(`${name}'s first bundle`, () => daemon.bundles.status!().bundle === 'live', 60_000);
    await until(`${name}'s workers judging`, () => workers.counters().workers.every((w) => w.frames > 1000), 30_000);
    return side;
  } catch (err) {
    serve.kill('SIGTERM');
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
}

const longestGap = (c: RingSide): number[] => c.workers.counters().workers.map((w) => w.longestGapMs);

/** One change through the API on C, timed to the workers' flip, with each worker's longest pause meanwhile. */
async function ringRound(c: RingSide, n: number, list: boolean): Promise<void> {
  const genBefore = c.workers.generation;
  const digestBefore = c.daemon.bundles.status!().digest;
  collect();
  await new Promise((r) => setTimeout(r, 20));
  c.costs = [];
  const main = new LoopPauseMeter(() => undefined);
  main.start();
  c.workers.resetPauses();
  const t0 = now();
  const from = now();
  if (list) await api(c, 'POST', `/accounts/${c.account}/rules/lists/${c.listId}/items`, [{ ip: `198.18.${n >> 8}.${n & 255}` }]);
  else await api(c, 'POST', `/accounts/${c.account}/rulesets/${c.rulesetId}/rules`, { action: 'block', expression: `tcp.dstport == ${PROBE_PORT + n}`, description: `round ${n}` });
  for (;;) {
    if (c.workers.generation !== genBefore) break;
    if (now() - t0 > 30_000) throw new Error(`${c.name} round ${n}: the workers never flipped`);
    await new Promise((r) => setTimeout(r, 1));
  }
  const flippedAt = now();
  await new Promise((r) => setTimeout(r, TAIL_MS));
  const gaps = longestGap(c);
  c.windows.push({ from, to: now(), change: true });
  c.mainPause.push((await main.stop()).longestMs);
  main.close();
  (list ? c.lists : c.rules).push(flippedAt - t0);
  (list ? c.pauseLists : c.pauseRules).push(Math.max(...gaps));
  c.perWorker.push(gaps);
  const stepMs = Math.max(...c.workers.counters().workers.map((w) => w.longestStepMs));
  const mx = (f: (x: RingSide['costs'][number]) => number) => Math.max(0, ...c.costs.map(f));
  c.steps.push({ list, importMs: mx((x) => x.importMs), pathsMs: mx((x) => x.pathsMs), sliceMs: mx((x) => x.longestSliceMs), slices: mx((x) => x.slices), stepMs });
  // The noise floor beside it: the same workers and feed, as long, without a change.
  c.workers.resetPauses();
  const idleFrom = now();
  await new Promise((r) => setTimeout(r, Math.min(1000, flippedAt - t0 + TAIL_MS)));
  c.idle.push(Math.max(...longestGap(c)));
  c.windows.push({ from: idleFrom, to: now(), change: false });
  await until(`${c.name} round ${n}: recorded`, () => c.daemon.bundles.status!().digest !== digestBefore, 10_000);
}

async function operationDone(s: Pick<Side, 'base' | 'headers'>, account: string, id: string): Promise<void> {
  for (;;) {
    const o = await api(s, 'GET', `/accounts/${account}/rules/lists/bulk_operations/${id}`);
    if (o['status'] === 'completed') return;
    if (o['status'] === 'failed') throw new Error(`bulk operation failed: ${JSON.stringify(o)}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

// A full garbage collection before each round: both daemons share this process's heap, and one round
// must not pay for the garbage of the other side's (the in-thread side parses 2 MB messages on it).
setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

/** One change through the API, timed to the first probe the new version drops, with the packet loop's longest pause meanwhile. */
async function round(s: Side, n: number, list: boolean): Promise<void> {
  const probe = list ? frame(`198.18.${n >> 8}.${n & 255}`, 443) : frame('100.64.0.10', PROBE_PORT + n);
  let k = 0;
  let judgedAt = 0;
  const meter = new LoopPauseMeter(() => {
    for (let i = 0; i < PUMP_BATCH; i++) s.input.deliver(background[k++ % background.length]!);
    if (judgedAt !== 0) return;
    const dropped = s.port.counters.dropped;
    s.input.deliver(probe);
    if (s.port.counters.dropped === dropped + 1) judgedAt = now();
  });
  // Not dropped before the change: the probe tells the new version apart.
  const before = s.port.counters.dropped;
  s.input.deliver(probe);
  if (s.port.counters.dropped !== before) throw new Error(`${s.name} round ${n}: the probe was dropped before the change`);
  const digestBefore = s.daemon.bundles.status!().digest;
  collect();
  // Its report (a 'gc' performance entry) is delivered on a later turn: not counted in the round.
  await new Promise((r) => setTimeout(r, 20));
  meter.start();
  const t0 = now();
  if (list) await api(s, 'POST', `/accounts/${s.account}/rules/lists/${s.listId}/items`, [{ ip: `198.18.${n >> 8}.${n & 255}` }]);
  else await api(s, 'POST', `/accounts/${s.account}/rulesets/${s.rulesetId}/rules`, { action: 'block', expression: `tcp.dstport == ${PROBE_PORT + n}`, description: `round ${n}` });
  s.answered.push(now() - t0);
  await until(`${s.name} round ${n}: the probe dropped`, () => judgedAt !== 0, 30_000);
  await new Promise((r) => setTimeout(r, TAIL_MS));
  const pause = await meter.stop();
  meter.close();
  (list ? s.lists : s.rules).push(judgedAt - t0);
  s.arrived.push(s.lastMessageAt - t0);
  (list ? s.daemonLists : s.daemonRules).push(judgedAt - s.lastMessageAt);
  if (s.daemon.loading instanceof WorkerLoading) {
    const imp = s.daemon.loading.lastImport;
    s.steps.push({ list, takeMs: s.lastTakeMs, importMs: imp.longestSliceMs, importSlices: imp.slices, pathsMs: s.daemon.lastSwap.pathsMs, sliceMs: s.daemon.lastSwap.longestSliceMs });
  }
  // The noise floor beside it: the same pump, as long, without a change.
  const idle = new LoopPauseMeter(() => {
    for (let i = 0; i < PUMP_BATCH + 1; i++) s.input.deliver(background[k++ % background.length]!);
  });
  idle.start();
  await new Promise((r) => setTimeout(r, Math.min(1000, judgedAt - t0 + TAIL_MS)));
  s.idle.push((await idle.stop()).longestMs);
  idle.close();
  (list ? s.pauseLists : s.pauseRules).push(pause.longestMs);
  s.gc.push(pause.longestGcMs);
  // The swap's tail done (recorded in the state directory, acknowledged) before the other side's round.
  await until(`${s.name} round ${n}: recorded`, () => s.daemon.bundles.status!().digest !== digestBefore, 10_000);
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Runs the real-daemon part of the channel benchmark and prints its figures. */
export async function runChannelDaemonBench(): Promise<void> {
  console.log(`\n## Control channel: API write -> first packet judged by the new version on a real daemon (moat serve child, Daemon in process; 21 rules + a ${LIST_SIZE.toLocaleString('en-US')}-prefix list), ${RULE_ROUNDS} rules-only and ${LIST_ROUNDS} list changes per side, interleaved`);
  const sides: Side[] = [];
  const rings: RingSide[] = [];
  const load = () => loadavg().map((x) => x.toFixed(2)).join(', ');
  console.log(`load average at the start: ${load()} (sides ${SIDES}; MOAT_BENCH_CHANNEL_SIDES)`);
  if (CPUS !== undefined) {
    if (SIDES.replace(/[^ABCD]/g, '').length !== 1 || !/[CD]/.test(SIDES)) throw new Error(`MOAT_BENCH_CHANNEL_CPUS pins every thread of this process: run it with one ring side (MOAT_BENCH_CHANNEL_SIDES=C or D), not ${SIDES}`);
    console.log(`pinned (MOAT_BENCH_CHANNEL_CPUS): packet workers on CPU ${CPUS.packet}; this process's other threads and its moat serve on CPU ${CPUS.background}`);
  }
  try {
    // A and B are compared with each other: they run together or not at all.
    if (/[AB]/.test(SIDES)) sides.push(await side('A', 'worker'), await side('B', 'in-thread'));
    // A and B are the libpcap engine's shape (the packet loop on the main thread), whose main thread `moat daemon`
    // leaves at 0; MOAT_BENCH_CHANNEL_PRIORITY=main raises it too (measured worse: see README, capture.priority).
    if (/[AB]/.test(SIDES) && !/[CD]/.test(SIDES)) {
      const p = process.env.MOAT_BENCH_CHANNEL_PRIORITY === 'main' ? setThreadPriority('', -10) : undefined;
      const main = p === undefined ? 'main thread at 0' : `main thread at nice ${p.nice}${p.refused === undefined ? '' : ` (${p.refused})`}`;
      console.log(`thread priorities ${PRIORITY_OFF ? 'off (MOAT_BENCH_CHANNEL_PRIORITY=off): main, loader and intake at nice 0' : `on (MOAT_BENCH_CHANNEL_PRIORITY=off|main): ${main}, loader and intake at 10`}`);
    }
    if (SIDES.includes('C')) rings.push(await ringSide('C'));
    if (SIDES.includes('D')) rings.push(await ringSide('D'));
    const total = RULE_ROUNDS + LIST_ROUNDS;
    let lists = 0;
    for (let n = 1; n <= total; n++) {
      // Spread over the rounds: every (total / LIST_ROUNDS)th round, LIST_ROUNDS of them.
      const list = n % Math.max(1, Math.floor(total / LIST_ROUNDS)) === 0 && lists < LIST_ROUNDS;
      if (list) lists++;
      const turns: Array<() => Promise<void>> = sides.map((s) => () => round(s, n, list));
      for (const c of rings) turns.push(() => ringRound(c, n, list));
      // Each side goes first in turn: the machine's noise is spread over all.
      for (let k = 0; k < turns.length; k++) await turns[(k + n) % turns.length]!();
    }
    const f = (x: number) => `${x.toFixed(1).padStart(6)} ms`;
    const sorted = (xs: readonly number[]) => [...xs].sort((a, b) => a - b);
    const mx = (xs: number[]) => Math.max(...xs);
    if (sides.length === 2) reportAB(sides as [Side, Side], f, sorted, mx);
    for (const c of rings) reportC(c, sides as [Side, Side] | [], f, sorted, mx);
    if (rings.length === 2) reportPriorities(rings as [RingSide, RingSide], f, sorted);
    console.log(`load average at the end: ${load()}`);
  } finally {
    for (const s of sides) {
      await s.daemon.stop();
      s.serve.kill('SIGTERM');
      rmSync(s.dataDir, { recursive: true, force: true });
    }
    for (const ring of rings) {
      await ring.daemon.stop();
      ring.serve.kill('SIGTERM');
      rmSync(ring.dataDir, { recursive: true, force: true });
    }
  }
}

type Fmt = (x: number) => string;
type Sort = (xs: readonly number[]) => number[];
type Max = (xs: number[]) => number;

function reportAB([a, b]: [Side, Side], f: Fmt, sorted: Sort, mx: Max): void {
  {
    const row = (label: string, xa: number[], xb: number[], aim?: number) => {
      const sa = sorted(xa);
      const sb = sorted(xb);
      console.log(`${label.padEnd(40)} p50 ${f(percentile(sa, 50))}  p99 ${f(percentile(sa, 99))}  |  reference p50 ${f(percentile(sb, 50))}  p99 ${f(percentile(sb, 99))}${aim === undefined ? '' : `  |  aim p99 <= ${aim} ms: ${percentile(sa, 99) <= aim ? 'met' : 'NOT met'}`}`);
    };
    console.log('(A: the daemon as it is, bundle messages taken and bundles loaded in worker threads; reference B: both on the event loop, the daemon before #17 item 11)');
    row(`rules-only change, ${a.rules.length} rounds`, a.rules, b.rules, AIMS.rulesP99);
    row(`100k-prefix list change, ${a.lists.length} rounds`, a.lists, b.lists);
    row('  of which in the daemon, rules-only', a.daemonRules, b.daemonRules);
    row('  of which in the daemon, list change', a.daemonLists, b.daemonLists);
    const pa = mx([...a.pauseRules, ...a.pauseLists]);
    console.log(`${'longest packet-loop pause, rules-only'.padEnd(40)} max ${f(mx(a.pauseRules))}  p50 ${f(percentile(sorted(a.pauseRules), 50))}  |  reference max ${f(mx(b.pauseRules))}`);
    console.log(`${'longest packet-loop pause, list change'.padEnd(40)} max ${f(mx(a.pauseLists))}  (each: ${a.pauseLists.map((x) => x.toFixed(2)).join(', ')})  |  reference max ${f(mx(b.pauseLists))}`);
    const med = (xs: number[]) => percentile(sorted(xs), 50).toFixed(1);
    console.log(`where the time goes, p50 over all rounds: API answered ${med(a.answered)} ms (B ${med(b.answered)}); bundle message at the daemon ${med(a.arrived)} ms (B ${med(b.arrived)})`);
    for (const list of [false, true]) {
      const st = a.steps.filter((x) => x.list === list);
      const m = (k: 'takeMs' | 'importMs' | 'pathsMs' | 'sliceMs') => `${k.replace('Ms', '')} max ${mx(st.map((x) => x[k])).toFixed(2)} ms`;
      console.log(`the swap's own steps on A's packet loop, ${list ? 'list change' : 'rules-only '}: ${m('takeMs')} (the message to the intake${list ? `; ${(a.daemon.bundles as ChannelBundleSource).intake.moved} of ${(a.daemon.bundles as ChannelBundleSource).intake.taken} large ones moved, not copied` : ''}), ${m('importMs')} in ${mx(st.map((x) => x.importSlices))} slice(s) at most (the worker's bundle made again, its longest slice), ${m('pathsMs')}, longest warm-up ${m('sliceMs')}`);
    }
    console.log(`${'longest pump pause without any change'.padEnd(40)} p50 ${f(percentile(sorted(a.idle), 50))}  max ${f(mx(a.idle))}  |  B's p50 ${f(percentile(sorted(b.idle), 50))}  max ${f(mx(b.idle))}  (a window as long as each round, after it: this machine's noise floor)`);
    console.log(`longest GC pause of the process in a round: A ${mx(a.gc).toFixed(2)} ms, B ${mx(b.gc).toFixed(2)} ms (one heap: both daemons live in this process)`);
    console.log(`aim: no packet-loop pause over ${AIMS.pause} ms: ${pa <= AIMS.pause ? 'met' : 'NOT met'} (longest ${pa.toFixed(2)} ms, vs ${mx([...b.pauseRules, ...b.pauseLists]).toFixed(2)} ms on the event loop)`);
  }
}

function reportC(c: RingSide, ab: [Side, Side] | [], f: Fmt, sorted: Sort, mx: Max): void {
  const p50 = (xs: number[]) => f(percentile(sorted(xs), 50));
  const beside = (pick: (s: Side) => number[]) => (ab.length === 2 ? `  |  A's main-thread loop max ${f(mx(pick(ab[0])))}, B's ${f(mx(pick(ab[1])))}` : '');
  console.log(`\n${c.name === 'C' ? 'C: the default daemon' : 'D: the default daemon with thread priorities off (capture.priority 0/0)'} (ring engine, ${RING_WORKERS} packet workers, replay ports with a batch of up to 64 frames every ~${process.env.MOAT_BENCH_REPLAY_INTERVAL_MS ?? 1} ms per port); its figure is each worker's longest gap between two batches in the round`);
  console.log(`${'write -> workers flipped, rules-only'.padEnd(40)} p50 ${p50(c.rules)}  p99 ${f(percentile(sorted(c.rules), 99))}`);
  console.log(`${'write -> workers flipped, list change'.padEnd(40)} p50 ${p50(c.lists)}  p99 ${f(percentile(sorted(c.lists), 99))}`);
  console.log(`${'longest packet-worker pause, rules-only'.padEnd(40)} max ${f(mx(c.pauseRules))}  p50 ${p50(c.pauseRules)}${beside((s) => s.pauseRules)}`);
  console.log(`${'longest packet-worker pause, list change'.padEnd(40)} max ${f(mx(c.pauseLists))}  p50 ${p50(c.pauseLists)}  (each: ${c.pauseLists.map((x) => x.toFixed(2)).join(', ')})${beside((s) => s.pauseLists)}`);
  console.log(`${'  per worker, every round'.padEnd(40)} ${c.perWorker.map((g, i) => `${c.steps[i]!.list ? 'L' : 'r'}[${g.map((x) => x.toFixed(1)).join('/')}]`).join(' ')}`);
  for (const list of [false, true]) {
    const st = c.steps.filter((x) => x.list === list);
    const m = (k: 'importMs' | 'pathsMs' | 'sliceMs' | 'stepMs') => mx(st.map((x) => x[k])).toFixed(2);
    console.log(`the prepare's steps on the workers' loops, ${list ? 'list change' : 'rules-only '}: functions made (one step) max ${m('importMs')} ms, paths max ${m('pathsMs')} ms, warm-up in ${mx(st.map((x) => x.slices))} slices at most, longest ${m('sliceMs')} ms; longest step ${m('stepMs')} ms`);
  }
  console.log(`${'longest worker pause without any change'.padEnd(40)} p50 ${p50(c.idle)}  max ${f(mx(c.idle))}  (a window as long as each round, after it: the noise floor, pacing included)`);
  console.log(`${"C's main thread (no packets), longest pause".padEnd(40)} rules-only max ${f(mx(c.mainPause.filter((_, i) => !c.steps[i]!.list)))}, list change max ${f(mx(c.mainPause.filter((_, i) => c.steps[i]!.list)))}`);
  // Why the workers paused: each gap over 5 ms split into the thread's time on a CPU and in the run queue.
  for (const change of [true, false]) {
    const ws = c.windows.filter((w) => w.change === change);
    const long = c.gaps.filter((g) => g.gapMs > AIMS.pause && ws.some((w) => g.at >= w.from && g.at <= w.to + 5));
    const sum = (k: 'gapMs' | 'onCpuMs' | 'runqueueMs') => long.reduce((a, g) => a + g[k], 0);
    const worst = long.reduce<BenchGap | undefined>((a, g) => (a === undefined || g.gapMs > a.gapMs ? g : a), undefined);
    console.log(`${`  worker gaps over ${AIMS.pause} ms, ${change ? 'changes' : 'no change'}`.padEnd(40)} ${long.length} gaps, ${sum('gapMs').toFixed(1)} ms: on a CPU ${sum('onCpuMs').toFixed(1)} ms (most in one gap ${mx([0, ...long.map((g) => g.onCpuMs)]).toFixed(2)} ms), runnable but waiting for a CPU ${sum('runqueueMs').toFixed(1)} ms, neither (asleep: the pacing; or blocked) ${(sum('gapMs') - sum('onCpuMs') - sum('runqueueMs')).toFixed(1)} ms${worst === undefined ? '' : `; the longest, ${worst.gapMs.toFixed(1)} ms: ${worst.onCpuMs.toFixed(2)} on a CPU, ${worst.runqueueMs.toFixed(2)} waiting for one`}`);
  }
  const pc = mx([...c.pauseRules, ...c.pauseLists]);
  console.log(`aim: no packet-worker pause over ${AIMS.pause} ms: ${pc <= AIMS.pause ? 'met' : 'NOT met'} (longest ${pc.toFixed(2)} ms; with no change ${mx(c.idle).toFixed(2)} ms)`);
}

// C against D: the same daemon with thread priorities (packet workers -10, loader and intake 10) and without.
function reportPriorities([c, d]: [RingSide, RingSide], f: Fmt, sorted: Sort): void {
  const nice = (r: RingSide) => r.workers.priorities().map((p) => (p === undefined ? '?' : `${p.nice}${p.refused === undefined ? '' : ' (refused)'}`)).join('/');
  console.log(`\nthread priorities: C's packet workers at nice ${nice(c)}, D's at ${nice(d)} (rounds interleaved, each side first in turn)`);
  const row = (label: string, xc: number[], xd: number[]) => {
    const sc = sorted(xc);
    const sd = sorted(xd);
    console.log(`${label.padEnd(40)} max ${f(sc[sc.length - 1]!)}  p99 ${f(percentile(sc, 99))}  p50 ${f(percentile(sc, 50))}  |  reference D (priorities off) max ${f(sd[sd.length - 1]!)}  p99 ${f(percentile(sd, 99))}  p50 ${f(percentile(sd, 50))}`);
  };
  row(`worker gap, rules-only (${c.pauseRules.length} rounds)`, c.pauseRules, d.pauseRules);
  row(`worker gap, list change (${c.pauseLists.length} rounds)`, c.pauseLists, d.pauseLists);
  row(`worker gap, no change (${c.idle.length} windows)`, c.idle, d.idle);
  const over = (r: RingSide) => r.gaps.filter((g) => g.gapMs > AIMS.pause && r.windows.some((w) => w.change && g.at >= w.from && g.at <= w.to + 5));
  const wait = (r: RingSide) => over(r).reduce((a, g) => a + g.runqueueMs, 0).toFixed(1);
  console.log(`${'gaps over 5 ms during changes'.padEnd(40)} C ${over(c).length} (${wait(c)} ms waiting for a CPU)  |  D ${over(d).length} (${wait(d)} ms waiting for a CPU)`);
}
