// Soak: the Moat daemon inline between two namespaces (the topology and ruleset of
// inline.bench.ts, from namespace-harness.ts: 20 rules, GeoIP country and ASN
// lookups, two lists), driven for a long time (default 600 s) by
//   * iperf3 UDP, 64-byte payloads, over two sender processes, at the highest rate the
//     generator reaches without stalling and the bridge forwards without loss, found by
//     a short calibration ladder run with the TCP stream below going (or set by hand),
//     less a 10 % margin so that the long run stays below the edge;
//   * a steady iperf3 TCP stream A->B (default 100 Mbit/s).
// Every 10 s it samples the daemon from outside (a helper process in the gateway
// namespace does the HTTP requests): RSS and anonymous RSS
// (/proc/<pid>/status), CPU time (/proc/<pid>/stat), the JS heap after the latest GC
// (node's own --trace-gc lines; nothing is added to the daemon), and its /metrics
// counters (frames judged, forwarded, dropped, send errors, packet errors), plus ring
// loss (frames the gateway ports received that the capture never delivered) and UDP
// datagrams arriving at B. At the end it checks that the process is alive and /health
// answers, stops it with SIGTERM (expecting exit 0 and its "daemon stopped" line), tears
// the namespaces down, and prints the samples and a verdict: crash or not, RSS first /
// last / max and its slope over the second half, packets judged.
//
// Knobs: MOAT_SOAK_UDP_PPS (skip the calibration), MOAT_SOAK_UDP_STREAMS (default 2),
// MOAT_SOAK_TCP_MBPS (default 100), MOAT_SOAK_INTERVAL (seconds, default 10),
// MOAT_SOAK_TRACE_GC (default 1; 0 runs node without --trace-gc, and no heap column),
// MOAT_SOAK_MARGIN (share of the calibrated rate driven, default 0.9; 1 when calibrated on
// another engine), MOAT_BENCH_SOAK_ENGINE ("ring", the default, or "libpcap"): the engine
// soaked. With ring, the calibration runs on a libpcap daemon first, and the ring daemon is
// then driven at the rate the old engine held (#19 item 8: no ring drops at that rate);
// the duration is MOAT_SOAK_SECONDS (default 600) through `npm run bench -- soak`.
// Alone: `node dist/bench/soak.bench.js [seconds]`.

import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnIn, type GatewayTopology, type NsProcess } from '../test/support/netns.js';
import {
  BENCH_RULES,
  cpuSeconds,
  describeOffloads,
  endNamespaceBench,
  f0,
  f1,
  f2,
  loadText,
  METRICS_LISTEN,
  metricSum,
  parseIperf,
  pidAlive,
  dropReport,
  daemonHasEngineKey,
  procMemory,
  ruleHits,
  sleep,
  startDaemon,
  startIperfServer,
  startNamespaceBench,
  udpArrivals,
  udpRun,
  waitForPath,
  writeDaemonConfig,
  type Metrics,
  type RunningDaemon,
} from './namespace-harness.js';

const TCP_PORT = 5210;
const CALIBRATION_TCP_PORT = 5211;
const CALIBRATION_LADDER = [20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000, 90_000, 100_000, 110_000, 120_000];
const CALIBRATION_SECONDS = 5;
const CONFIRM_SECONDS = 15;
/** How long a /metrics scrape may take: an overloaded daemon answers late or not at all. */
const SCRAPE_TIMEOUT_MS = 8000;

interface Sample {
  /** Seconds since the drive started. */
  t: number;
  alive: boolean;
  rss: number;
  rssAnon: number;
  rssFile: number;
  rssShmem: number;
  hwm: number;
  /** How long /metrics took to answer (ms): the daemon's event loop under load. */
  scrapeMs: number;
  /** JS heap used after the latest GC so far (MB), NaN when unknown. */
  heap: number;
  /** GCs since the previous sample. */
  gcs: number;
  cpu: number;
  /** Counters from /metrics (NaN when the scrape failed). */
  judged: number;
  dropped: number;
  forwarded: number;
  captured: number;
  sendErrors: number;
  /** Frames the kernel dropped because a ring was full (moat_ring_drops_total; ring engine). */
  ringDrops: number;
  packetErrors: number;
  undecodable: number;
  /** rx counters of the gateway ports, summed. */
  portRx: number;
  udpAtB: number;
  scrapeError?: string;
}

