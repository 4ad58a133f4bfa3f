// What the namespace benchmarks (inline.bench.ts, soak.bench.ts) share: their
// start (skip unless root and the tools are there, the inline-gateway topology),
// the benchmark ruleset and daemon configuration, starting the daemon and reading
// /proc and /metrics about it, and the iperf3 runners.

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { loadDaemonConfig } from '../src/config/index.js';
import { exec, gatewayTopology, ip, spawnIn, type GatewayTopology, type NsProcess } from '../test/support/netns.js';

// ---------------------------------------------------------------------------------
// Where things are

function findRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'moat') return dir;
      } catch {
        // not ours
      }
    }
    const up = dirname(dir);
    if (up === dir) throw new Error('cannot find the moat package root');
    dir = up;
  }
}

/** The repository root (found from this file, whether run from bench/ or dist/bench/). */
export const REPO = findRoot();
/** The built CLI the daemon runs from. */
export const MOAT_BIN = join(REPO, 'dist/src/cli/main.js');
const GEOIP_COUNTRY = join(REPO, 'native-fixtures/geoip/test-country.mmdb');
const GEOIP_ASN = join(REPO, 'native-fixtures/geoip/test-asn.mmdb');
/** Where the daemon serves /metrics and /health, inside the gateway namespace. */
export const METRICS_LISTEN = '127.0.0.1:9490';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function onPath(name: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((d) => d !== '' && existsSync(join(d, name)));
}

/** Why the namespace benchmarks cannot run here, or null when they can. */
export function namespaceBenchProblem(): string | null {
  if (process.platform !== 'linux') return 'network namespaces need Linux';
  if (process.getuid?.() !== 0) return 'not running as root';
  const pkgs: Record<string, string> = { ip: 'iproute2', ethtool: 'ethtool', iperf3: 'iperf3', ping: 'iputils-ping', stdbuf: 'coreutils', python3: 'python3' };
  for (const [tool, pkg] of Object.entries(pkgs)) if (!onPath(tool)) return `${tool} is not installed (apt-get install -y ${pkg})`;
  if (!existsSync(GEOIP_COUNTRY) || !existsSync(GEOIP_ASN)) return 'native-fixtures/geoip/*.mmdb are missing';
  return null;
}

