// Inline forwarding through real interfaces, in network namespaces (root, iperf3):
// host A (a0) --- (ga) gateway (gb) --- (b0) host B, built by the test harness
// (end hosts with TX checksum offload off, gateway ports with GRO/LRO/GSO/TSO off).
// In the same run, on the same topology and offload settings, it measures
//   * a Linux kernel bridge: br0 in the gateway with ga and gb enslaved (the reference);
//   * the Moat daemon inline on ga/gb (`moat daemon`, built binary), with a 20-rule
//     network_transit ruleset that lets the iperf3 traffic pass but evaluates every
//     rule on every packet: GeoIP country and ASN lookups on both addresses, two lists
//     (10,200 and 1,050 IPv4/IPv6 prefixes), port sets, flags, lengths;
// and for each path:
//   (a) iperf3 TCP A->B, 8 s: receiver throughput and sender retransmissions;
//   (b) iperf3 UDP A->B, 64-byte payloads, at a ladder of offered rates, 8 s each,
//       split over two sender processes (iperf3 3.12 is single-threaded; one process
//       stops near 70-100 kpps here): what iperf3 sent (its own count), what reached
//       B's UDP layer (B's kernel UDP counters: what the bridge delivered, whether or
//       not the receiver kept up) and what the iperf3 receivers counted (their reports:
//       packets - lost; the end-to-end figure, itself limited by the receivers' CPU).
// For Moat it also reads the daemon's CPU time (/proc/<pid>/stat utime+stime) before
// and after each run and divides by the frames it forwarded (moat_capture_sent_total
// on its /metrics, both ports): CPU microseconds per forwarded packet.
// The traffic generator, the receiver and the bridge share the machine's cores: compare
// the two paths with each other, not with line rate.
//
// Knobs: MOAT_BENCH_INLINE_SECONDS (default 8), MOAT_BENCH_INLINE_RATES (pps, default
// "20000,50000,80000,120000,160000"), MOAT_BENCH_INLINE_UDP_STREAMS (sender processes, default 2).
//
// The helpers exported here (topology set-up, daemon start, /proc and /metrics readers,
// iperf3 runners) are shared with soak.bench.ts.

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
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
  const pkgs: Record<string, string> = { ip: 'iproute2', ethtool: 'ethtool', iperf3: 'iperf3', ping: 'iputils-ping', stdbuf: 'coreutils' };
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