// --trace-gc: "[pid:0x..]   1234 ms: Scavenge 5.2 (7.0) -> 4.6 (8.0) MB, ..." and
// "Mark-Compact (reduce) 10.1 (12.3) -> 9.8 (11.0) MB, ...".
const GC_LINE = /ms: (Scavenge|Mark-Compact|Mark-Sweep|Minor Mark-Compact|Minor Mark-Sweep)\b[^\d]*[\d.]+ \([\d.]+\) -> ([\d.]+) \([\d.]+\) MB/;

class GcWatch {
  private next = 0;
  heap = NaN;
  majorHeap = NaN;
  constructor(private readonly proc: NsProcess) {}
  /** Reads the new GC lines; returns how many GCs they report. */
  poll(): number {
    let n = 0;
    for (; this.next < this.proc.lines.length; this.next++) {
      const m = GC_LINE.exec(this.proc.lines[this.next]!);
      if (m === null) continue;
      n++;
      this.heap = Number(m[2]);
      if (m[1] === 'Mark-Compact' || m[1] === 'Mark-Sweep') this.majorHeap = Number(m[2]);
    }
    return n;
  }
}

// A long-lived helper in the gateway namespace: for each request line it reads the
// ports' rx counters, fetches a daemon URL, and reads them again. Scraping from a warm
// process takes milliseconds, so the capture counters and the port counters come from
// (nearly) the same instant, and the sampling does not start a node per sample.
const PROBE = `
const fs = require('node:fs');
const ports = JSON.parse(process.argv[1]);
const base = process.argv[2];
const rx = () => ports.reduce((s, p) => s + Number(fs.readFileSync('/sys/class/net/' + p + '/statistics/rx_packets', 'utf8')), 0);
require('node:readline').createInterface({ input: process.stdin }).on('line', async (line) => {
  const { id, path, timeoutMs } = JSON.parse(line);
  const rx0 = rx();
  let status = 0, body = '';
  try {
    const r = await fetch(base + path, { signal: AbortSignal.timeout(timeoutMs) });
    status = r.status;
    body = await r.text();
  } catch (e) {
    body = String(e);
  }
  process.stdout.write(JSON.stringify({ id, status, body, rx0, rx1: rx() }) + '\\n');
});
console.log('probe ready');
`;

interface ProbeAnswer {
  status: number;
  body: string;
  /** The ports' rx counters (sum) when the request left and when the answer came. */
  rx0: number;
  rx1: number;
}

class GatewayProbe {
  private id = 0;
  private constructor(private readonly proc: NsProcess) {}
  static async start(topo: GatewayTopology): Promise<GatewayProbe> {
    const gw = topo.gateway;
    const proc = spawnIn(gw.ns, process.execPath, ['-e', PROBE, JSON.stringify([gw.portA, gw.portB]), `http://${METRICS_LISTEN}`]);
    await proc.waitForLine(/probe ready/, 10_000);
    return new GatewayProbe(proc);
  }
  async get(path: string, timeoutMs: number): Promise<ProbeAnswer> {
    const id = ++this.id;
    const from = this.proc.lines.length;
    this.proc.write(`${JSON.stringify({ id, path, timeoutMs })}\n`);
    const line = await this.proc.waitForLine((l) => l.startsWith(`{"id":${id},`), timeoutMs + 5000, from);
    return JSON.parse(line) as ProbeAnswer;
  }
}

function parseMetrics(text: string): Metrics {
  const m: Metrics = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    m.set(line.slice(0, sp), Number(line.slice(sp + 1)));
  }
  return m;
}