/** Builds dist/ when the CLI binary is missing. */
export function ensureBuilt(): void {
  if (!existsSync(MOAT_BIN)) execFileSync('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: REPO, stdio: 'inherit' });
}

/** "1.02 0.98 0.91 (1/5/15 min), 2 cores" */
export function loadText(): string {
  return `${loadavg()
    .map((l) => l.toFixed(2))
    .join(' ')} (1/5/15 min), ${cpus().length} cores`;
}

/** A running namespace benchmark: its temporary directory and its topology. */
export interface NamespaceBench {
  dir: string;
  topo: GatewayTopology;
}

/**
 * The start of a namespace benchmark: prints its heading, then either says why
 * it cannot run here (and answers undefined) or builds the CLI when missing and
 * creates a temporary directory and the inline-gateway topology, which
 * endNamespaceBench() removes.
 */
export async function startNamespaceBench(heading: string, dirPrefix: string): Promise<NamespaceBench | undefined> {
  console.log(heading);
  const problem = namespaceBenchProblem();
  if (problem !== null) {
    console.log(`skipped: ${problem}`);
    return undefined;
  }
  ensureBuilt();
  console.log(`load average at start: ${loadText()}`);
  const dir = mkdtempSync(join(tmpdir(), dirPrefix));
  const topo = await gatewayTopology({ staticNeighbors: true });
  return { dir, topo };
}

/** Tears the topology down (processes, namespaces) and removes the temporary directory. */
export async function endNamespaceBench(bench: NamespaceBench): Promise<void> {
  await bench.topo.destroy();
  rmSync(bench.dir, { recursive: true, force: true });
}

// ---------------------------------------------------------------------------------
// Ruleset, lists and daemon configuration

interface RuleSpec {
  id: string;
  action: 'block' | 'skip' | 'log';
  expression: string;
  action_parameters?: { ruleset: string };
}

/**
 * Twenty rules in the spirit of a real transit policy. None matches the iperf3 traffic
 * (TCP and UDP between 10.77.1.1 and 10.77.1.2, port 5201-5203 and ephemeral ports),
 * and the lookups stand alone in their rules, so every packet gets a country lookup of
 * both addresses, an ASN lookup, and membership tests in both lists.
 */
export const BENCH_RULES: RuleSpec[] = [
  { id: 'ssh-office', action: 'skip', action_parameters: { ruleset: 'current' }, expression: 'tcp.dstport == 22 and ip.src in {192.0.2.0/24 2001:db8:100::/48}' },
  { id: 'admin-ports', action: 'block', expression: 'tcp.dstport in {22 23 135 139 445 3389 5900}' },
  { id: 'src-country', action: 'block', expression: 'ip.src.country in {"KP" "IR" "SY" "CU" "BY"}' },
  { id: 'dst-country', action: 'block', expression: 'ip.dst.country in {"KP" "IR"} and not tcp.dstport in {80 443}' },
  { id: 'blocklist-src', action: 'block', expression: 'ip.src in $bench.blocklist' },
  { id: 'blocklist-dst-syn', action: 'block', expression: 'ip.dst in $bench.blocklist and tcp.flags.syn' },
  { id: 'bad-asn', action: 'block', expression: 'ip.src.asnum in {64496 64511 4200000001}' },
  { id: 'amplification', action: 'block', expression: 'udp.dstport in {19 53 123 161 389 1900 11211} and ip.len > 512' },
  { id: 'syn-fin', action: 'block', expression: 'tcp.flags.syn and tcp.flags.fin' },
  { id: 'low-ttl-syn', action: 'block', expression: 'tcp.flags.syn and not tcp.flags.ack and ip.ttl < 3' },
  { id: 'bogon-src', action: 'block', expression: 'ip.src in {0.0.0.0/8 127.0.0.0/8 169.254.0.0/16 224.0.0.0/4 240.0.0.0/4}' },
  { id: 'tunnels', action: 'block', expression: 'ip.proto in {"gre" "esp" "sctp"}' },
  { id: 'big-ping', action: 'block', expression: 'icmp.type == 8 and ip.len > 1000' },
  { id: 'irc-backdoor', action: 'block', expression: 'tcp.dstport in {6660..6669 31337 12345}' },
  { id: 'udp-reflectors', action: 'block', expression: 'udp.srcport in {19 1900} or udp.dstport == 0' },
  { id: 'ttl-1', action: 'block', expression: 'ip.ttl < 2 and not ip.dst in {224.0.0.0/24 ff02::/16}' },
  { id: 'jumbo', action: 'block', expression: 'ip.len > 9000' },
  { id: 'doc-v6', action: 'block', expression: 'ip.dst in {2001:db8::/32 fc00:1::/48}' },
  { id: 'game-cn', action: 'log', expression: 'ip.src.country == "CN" and udp.dstport in {27015..27030}' },
  { id: 'scanners-low', action: 'block', expression: 'ip.src in $bench.scanners and tcp.dstport < 1024' },
];

function listText(count: number, base: number, v6: number): string {
  const lines = ['# made-up benchmark list'];
  for (let i = 0; i < count; i++) {
    const n = base + i; // /24s walking up from 100.64.0.0 (CGNAT space; 10.77/16 is never listed)
    lines.push(`100.${64 + ((n >> 8) & 63)}.${n & 255}.0/24`);
  }
  for (let i = 0; i < v6; i++) lines.push(`2001:db8:${(base + i).toString(16)}::/48`);
  return `${lines.join('\n')}\n`;
}

/** The capture settings a benchmark daemon runs with (see capture.* in the daemon configuration). */
export interface BenchCapture {
  /** capture.engine; absent: the key is left out (a daemon without it, or its default). */
  engine?: 'ring' | 'libpcap';
  /** capture.workers (ring engine only). */
  workers?: number;
  /** capture.ringBytes; default 128 MiB. */
  ringBytes?: number;
  /** capture.priority; absent: the daemon's default (packet workers -10, background +10). */
  priority?: { packet: number; background: number };
  /** File name of the configuration in `dir`; default daemon.jsonc (several can live side by side). */
  name?: string;
}

/** Writes ruleset, lists and daemon configuration into `dir`; returns the configuration path. */
export function writeDaemonConfig(dir: string, topo: GatewayTopology, capture: BenchCapture = {}): string {
  const ringBytes = capture.ringBytes ?? 128 << 20;
  const account = join(dir, 'account.json');
  writeFileSync(account, JSON.stringify({ name: 'bench account entrypoint', kind: 'root', phase: 'network_transit', version: '1', rules: BENCH_RULES }, null, 1));
  writeFileSync(join(dir, 'blocklist.txt'), listText(10_000, 0, 200));
  writeFileSync(join(dir, 'scanners.txt'), listText(1_000, 12_000, 50));
  const config = join(dir, capture.name ?? 'daemon.jsonc');
  writeFileSync(
    config,
    JSON.stringify(
      {
        mode: 'inline',
        interfaces: [topo.gateway.portA, topo.gateway.portB],
        // Every frame judged, B's replies and ACKs too (the default judges only A's, from outside):
        // the cost measured is the worst case, comparable with the figures measured before judge existed.
        judge: 'both',
        rules: { account },
        lists: { 'bench.blocklist': join(dir, 'blocklist.txt'), 'bench.scanners': join(dir, 'scanners.txt') },
        geoip: { country: GEOIP_COUNTRY, asn: GEOIP_ASN },
        capture: {
          ...(capture.engine !== undefined ? { engine: capture.engine } : {}),
          ...(capture.workers !== undefined ? { workers: capture.workers } : {}),
          ...(capture.priority !== undefined ? { priority: capture.priority } : {}),
          ringBytes,
          filter: '',
        },
        metrics: { listen: METRICS_LISTEN, enabled: true },
        // Nothing here should be dropped: if something is, the log says by which rule
        // and the drop capture holds the packets (see dropReport()).
        log: { level: 'info', drops: true },
        dropCapture: { path: join(dir, 'dropped.pcap'), maxBytes: 4 << 20, files: 2 },
        watch: false,
      },
      null,
      1,
    ),
  );
  return config;
}

/**
 * Whether the built daemon's configuration has capture.engine (#19: the ring engine
 * wired into `moat daemon`). A daemon without it rejects the key as unknown; then it
 * has one engine, libpcap (cap), and the benchmarks say so.
 */
export function daemonHasEngineKey(dir: string, topo: GatewayTopology): boolean {
  const probe = writeDaemonConfig(dir, topo, { engine: 'libpcap', name: 'engine-probe.jsonc' });
  try {
    loadDaemonConfig(probe);
    return true;
  } catch (err) {
    if (/engine/.test((err as Error).message)) return false;
    throw err;
  } finally {
    rmSync(probe, { force: true });
  }
}

// ---------------------------------------------------------------------------------
// The daemon and what /proc and /metrics say about it

export interface RunningDaemon {
  proc: NsProcess;
  /** PID of the node process running the daemon. */
  pid: number;
}

function cmdlineOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/**
 * Starts `moat daemon --config cfg` in the gateway namespace and waits for "daemon running".
 * `prefix` runs before node (e.g. ['stdbuf', '-oL']), `nodeArgs` are node's own options.
 */
export async function startDaemon(topo: GatewayTopology, cfg: string, opts: { prefix?: string[]; nodeArgs?: string[] } = {}): Promise<RunningDaemon> {
  const argv = [...(opts.prefix ?? []), process.execPath, ...(opts.nodeArgs ?? []), MOAT_BIN, 'daemon', '--config', cfg];
  const proc = spawnIn(topo.gateway.ns, argv[0]!, argv.slice(1));
  await proc.waitForLine(/"msg":"daemon running"/, 30_000);
  // `ip netns exec` (and stdbuf) exec the command, so the child's PID is node's; check.
  let pid = proc.child.pid ?? -1;
  if (!cmdlineOf(pid).includes(MOAT_BIN)) {
    const r = await ip(['netns', 'pids', topo.gateway.ns]);
    pid = r.stdout
      .split('\n')
      .map(Number)
      .find((p) => p > 0 && cmdlineOf(p).includes(MOAT_BIN) && cmdlineOf(p).includes(' daemon '))!;
    if (pid === undefined) throw new Error('cannot find the daemon process');
  }
  return { proc, pid };
}

let clockTicks: number | undefined;

/** CPU time (user + system, all threads) of a process, in seconds. */
export function cpuSeconds(pid: number): number {
  clockTicks ??= Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields[0] is field 3 (state)
  return (Number(fields[11]) + Number(fields[12])) / clockTicks; // utime, stime: fields 14, 15
}

/** Memory of a process from /proc/<pid>/status, in MiB. */
export interface ProcMemory {
  rss: number;
  /** Anonymous memory: JS heap, native allocations (what a leak would grow). */
  rssAnon: number;
  /** File and shared mappings: node's code, and the capture rings (mapped packet sockets). */
  rssFile: number;
  rssShmem: number;
  hwm: number;
}

export function procMemory(pid: number): ProcMemory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) / 1024;
  return { rss: kb('VmRSS'), rssAnon: kb('RssAnon'), rssFile: kb('RssFile'), rssShmem: kb('RssShmem'), hwm: kb('VmHWM') };
}