/** Writes ruleset, lists and daemon configuration into `dir`; returns the configuration path. */
export function writeDaemonConfig(dir: string, topo: GatewayTopology, ringBytes = 128 << 20): string {
  const account = join(dir, 'account.json');
  writeFileSync(account, JSON.stringify({ name: 'bench account entrypoint', kind: 'root', phase: 'network_transit', version: '1', rules: BENCH_RULES }, null, 1));
  writeFileSync(join(dir, 'blocklist.txt'), listText(10_000, 0, 200));
  writeFileSync(join(dir, 'scanners.txt'), listText(1_000, 12_000, 50));
  const config = join(dir, 'daemon.jsonc');
  writeFileSync(
    config,
    JSON.stringify(
      {
        mode: 'inline',
        interfaces: [topo.gateway.portA, topo.gateway.portB],
        rules: { account },
        lists: { 'bench.blocklist': join(dir, 'blocklist.txt'), 'bench.scanners': join(dir, 'scanners.txt') },
        geoip: { country: GEOIP_COUNTRY, asn: GEOIP_ASN },
        capture: { ringBytes, filter: '' },
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
    if (!l.includes('"msg":"dropped"')) continue;
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
const kpps = (x: number): string => (Number.isFinite(x) ? `${(x / 1000).toFixed(1)}k` : '-');
const usPerPkt = (cpu: number | undefined, n: number | undefined): number => (cpu === undefined || !n ? NaN : (cpu * 1e6) / n);

// ---------------------------------------------------------------------------------
// The benchmark

interface PathResult {
  tcp: TcpResult;
  udp: UdpResult[];
}

async function measurePath(topo: GatewayTopology, seconds: number, rates: number[], udpPorts: number[], daemon?: RunningDaemon): Promise<PathResult> {
  await waitForPath(topo);
  await iperfClient(topo, ['-p', '5201', '-t', '2'], 2, 'warm-up'); // untimed: JIT, caches, learning
  await sleep(500);
  const tcp = await tcpRun(topo, seconds, daemon);
  const udp: UdpResult[] = [];
  for (const pps of rates) {
    await sleep(1000);
    udp.push(await udpRun(topo, pps, seconds, daemon, udpPorts));
  }
  return { tcp, udp };
}

/**
 * Kernel bridge vs the Moat daemon inline, in namespaces: TCP throughput, UDP 64-byte
 * packet rates delivered at a ladder of offered rates, the ratio, and the daemon's CPU
 * per forwarded packet. Needs root and iperf3; skips with a message otherwise.
 */
export async function runInlineBench(): Promise<void> {
  const seconds = Number(process.env.MOAT_BENCH_INLINE_SECONDS ?? 8);
  const rates = (process.env.MOAT_BENCH_INLINE_RATES ?? '20000,50000,80000,120000,160000').split(',').map(Number);
  const streams = Number(process.env.MOAT_BENCH_INLINE_UDP_STREAMS ?? 2);
  const udpPorts = Array.from({ length: streams }, (_, i) => 5201 + i);
  console.log(`\n## Inline bridge in namespaces: kernel bridge (br0) vs Moat daemon (iperf3 A->B, ${seconds} s per run)`);
  const problem = namespaceBenchProblem();
  if (problem !== null) {
    console.log(`skipped: ${problem}`);
    return;
  }
  ensureBuilt();
  console.log(`load average at start: ${loadText()}`);
  const dir = mkdtempSync(join(tmpdir(), 'moat-bench-inline-'));
  const topo = await gatewayTopology({ staticNeighbors: true });
  let daemon: RunningDaemon | undefined;
  let kernel: PathResult;
  let moat: PathResult;
  let finalMetrics: Metrics;
  let warnings: string[] = [];
  let drops: string[] = [];
  let offloads: string[];
  try {
    offloads = await describeOffloads(topo);
    for (const port of udpPorts) await startIperfServer(topo, port);
    const gw = topo.gateway;

    // 1. Kernel bridge.
    await ip(['-n', gw.ns, 'link', 'add', 'br0', 'type', 'bridge', 'stp_state', '0']);
    await ip(['-n', gw.ns, 'link', 'set', gw.portA, 'master', 'br0']);
    await ip(['-n', gw.ns, 'link', 'set', gw.portB, 'master', 'br0']);
    await ip(['-n', gw.ns, 'link', 'set', 'br0', 'up']);
    kernel = await measurePath(topo, seconds, rates, udpPorts);
    await ip(['-n', gw.ns, 'link', 'del', 'br0']);
    const leak = await exec(topo.a.ns, 'ping', ['-c', '1', '-W', '1', topo.b.ipv4], { check: false });
    if (leak.code === 0) throw new Error('packets still cross the gateway after br0 was deleted');

    // 2. Moat daemon on the same ports.
    const cfg = writeDaemonConfig(dir, topo);
    daemon = await startDaemon(topo, cfg);
    moat = await measurePath(topo, seconds, rates, udpPorts, daemon);
    finalMetrics = await scrape(gw.ns);
    warnings = daemon.proc.lines.filter((l) => /"level":(4|5|6)\d/.test(l));
    await daemon.proc.stop(5_000);
    drops = dropReport(dir, daemon.proc.lines);
  } finally {
    await topo.destroy();
    rmSync(dir, { recursive: true, force: true });
  }

  console.log(`offloads (same for both paths): ${offloads.join('; ')}`);
  console.log(`ruleset: ${BENCH_RULES.length} rules (country + ASN lookups, lists of 10,200 and 1,050 prefixes), none matching the test traffic`);
  const ratio = (m: number, k: number): string => (k > 0 ? `${(m / k).toFixed(2)}x` : '-');
  console.log('\nTCP (receiver throughput, sender retransmissions)');
  console.log(`  kernel bridge  ${f0(kernel.tcp.mbps).padStart(6)} Mbit/s  ${String(kernel.tcp.retransmits).padStart(6)} retr`);
  console.log(
    `  moat daemon    ${f0(moat.tcp.mbps).padStart(6)} Mbit/s  ${String(moat.tcp.retransmits).padStart(6)} retr   moat/kernel ${ratio(moat.tcp.mbps, kernel.tcp.mbps)}` +
      `   daemon CPU ${f0((100 * moat.tcp.cpuSeconds!) / seconds)}% of a core, ${f2(usPerPkt(moat.tcp.cpuSeconds, moat.tcp.forwarded))} us per forwarded frame (${f0(moat.tcp.forwarded! / seconds)} frames/s both ways)`,
  );
  console.log(
    `\nUDP, 64-byte payloads, ${streams} iperf3 sender process${streams === 1 ? '' : 'es'} (pps; "at B" = datagrams reaching B's UDP layer, its share of what was sent in parentheses; "rcvd" = iperf3 receiver reports: packets - lost)`,
  );
  console.log('  target  | kernel: sent     at B          rcvd | moat: sent     at B          rcvd | moat/kernel at B   rcvd | daemon CPU  us/pkt');
  const share = (r: UdpResult): string => `(${r.sentPps > 0 ? Math.min(100, (100 * r.atBPps) / r.sentPps).toFixed(1) : '-'}%)`.padStart(8);
  for (let i = 0; i < rates.length; i++) {
    const k = kernel.udp[i]!;
    const m = moat.udp[i]!;
    console.log(
      `  ${kpps(k.targetPps).padStart(6)}  |  ${kpps(k.sentPps).padStart(10)} ${kpps(k.atBPps).padStart(8)}${share(k)} ${kpps(k.rcvdPps).padStart(7)} |` +
        ` ${kpps(m.sentPps).padStart(8)} ${kpps(m.atBPps).padStart(8)}${share(m)} ${kpps(m.rcvdPps).padStart(7)} |` +
        `      ${ratio(m.atBPps, k.atBPps).padStart(6)} ${ratio(m.rcvdPps, k.rcvdPps).padStart(6)} |  ${f0((100 * m.cpuSeconds!) / seconds).padStart(6)}%  ${f2(usPerPkt(m.cpuSeconds, m.forwarded)).padStart(6)}`,
    );
  }
  const cpu = moat.udp.reduce((s, r) => s + r.cpuSeconds!, 0);
  const fwd = moat.udp.reduce((s, r) => s + r.forwarded!, 0);
  console.log(`  daemon CPU over the whole UDP ladder: ${f2(cpu)} s for ${f0(fwd)} forwarded frames = ${f2(usPerPkt(cpu, fwd))} us per packet`);
  const dropped = metricSum(finalMetrics, 'moat_packets_total', 'verdict="drop"');
  const judged = metricSum(finalMetrics, 'moat_packets_total');
  console.log(
    `daemon totals: ${f0(judged)} frames judged, ${f0(dropped)} dropped, ${f0(metricSum(finalMetrics, 'moat_capture_send_errors_total'))} send errors, ` +
      `${f0(metricSum(finalMetrics, 'moat_packet_errors_total'))} packet errors, ${warnings.length} warning/error log lines`,
  );
  for (const w of warnings.slice(0, 5)) console.log(`  ${w}`);
  const hits = ruleHits(finalMetrics);
  if (hits.length > 0) console.log(`rule hits: ${hits.join(', ')}`);
  for (const l of drops) console.log(l);
}

// `node dist/bench/inline.bench.js` runs it alone.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await runInlineBench();
}