/**
 * One sample. Its time is when /metrics answered (`started`: the drive's start): under
 * load the request may wait in the daemon's event loop, and the counters are those of
 * the moment it is served. The ports' rx counters are read right after the answer.
 */
async function takeSample(topo: GatewayTopology, daemon: RunningDaemon, probe: GatewayProbe, gc: GcWatch | undefined, started: number): Promise<Sample> {
  const t0 = Date.now();
  const a = await probe.get('/metrics', SCRAPE_TIMEOUT_MS);
  const t = (Date.now() - started) / 1000;
  const scrapeMs = Date.now() - t0;
  const portRx = a.rx1;
  const alive = !daemon.proc.done && pidAlive(daemon.pid);
  const mem = alive ? procMemory(daemon.pid) : { rss: NaN, rssAnon: NaN, rssFile: NaN, rssShmem: NaN, hwm: NaN };
  const cpu = alive ? cpuSeconds(daemon.pid) : NaN;
  const gcs = gc?.poll() ?? 0;
  const udpAtB = await udpArrivals(topo.b.ns);
  let m: Metrics | undefined;
  let scrapeError: string | undefined;
  if (a.status === 200) m = parseMetrics(a.body);
  else scrapeError = alive ? `/metrics: ${a.status === 0 ? a.body : `status ${a.status}`}` : 'daemon not running';
  const v = (name: string, ...labels: string[]): number => (m === undefined ? NaN : metricSum(m, name, ...labels));
  const s: Sample = {
    t,
    alive,
    ...mem,
    heap: gc?.heap ?? NaN,
    gcs,
    cpu,
    scrapeMs,
    judged: v('moat_packets_total'),
    dropped: v('moat_packets_total', 'verdict="drop"'),
    forwarded: v('moat_capture_sent_total'),
    captured: v('moat_capture_packets_total'),
    sendErrors: v('moat_capture_send_errors_total'),
    ringDrops: v('moat_ring_drops_total'),
    packetErrors: v('moat_packet_errors_total'),
    undecodable: v('moat_undecodable_packets_total'),
    portRx,
    udpAtB,
  };
  if (scrapeError !== undefined) s.scrapeError = scrapeError;
  return s;
}

const HEADER =
  '     t s   RSS MB  anon MB  heap MB   GCs   CPU %    judged total   judged/s    fwd/s  UDP at B/s  ring loss   drops  send err  pkt err  scrape ms';

function row(s: Sample, prev: Sample | undefined, base: Sample): string {
  const dt = prev === undefined ? NaN : s.t - prev.t;
  const rate = (k: keyof Sample): number => (prev === undefined ? NaN : ((s[k] as number) - (prev[k] as number)) / dt);
  const since = (k: keyof Sample): number => (s[k] as number) - (base[k] as number);
  // Frames the ports received that the capture never delivered (ring overflow), this interval.
  const ringLoss = prev === undefined ? NaN : s.portRx - prev.portRx - (s.captured - prev.captured);
  return [
    f0(s.t).padStart(8),
    f1(s.rss).padStart(8),
    f1(s.rssAnon).padStart(8),
    f1(s.heap).padStart(8),
    String(s.gcs).padStart(5),
    f0(100 * rate('cpu')).padStart(7),
    f0(since('judged')).padStart(15),
    f0(rate('judged')).padStart(10),
    f0(rate('forwarded')).padStart(8),
    f0(rate('udpAtB')).padStart(11),
    f0(ringLoss).padStart(10),
    f0(since('dropped')).padStart(7),
    f0(since('sendErrors')).padStart(9),
    f0(since('packetErrors')).padStart(8),
    f0(s.scrapeMs).padStart(10),
  ].join(' ') + (s.alive ? '' : '   DAEMON NOT RUNNING') + (s.scrapeError !== undefined && s.alive ? `   /metrics failed: ${s.scrapeError}` : '');
}