export function pidAlive(pid: number): boolean {
  return existsSync(`/proc/${pid}/stat`) && !/^\S+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
}

/** GET http://METRICS_LISTEN<path> from inside the gateway namespace: status and body (status 0: no answer). */
export async function httpGet(ns: string, path: string, timeoutMs = 5000): Promise<{ status: number; body: string }> {
  const script = `fetch('http://${METRICS_LISTEN}${path}', { signal: AbortSignal.timeout(${timeoutMs}) })
    .then(async (r) => process.stdout.write(JSON.stringify({ status: r.status, body: await r.text() })))
    .catch((e) => process.stdout.write(JSON.stringify({ status: 0, body: String(e) })));`;
  const r = await exec(ns, process.execPath, ['-e', script], { check: false, timeoutMs: timeoutMs + 10_000 });
  try {
    return JSON.parse(r.stdout) as { status: number; body: string };
  } catch {
    return { status: 0, body: `${r.stdout}${r.stderr}` };
  }
}

/** Prometheus text as a map from `name{labels}` to value. */
export type Metrics = Map<string, number>;

export async function scrape(ns: string, timeoutMs = 5000): Promise<Metrics> {
  const r = await httpGet(ns, '/metrics', timeoutMs);
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}: ${r.body}`);
  const m: Metrics = new Map();
  for (const line of r.body.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    m.set(line.slice(0, sp), Number(line.slice(sp + 1)));
  }
  return m;
}

/** Sum of a metric over the label sets containing every `labels` fragment (e.g. 'verdict="drop"'). */
export function metricSum(m: Metrics, name: string, ...labels: string[]): number {
  let sum = 0;
  for (const [k, v] of m) {
    if (k !== name && !k.startsWith(`${name}{`)) continue;
    if (labels.every((l) => k.includes(l))) sum += v;
  }
  return sum;
}

/** The rules that matched something: "rule-id (action): n packets", from /metrics. */
export function ruleHits(m: Metrics): string[] {
  const out: string[] = [];
  for (const [k, v] of m) {
    const r = /^moat_rule_hits_total\{.*rule="([^"]*)",action="([^"]*)"/.exec(k);
    if (r !== null && v > 0) out.push(`${r[1]} (${r[2]}): ${v}`);
  }
  return out;
}

/**
 * What the daemon dropped, after it has stopped (the drop capture is flushed on stop):
 * its "dropped" log lines counted by rule, and the first packets of the drop capture as
 * tcpdump prints them. Empty when nothing was dropped.
 */
export function dropReport(dir: string, daemonLines: readonly string[]): string[] {
  const byRule = new Map<string, number>();
  for (const l of daemonLines) {
    if (!/"action":"(drop|would_drop)"/.test(l)) continue;
    const rule = /"rule":("[^"]*"|null)/.exec(l)?.[1] ?? '?';
    byRule.set(rule, (byRule.get(rule) ?? 0) + 1);
  }
  const out: string[] = [];
  if (byRule.size > 0) out.push(`"dropped" log lines by rule: ${[...byRule].map(([r, n]) => `${r} ${n}`).join(', ')}`);
  const pcap = join(dir, 'dropped.pcap');
  if (existsSync(pcap) && onPath('tcpdump')) {
    const r = spawnSync('tcpdump', ['-nn', '-e', '-v', '-r', pcap, '-c', '12'], { encoding: 'utf8' });
    const text = (r.stdout ?? '').trim();
    if (text !== '') out.push('first dropped packets (tcpdump -nn -e -v -r dropped.pcap):', ...text.split('\n').map((l) => `  ${l}`));
  }
  return out;
}

/** Packet counters of an interface (`ip -s -j link`). */
export async function linkStats(ns: string, iface: string): Promise<{ rx: number; tx: number; rxDropped: number }> {
  const r = await ip(['-n', ns, '-s', '-j', 'link', 'show', 'dev', iface]);
  const s = (JSON.parse(r.stdout) as { stats64: { rx: { packets: number; dropped: number }; tx: { packets: number } } }[])[0]!.stats64;
  return { rx: s.rx.packets, tx: s.tx.packets, rxDropped: s.rx.dropped };
}

/** UDP datagrams that reached the IP stack of namespace `ns` so far: InDatagrams + InErrors + NoPorts of /proc/net/snmp. */
export async function udpArrivals(ns: string): Promise<number> {
  const r = await exec(ns, 'cat', ['/proc/net/snmp']);
  const rows = r.stdout.split('\n').filter((l) => l.startsWith('Udp: '));
  const names = rows[0]!.split(/\s+/).slice(1);
  const values = rows[1]!.split(/\s+/).slice(1).map(Number);
  const v = (name: string): number => values[names.indexOf(name)] ?? 0;
  return v('InDatagrams') + v('InErrors') + v('NoPorts');
}

/** The offload features that matter, per interface, e.g. "a0: tx-checksumming off, tso off, ...". */
export async function describeOffloads(topo: GatewayTopology): Promise<string[]> {
  // tx-tcp-segmentation is the effective TSO state (the tcp-segmentation-offload line
  // shows what was requested: it stays "on" when TX checksumming off disables TSO).
  const want: Record<string, string> = {
    'tx-checksumming': 'txcsum',
    'tx-tcp-segmentation': 'tso',
    'generic-segmentation-offload': 'gso',
    'generic-receive-offload': 'gro',
    'large-receive-offload': 'lro',
  };
  const out: string[] = [];
  for (const [ns, iface] of [
    [topo.a.ns, topo.a.iface],
    [topo.gateway.ns, topo.gateway.portA],
    [topo.gateway.ns, topo.gateway.portB],
    [topo.b.ns, topo.b.iface],
  ] as const) {
    const r = await exec(ns, 'ethtool', ['-k', iface]);
    const parts: string[] = [];
    for (const line of r.stdout.split('\n')) {
      const m = /^\s*(\S[^:]*): (on|off)/.exec(line);
      if (m !== null && want[m[1]!] !== undefined) parts.push(`${want[m[1]!]} ${m[2]}`);
    }
    out.push(`${iface}: ${parts.join(', ')}`);
  }
  return out;
}

/** Pings B from A until a reply comes (the bridge in between is up), or throws. */
export async function waitForPath(topo: GatewayTopology, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const r = await exec(topo.a.ns, 'ping', ['-c', '1', '-W', '1', topo.b.ipv4], { check: false });
    if (r.code === 0) return;
  }
  throw new Error(`no ping reply from ${topo.b.ipv4} through the gateway within ${timeoutMs} ms`);
}

// ---------------------------------------------------------------------------------
// iperf3

/** Starts an iperf3 server in B on `port`. */
export async function startIperfServer(topo: GatewayTopology, port: number): Promise<NsProcess> {
  const p = spawnIn(topo.b.ns, 'iperf3', ['-s', '-B', topo.b.ipv4, '-p', String(port), '--forceflush']);
  await p.waitForLine(/Server listening/, 10_000);
  return p;
}

interface IperfJson {
  error?: string;
  end?: {
    sum_sent?: { seconds: number; bits_per_second: number; retransmits?: number; packets?: number; bytes: number };
    sum_received?: { seconds: number; bits_per_second: number; packets?: number; lost_packets?: number; bytes: number };
  };
}

/** Parses an iperf3 -J report (throws with the text when it is an error). */
export function parseIperf(text: string, what: string): Required<IperfJson>['end'] {
  let j: IperfJson;
  try {
    j = JSON.parse(text) as IperfJson;
  } catch {
    throw new Error(`${what}: iperf3 printed no JSON report:\n${text.slice(0, 2000)}`);
  }
  if (j.error !== undefined || j.end?.sum_sent === undefined || j.end.sum_received === undefined) {
    throw new Error(`${what}: iperf3 failed: ${j.error ?? text.slice(0, 2000)}`);
  }
  return j.end;
}

/** Runs an iperf3 client in A (with -J) and returns its report; retries while the server is busy. */
export async function iperfClient(topo: GatewayTopology, args: string[], seconds: number, what: string): Promise<Required<IperfJson>['end']> {
  for (let attempt = 0; ; attempt++) {
    const r = await exec(topo.a.ns, 'iperf3', ['-c', topo.b.ipv4, '-J', ...args], { check: false, timeoutMs: (seconds + 30) * 1000 });
    if (/busy/i.test(r.stdout) && attempt < 5) {
      await sleep(1000);
      continue;
    }
    return parseIperf(r.stdout, what);
  }
}

export interface UdpResult {
  targetPps: number;
  seconds: number;
  /** Datagrams iperf3 sent, per second. */
  sentPps: number;
  /**
   * UDP datagrams that reached B's IP stack, per second: the kernel's UDP counters in B
   * (InDatagrams + InErrors + NoPorts), so socket-buffer overflows at a receiver that
   * cannot keep up still count, and concurrent TCP does not.
   */
  atBPps: number;
  /** Datagrams the iperf3 receiver counted (packets - lost), per second. */
  rcvdPps: number;
  /** Daemon CPU over the run (Moat only). */
  cpuSeconds?: number;
  /** Frames the daemon forwarded over the run, both ports (Moat only). */
  forwarded?: number;
}

export interface TcpResult {
  mbps: number;
  retransmits: number;
  cpuSeconds?: number;
  forwarded?: number;
}

/**
 * iperf3 UDP A->B, 64-byte payloads at `pps` in total, split evenly over one client
 * process per port in `ports` (iperf3 3.12 is single-threaded: one process tops out
 * near 70-100 kpps here); counts at A, b0 and the receivers; daemon CPU when given.
 */
export async function udpRun(topo: GatewayTopology, pps: number, seconds: number, daemon?: RunningDaemon, ports: number[] = [5201]): Promise<UdpResult> {
  const before = await snapshot(topo, daemon);
  const bits = Math.round((pps * 64 * 8) / ports.length);
  const ends = await Promise.all(
    ports.map((port) => iperfClient(topo, ['-p', String(port), '-u', '-l', '64', '-b', String(bits), '-w', '4M', '-t', String(seconds)], seconds, `UDP ${pps} pps`)),
  );
  await sleep(300); // frames still in the rings
  const after = await snapshot(topo, daemon);
  const sentSeconds = Math.max(...ends.map((e) => e.sum_sent!.seconds));
  const res: UdpResult = {
    targetPps: pps,
    seconds,
    sentPps: ends.reduce((s, e) => s + (e.sum_sent!.packets ?? 0), 0) / sentSeconds,
    atBPps: (after.udpAtB - before.udpAtB) / sentSeconds,
    rcvdPps: ends.reduce((s, e) => s + ((e.sum_received!.packets ?? 0) - (e.sum_received!.lost_packets ?? 0)) / e.sum_received!.seconds, 0),
  };
  if (daemon !== undefined) {
    res.cpuSeconds = after.cpu - before.cpu;
    res.forwarded = after.forwarded - before.forwarded;
  }
  return res;
}

/** iperf3 TCP A->B for `seconds`; daemon CPU when given. */
export async function tcpRun(topo: GatewayTopology, seconds: number, daemon?: RunningDaemon, port = 5201): Promise<TcpResult> {
  const before = await snapshot(topo, daemon);
  const end = await iperfClient(topo, ['-p', String(port), '-t', String(seconds)], seconds, 'TCP');
  await sleep(300);
  const after = await snapshot(topo, daemon);
  const res: TcpResult = { mbps: end.sum_received!.bits_per_second / 1e6, retransmits: end.sum_sent!.retransmits ?? 0 };
  if (daemon !== undefined) {
    res.cpuSeconds = after.cpu - before.cpu;
    res.forwarded = after.forwarded - before.forwarded;
  }
  return res;
}

async function snapshot(topo: GatewayTopology, daemon?: RunningDaemon): Promise<{ udpAtB: number; cpu: number; forwarded: number }> {
  const udpAtB = await udpArrivals(topo.b.ns);
  if (daemon === undefined) return { udpAtB, cpu: 0, forwarded: 0 };
  const m = await scrape(topo.gateway.ns);
  return { udpAtB, cpu: cpuSeconds(daemon.pid), forwarded: metricSum(m, 'moat_capture_sent_total') };
}

// ---------------------------------------------------------------------------------
// Formatting

export const f0 = (x: number): string => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '-');
export const f1 = (x: number): string => (Number.isFinite(x) ? x.toFixed(1) : '-');
export const f2 = (x: number): string => (Number.isFinite(x) ? x.toFixed(2) : '-');
