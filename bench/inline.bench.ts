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
// What it shares with soak.bench.ts (topology, daemon, /proc and /metrics readers,
// iperf3 runners) is in namespace-harness.ts.

import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exec, ip, type GatewayTopology } from '../test/support/netns.js';
import {
  BENCH_RULES,
  describeOffloads,
  dropReport,
  endNamespaceBench,
  f0,
  f2,
  iperfClient,
  metricSum,
  ruleHits,
  scrape,
  sleep,
  startDaemon,
  startIperfServer,
  startNamespaceBench,
  tcpRun,
  udpRun,
  waitForPath,
  writeDaemonConfig,
  type Metrics,
  type RunningDaemon,
  type TcpResult,
  type UdpResult,
} from './namespace-harness.js';

// ---------------------------------------------------------------------------------
// Formatting

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
  const bench = await startNamespaceBench(`\n## Inline bridge in namespaces: kernel bridge (br0) vs Moat daemon (iperf3 A->B, ${seconds} s per run)`, 'moat-bench-inline-');
  if (bench === undefined) return;
  const { dir, topo } = bench;
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
    await endNamespaceBench(bench);
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