/** `p`, or undefined after `ms` (the timer is cleared either way, so nothing lingers). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** Least-squares slope of y over x. */
function slope(points: Array<[number, number]>): number {
  const pts = points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  if (pts.length < 2) return NaN;
  const mx = pts.reduce((a, [x]) => a + x, 0) / pts.length;
  const my = pts.reduce((a, [, y]) => a + y, 0) / pts.length;
  let num = 0;
  let den = 0;
  for (const [x, y] of pts) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? NaN : num / den;
}

/**
 * Starts iperf3 clients in A, all at once; restarts one (up to 3 times) when its server
 * says it is busy (a previous test is still being torn down).
 */
async function startClients(topo: GatewayTopology, argsList: string[][]): Promise<NsProcess[]> {
  const spawn = (args: string[]): NsProcess => spawnIn(topo.a.ns, 'iperf3', ['-c', topo.b.ipv4, '-J', ...args]);
  const procs = argsList.map(spawn);
  for (let attempt = 0; ; attempt++) {
    await sleep(2000);
    let again = false;
    for (let i = 0; i < procs.length; i++) {
      const p = procs[i]!;
      if (!p.done) continue;
      const text = p.lines.join('\n');
      if (!/busy/i.test(text) || attempt >= 3) throw new Error(`iperf3 ${argsList[i]!.join(' ')} ended at once:\n${text.slice(0, 2000)}\n${p.stderr}`);
      procs[i] = spawn(argsList[i]!);
      again = true;
    }
    if (!again) return procs;
  }
}

function stderrText(proc: NsProcess): string {
  return proc.stderr
    .split('\n')
    .filter((l) => l.trim() !== '' && !/no IPv4 address assigned/.test(l))
    .join('\n');
}

/**
 * Runs the daemon inline under load for `seconds` and reports memory, counters and
 * whether it survived. Needs root and iperf3; skips with a message otherwise.
 */
export async function runSoak(seconds = 600): Promise<void> {
  const interval = Number(process.env.MOAT_SOAK_INTERVAL ?? 10);
  const streams = Number(process.env.MOAT_SOAK_UDP_STREAMS ?? 2);
  const tcpMbps = Number(process.env.MOAT_SOAK_TCP_MBPS ?? 100);
  const traceGc = (process.env.MOAT_SOAK_TRACE_GC ?? '1') !== '0';
  const engineKnob = process.env.MOAT_BENCH_SOAK_ENGINE ?? 'ring';
  if (engineKnob !== 'ring' && engineKnob !== 'libpcap') throw new Error(`MOAT_BENCH_SOAK_ENGINE must be "ring" or "libpcap", not ${JSON.stringify(engineKnob)}`);
  const udpPorts = Array.from({ length: streams }, (_, i) => 5201 + i);
  const bench = await startNamespaceBench(
    `\n## Soak: Moat daemon inline (${engineKnob} engine) in namespaces for ${seconds} s under iperf3 UDP (64-byte) + TCP load`,
    'moat-bench-soak-',
  );
  if (bench === undefined) return;
  const { dir, topo } = bench;
  const samples: Sample[] = [];
  const clients: NsProcess[] = [];
  let daemon: RunningDaemon | undefined;
  let udpPps = Number(process.env.MOAT_SOAK_UDP_PPS ?? NaN);
  let margin = 0.9;
  let runsRing = false;
  const announce = (d: RunningDaemon): void => {
    runsRing = d.proc.lines.some((l) => /capture engine ring|"engine":"ring"/.test(l));
    const said = d.proc.lines.map((l) => /capture engine [^"]*/.exec(l)?.[0]).find((x) => x !== undefined);
    console.log(`daemon pid ${d.pid}${traceGc ? ' (node --trace-gc, stdout line-buffered)' : ''}; ruleset of ${BENCH_RULES.length} rules; its start log: ${said ?? 'no capture engine line (libpcap, before #19)'}`);
    if (engineKnob === 'ring' && !runsRing) console.log('NOTE: the daemon does not say it runs the ring engine: this soak measures libpcap');
  };
  let health = { status: 0, body: '' };
  let aliveAtEnd = false;
  let stopped: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let stoppedLine: string | undefined;
  let crashedAt: number | undefined;
  let clientReports: string[] = [];
  let finalHits: string[] = [];
  let drops: string[] = [];
  let started = 0;
  let ended = 0;
  try {
    console.log(`offloads: ${(await describeOffloads(topo)).join('; ')}`);
    for (const port of [...udpPorts, TCP_PORT, CALIBRATION_TCP_PORT]) await startIperfServer(topo, port);
    // The engine soaked, and the one calibrated on: the rate the old engine (libpcap)
    // sustains, so that the ring engine is held to it (#19 item 8). A daemon without
    // capture.engine has one engine, libpcap: both are it.
    const hasEngineKey = daemonHasEngineKey(dir, topo);
    const engine = hasEngineKey ? engineKnob : undefined;
    const calibrationEngine = hasEngineKey ? 'libpcap' : undefined;
    if (!hasEngineKey) console.log('note: this daemon has no capture.engine (the ring engine is not wired in yet): soaking its one engine, libpcap (cap)');
    const driveOptions = traceGc ? { prefix: ['stdbuf', '-oL'], nodeArgs: ['--trace-gc'] } : {};
    const driveCfg = writeDaemonConfig(dir, topo, engine === undefined ? {} : { engine });
    const calibrating = !Number.isFinite(udpPps);
    const separateCalibration = calibrating && calibrationEngine !== engine;
    margin = Number(process.env.MOAT_SOAK_MARGIN ?? (separateCalibration ? 1 : 0.9));
    daemon = separateCalibration
      ? await startDaemon(topo, writeDaemonConfig(dir, topo, { engine: calibrationEngine, name: 'daemon-calibration.jsonc' }))
      : await startDaemon(topo, driveCfg, driveOptions);
    if (!separateCalibration) announce(daemon);
    const probe = await GatewayProbe.start(topo);
    await waitForPath(topo);

    // Calibration, with the TCP stream going: the highest UDP rate on the ladder that
    // the generator reaches (sent >= 97 % of the target) and the bridge sustains (>= 99.5 %
    // of what was sent reaches B, ring loss <= 0.5 %, /metrics answers), over 5 s steps;
    // then that rate is confirmed over 15 s, stepping down until a rate holds.
    if (!Number.isFinite(udpPps)) {
      const d = daemon;
      const [tcp] = await startClients(topo, [['-p', String(CALIBRATION_TCP_PORT), '-t', '900', '-b', `${tcpMbps}M`]]);
      console.log(`calibration on the ${calibrationEngine ?? 'libpcap'} engine (${streams} UDP senders, TCP ${tcpMbps} Mbit/s going):`);
      const step = async (pps: number, secs: number): Promise<boolean> => {
        const before = await takeSample(topo, d, probe, undefined, Date.now());
        const r = await udpRun(topo, pps, secs, undefined, udpPorts);
        const after = await takeSample(topo, d, probe, undefined, Date.now());
        const rx = after.portRx - before.portRx;
        const ringLoss = rx - (after.captured - before.captured); // NaN when /metrics did not answer
        const generatorOk = r.sentPps >= 0.97 * pps;
        const bridgeOk = r.atBPps >= 0.995 * r.sentPps && ringLoss <= 0.005 * rx;
        console.log(
          `  ${String(secs).padStart(2)} s at ${f0(pps).padStart(7)} pps: sent ${f0(r.sentPps).padStart(7)}  at B ${f0(r.atBPps).padStart(7)}  ring loss ${f0(ringLoss).padStart(7)}` +
            `  ${!generatorOk ? 'generator short' : !bridgeOk ? (Number.isFinite(ringLoss) ? 'bridge loses' : '/metrics did not answer') : 'ok'}`,
        );
        return generatorOk && bridgeOk;
      };
      let idx = -1;
      for (let i = 0; i < CALIBRATION_LADDER.length; i++) {
        if (!(await step(CALIBRATION_LADDER[i]!, CALIBRATION_SECONDS))) break;
        idx = i;
        await sleep(500);
      }
      while (idx >= 0) {
        await sleep(1000);
        if (await step(CALIBRATION_LADDER[idx]!, CONFIRM_SECONDS)) break;
        idx--;
      }
      const held = idx >= 0 ? CALIBRATION_LADDER[idx]! : CALIBRATION_LADDER[0]! / 2;
      udpPps = Math.round((held * margin) / 1000) * 1000;
      console.log(
        idx >= 0
          ? `  highest rate held: ${f0(held)} pps; driving at ${Math.round(margin * 100)}% of it (MOAT_SOAK_MARGIN${separateCalibration ? `: the ${engine} engine is held to the rate the old engine sustained` : ': headroom over the long run'}): ${f0(udpPps)} pps`
          : `  no rate on the ladder held: driving at ${f0(udpPps)} pps`,
      );
      await tcp!.stop();
      await sleep(2000);
    }
    if (separateCalibration) {
      await daemon.proc.stop(5_000);
      daemon = await startDaemon(topo, driveCfg, driveOptions);
      announce(daemon);
      await waitForPath(topo);
    }
    console.log(`drive: UDP ${f0(udpPps)} pps of 64-byte datagrams (${streams} senders) + TCP ${tcpMbps} Mbit/s, ${seconds} s; samples every ${interval} s`);

    // The drive.
    const bits = Math.round((udpPps * 64 * 8) / streams);
    const gc = traceGc ? new GcWatch(daemon.proc) : undefined;
    started = Date.now();
    const base = await takeSample(topo, daemon, probe, gc, started);
    base.t = 0;
    clients.push(
      ...(await startClients(topo, [
        ...udpPorts.map((port) => ['-p', String(port), '-u', '-l', '64', '-b', String(bits), '-w', '4M', '-t', String(seconds)]),
        ['-p', String(TCP_PORT), '-t', String(seconds), '-b', `${tcpMbps}M`],
      ])),
    );
    samples.push(base);
    console.log(HEADER);
    console.log(row(base, undefined, base));
    for (let k = 1; k * interval <= seconds; k++) {
      const wait = started + k * interval * 1000 - Date.now();
      if (wait > 0) await within(daemon.proc.exited, wait);
      const s = await takeSample(topo, daemon, probe, gc, started);
      console.log(row(s, samples[samples.length - 1], base));
      samples.push(s);
      if (!s.alive) {
        crashedAt = s.t;
        break;
      }
    }
    // The clients end by themselves at `seconds`; wait for their reports.
    await within(Promise.all(clients.map((c) => c.exited)), 30_000);
    ended = Date.now();
    clientReports = clients.map((c, i) => {
      const what = i < streams ? `UDP sender ${i + 1}` : 'TCP';
      if (!c.done) return `${what}: still running after the drive`;
      try {
        const e = parseIperf(c.lines.join('\n'), what);
        if (i < streams) {
          const rcvd = (e.sum_received!.packets ?? 0) - (e.sum_received!.lost_packets ?? 0);
          return `${what}: sent ${f0(e.sum_sent!.packets ?? 0)} datagrams in ${f1(e.sum_sent!.seconds)} s (${f0((e.sum_sent!.packets ?? 0) / e.sum_sent!.seconds)} pps), receiver counted ${f0(rcvd)} (${f1((100 * rcvd) / (e.sum_sent!.packets ?? 1))}%)`;
        }
        return `${what}: ${f0(e.sum_received!.bits_per_second / 1e6)} Mbit/s over ${f1(e.sum_received!.seconds)} s, ${e.sum_sent!.retransmits ?? 0} retransmissions`;
      } catch (err) {
        return `${what}: ${(err as Error).message.split('\n')[0]}`;
      }
    });

    // Still alive and answering?
    aliveAtEnd = !daemon.proc.done && pidAlive(daemon.pid);
    if (aliveAtEnd) {
      health = await probe.get('/health', SCRAPE_TIMEOUT_MS);
      // A sample with the wire quiet: the ports' rx counters and the capture's counters
      // are read while nothing moves, so their difference is ring loss, not the skew of
      // reading them a few milliseconds apart under load (the per-interval column's).
      await sleep(1000);
      const last = await takeSample(topo, daemon, probe, gc, started);
      console.log(row(last, samples[samples.length - 1], base) + '   (after the drive, quiet)');
      samples.push(last);
    } else crashedAt ??= (Date.now() - started) / 1000;

    // Clean stop.
    if (!daemon.proc.done) {
      const a = await probe.get('/metrics', SCRAPE_TIMEOUT_MS);
      finalHits = a.status === 200 ? ruleHits(parseMetrics(a.body)) : [`(/metrics did not answer: ${a.body})`];
      const from = daemon.proc.lines.length;
      daemon.proc.kill('SIGTERM');
      stopped = await within(daemon.proc.exited, 10_000);
      if (stopped === undefined) {
        console.log('the daemon did not stop within 10 s of SIGTERM: killing it');
        await daemon.proc.stop(1_000);
        stopped = await daemon.proc.exited;
      }
      stoppedLine = daemon.proc.lines.slice(from).find((l) => l.includes('"msg":"daemon stopped"'));
    }
    drops = dropReport(dir, daemon.proc.lines);
  } finally {
    await endNamespaceBench(bench);
  }

  // ---- the verdict ----
  const first = samples[0];
  const lastS = samples[samples.length - 1];
  if (daemon === undefined || first === undefined || lastS === undefined) {
    console.log('no samples: the soak did not start');
    return;
  }
  const crashed = crashedAt !== undefined || !aliveAtEnd;
  const duration = ((ended || Date.now()) - started) / 1000;
  const alive = samples.filter((s) => s.alive);
  const judged = lastS.judged - first.judged;
  console.log(`\ndrive: ${f0(duration)} s; UDP target ${f0(udpPps)} pps of 64-byte datagrams (${streams} senders) + TCP ${tcpMbps} Mbit/s; load average now ${loadText()}`);
  for (const r of clientReports) console.log(`  ${r}`);
  const span = lastS.t - first.t;
  console.log(
    `daemon counters over the drive: ${f0(judged)} frames judged (${f0(judged / span)} per second), ${f0(lastS.forwarded - first.forwarded)} forwarded, ` +
      `${f0(lastS.dropped - first.dropped)} dropped, ${f0(lastS.sendErrors - first.sendErrors)} send errors, ${f0(lastS.packetErrors - first.packetErrors)} packet errors, ` +
      `${f0(lastS.undecodable - first.undecodable)} undecodable, ${f0(lastS.ringDrops - first.ringDrops)} ring drops (moat_ring_drops_total); ring loss ${f0(lastS.portRx - first.portRx - (lastS.captured - first.captured))} frames ` +
      `(${f2((100 * (lastS.portRx - first.portRx - (lastS.captured - first.captured))) / Math.max(1, lastS.portRx - first.portRx))}% of what the ports received); ` +
      `CPU ${f0((100 * (lastS.cpu - first.cpu)) / span)}% of a core, ${f2(((lastS.cpu - first.cpu) * 1e6) / (lastS.forwarded - first.forwarded))} us per forwarded frame`,
  );
  const stat = (key: 'rss' | 'rssAnon' | 'heap'): string => {
    const vals = alive.map((s) => s[key]).filter(Number.isFinite);
    if (vals.length === 0) return 'n/a';
    const half = alive.filter((s) => s.t >= span / 2).map((s): [number, number] => [s.t / 60, s[key]]);
    return `first ${f1(vals[0]!)}, last ${f1(vals[vals.length - 1]!)}, max ${f1(Math.max(...vals))} MB; slope over the second half ${f2(slope(half))} MB/min`;
  };
  console.log(`RSS:        ${stat('rss')} (VmHWM ${f1(Math.max(...alive.map((s) => s.hwm)))} MB)`);
  console.log(`anon RSS:   ${stat('rssAnon')}`);
  if (traceGc) console.log(`heap after GC: ${stat('heap')}`);
  console.log(
    `(the rest of RSS is file and shared mappings, node's code and the two packet rings: last sample RssFile ${f1(alive[alive.length - 1]?.rssFile ?? NaN)} MB, RssShmem ${f1(alive[alive.length - 1]?.rssShmem ?? NaN)} MB)`,
  );
  const lat = alive.filter((s) => s.scrapeError === undefined).map((s) => s.scrapeMs);
  if (lat.length > 0) console.log(`/metrics answer time: median ${f0(lat.sort((x, y) => x - y)[lat.length >> 1]!)} ms, max ${f0(lat[lat.length - 1]!)} ms`);
  const unanswered = samples.filter((s) => s.alive && s.scrapeError !== undefined).length;
  console.log(`/metrics unanswered within ${SCRAPE_TIMEOUT_MS / 1000} s: ${unanswered} of ${samples.length} samples`);
  if (finalHits.length > 0) console.log(`rule hits: ${finalHits.join(', ')}`);
  for (const l of drops) console.log(l);
  const warnings = daemon.proc.lines.filter((l) => /"level":(4|5|6)\d/.test(l));
  console.log(`daemon warning/error log lines: ${warnings.length}`);
  for (const w of warnings.slice(0, 10)) console.log(`  ${w}`);
  const err = stderrText(daemon.proc);
  if (err !== '') console.log(`daemon stderr (libpcap's "no IPv4 address" warnings left out):\n${err.split('\n').slice(-20).join('\n')}`);
  console.log(`health at the end: ${aliveAtEnd ? `${health.status} ${health.body}` : 'not asked (daemon gone)'}`);
  if (stopped !== undefined) console.log(`SIGTERM: exit ${stopped.signal ?? stopped.code}; ${stoppedLine ?? 'no "daemon stopped" line'}`);

  const secondHalf = alive.filter((s) => s.t >= span / 2);
  const rssHalf = slope(secondHalf.map((s): [number, number] => [s.t / 60, s.rss]));
  const grows = Number.isFinite(rssHalf) && rssHalf > 0.5;
  const trend =
    secondHalf.length < 5
      ? `too few samples in the second half (${secondHalf.length}) to judge the RSS trend`
      : grows
        ? `RSS still rising ${f2(rssHalf)} MB/min over the second half: possible leak`
        : `RSS flat over the second half (${f2(rssHalf)} MB/min, threshold 0.5)`;
  const ringLossTotal = Math.max(lastS.portRx - first.portRx - (lastS.captured - first.captured), lastS.ringDrops - first.ringDrops);
  const healthy = health.status === 200 && /"status":"ok"/.test(health.body);
  if (crashed) {
    console.log(`\nVERDICT: CRASHED at about ${f0(crashedAt ?? duration)} s (${daemon.proc.exitText()}). Last daemon output:`);
    console.log(daemon.proc.lines.slice(-20).join('\n'));
  } else {
    console.log(
      `\nVERDICT: no crash (alive after ${f0(duration)} s, /health ${healthy ? 'ok' : `NOT ok (${health.status})`}, ` +
        `clean stop ${stopped?.code === 0 && stoppedLine !== undefined ? 'yes' : 'NO'}); ` +
        `${trend}; ` +
        `ring drops ${ringLossTotal <= 0 ? `none (ports' rx less frames captured: ${f0(ringLossTotal)})` : f0(ringLossTotal)}; ` +
        `${f0(judged)} packets judged on the ${runsRing ? 'ring' : 'libpcap'} engine at ${f0(udpPps)} pps of UDP`,
    );
  }
}

// `node dist/bench/soak.bench.js [seconds]` runs it alone.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await runSoak(process.argv[2] === undefined ? 600 : Number(process.argv[2]));
}
