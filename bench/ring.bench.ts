// The ring engine's own cost (#19 item 1): CPU per forwarded 64-byte frame of a
// bare JavaScript bridge over two ring ports (judging nothing: every frame
// passes), beside the Linux kernel bridge, in the same run, on the inline
// topology of the namespace benchmarks (A (a0) --- (ga) G (gb) --- (b0) B).
// Not the full `bench -- inline` comparison (a later step of #19): no rules, no
// daemon, no iperf3.
//
// The traffic: a sender process in A (itself a ring port: one sendmmsg per
// millisecond of a fixed rate) sends 60-byte UDP frames (64 on the wire with
// the FCS) to B, where a ring port counts what arrives. The kernel bridge's
// work is done in softirq context and charged to the sender (veth delivers on
// the sending CPU), so its cost is read as the sender's extra CPU per frame
// over the ring path's sender (whose frames stop at ga's ring); the ring
// bridge's cost is its own process CPU (its sendmmsg delivers to B on its
// CPU, the same work the kernel bridge's sender pays). Both exclude B.
//
// Knobs: MOAT_BENCH_RING_SECONDS (default 5), MOAT_BENCH_RING_PPS (default 50000).

import { resolve, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ip, nodeIn, type GatewayTopology, type NsProcess } from '../test/support/netns.js';
import { buildFrame } from '../test/support/packet-builder.js';
import { REPO, endNamespaceBench, f0, f2, sleep, startNamespaceBench } from './namespace-harness.js';

const PORT_MODULE = JSON.stringify(join(REPO, 'dist/src/capture/ring-port.js'));

/** Prints one JSON line when its stdin says "report": CPU seconds used since "start", and counts. */
const REPORTER = `
let cpu0 = process.cpuUsage();
const cpu = () => { const c = process.cpuUsage(cpu0); return (c.user + c.system) / 1e6; };
process.stdin.setEncoding('utf8').on('data', (d) => {
  if (d.includes('start')) cpu0 = process.cpuUsage();
  if (d.includes('report')) console.log(JSON.stringify({ cpu: cpu(), ...counts() }));
});
`;

function bridgeScript(topo: GatewayTopology): string {
  return `import { openRingPort } from ${PORT_MODULE};
const ga = openRingPort(${JSON.stringify(topo.gateway.portA)}, {});
const gb = openRingPort(${JSON.stringify(topo.gateway.portB)}, {});
ga.onBatch((b) => { b.pass.fill(1, 0, b.count); gb.forward(b); });
gb.onBatch((b) => { b.pass.fill(1, 0, b.count); ga.forward(b); });
const counts = () => ({ forwarded: ga.stats().sent + gb.stats().sent, drops: ga.stats().ringDrops + gb.stats().ringDrops });
${REPORTER}
console.log(JSON.stringify({ ready: true }));`;
}

function receiverScript(topo: GatewayTopology): string {
  return `import { openRingPort } from ${PORT_MODULE};
const b0 = openRingPort(${JSON.stringify(topo.b.iface)}, {});
let udp = 0;
b0.onBatch((b) => { for (let i = 0; i < b.count; i++) if (b.bytes[b.offset[i] + 23] === 17) udp++; });
const counts = () => ({ udp, drops: b0.stats().ringDrops });
${REPORTER}
console.log(JSON.stringify({ ready: true }));`;
}

function senderScript(topo: GatewayTopology, frameHex: string, pps: number, seconds: number): string {
  return `import { openRingPort } from ${PORT_MODULE};
const a0 = openRingPort(${JSON.stringify(topo.a.iface)}, {});
const frame = Buffer.from(${JSON.stringify(frameHex)}, 'hex');
const perMs = ${Math.round(pps / 1000)};
const bytes = new Uint8Array(frame.length * perMs);
const offset = new Uint32Array(perMs), caplen = new Uint32Array(perMs);
for (let i = 0; i < perMs; i++) { bytes.set(frame, i * frame.length); offset[i] = i * frame.length; caplen[i] = frame.length; }
const batch = { bytes, count: perMs, offset, caplen, origLen: caplen, pass: new Uint8Array(perMs).fill(1) };
let sent = 0;
const counts = () => ({ sent });
${REPORTER}
console.log(JSON.stringify({ ready: true }));
process.stdin.on('data', (d) => {
  if (!d.includes('go')) return;
  const t0 = performance.now();
  let ticks = 0;
  const tick = () => {
    // Catch up on the milliseconds elapsed, so the rate holds when a timer fires late.
    const due = Math.floor(performance.now() - t0);
    while (ticks < due && ticks < ${seconds * 1000}) { sent += a0.forward(batch); ticks++; }
    if (ticks < ${seconds * 1000}) setTimeout(tick, 1);
    else console.log(JSON.stringify({ done: true }));
  };
  tick();
});`;
}

interface Report {
  cpu: number;
  [k: string]: number;
}

async function report(p: NsProcess): Promise<Report> {
  const from = p.lines.length;
  p.write('report\n');
  return p.waitForJson<Report>((m) => typeof m.cpu === 'number', 10_000, from);
}

interface PathFigures {
  sent: number;
  atB: number;
  senderUs: number;
  bridgeUs: number;
  bridgeDrops: number;
}

async function runPath(topo: GatewayTopology, frameHex: string, pps: number, seconds: number, bridge: NsProcess | undefined): Promise<PathFigures> {
  const receiver = nodeIn(topo.b.ns, receiverScript(topo));
  const sender = nodeIn(topo.a.ns, senderScript(topo, frameHex, pps, seconds));
  await receiver.waitForJson((m) => m.ready === true, 30_000);
  await sender.waitForJson((m) => m.ready === true, 30_000);
  await sleep(300);
  for (const p of [receiver, sender, ...(bridge ? [bridge] : [])]) p.write('start\n');
  const from = sender.lines.length;
  sender.write('go\n');
  await sender.waitForJson((m) => m.done === true, (seconds + 30) * 1000, from);
  await sleep(300);
  const [s, r, br] = [await report(sender), await report(receiver), bridge ? await report(bridge) : undefined];
  await sender.stop();
  await receiver.stop();
  return {
    sent: s.sent!,
    atB: r.udp!,
    senderUs: (s.cpu * 1e6) / s.sent!,
    bridgeUs: br ? (br.cpu * 1e6) / br.forwarded! : NaN,
    bridgeDrops: br?.drops ?? 0,
  };
}

/** CPU per forwarded 64-byte frame: a bare JS bridge on ring ports vs the kernel bridge, same run. */
export async function runRingBench(): Promise<void> {
  const seconds = Number(process.env.MOAT_BENCH_RING_SECONDS ?? 5);
  const pps = Number(process.env.MOAT_BENCH_RING_PPS ?? 50_000);
  const bench = await startNamespaceBench(`\n## Ring engine: bare JS bridge on ring ports vs kernel bridge (${f0(pps)} pps of 64-byte frames, ${seconds} s)`, 'moat-bench-ring-');
  if (bench === undefined) return;
  const { topo } = bench;
  const frameHex = Buffer.from(
    buildFrame({
      ethSrc: topo.a.mac,
      ethDst: topo.b.mac,
      ip: { version: 4, src: topo.a.ipv4, dst: topo.b.ipv4, ttl: 64 },
      l4: { kind: 'udp', srcPort: 40_000, dstPort: 9, payload: new Uint8Array(18) },
    }),
  ).toString('hex');
  let kernel: PathFigures, ring: PathFigures;
  try {
    const gw = topo.gateway;
    await ip(['-n', gw.ns, 'link', 'add', 'br0', 'type', 'bridge', 'stp_state', '0']);
    await ip(['-n', gw.ns, 'link', 'set', gw.portA, 'master', 'br0']);
    await ip(['-n', gw.ns, 'link', 'set', gw.portB, 'master', 'br0']);
    await ip(['-n', gw.ns, 'link', 'set', 'br0', 'up']);
    kernel = await runPath(topo, frameHex, pps, seconds, undefined);
    await ip(['-n', gw.ns, 'link', 'del', 'br0']);
    const bridge = nodeIn(gw.ns, bridgeScript(topo));
    await bridge.waitForJson((m) => m.ready === true, 30_000);
    ring = await runPath(topo, frameHex, pps, seconds, bridge);
    await bridge.stop();
  } finally {
    await endNamespaceBench(bench);
  }
  const kernelBridgeUs = kernel.senderUs - ring.senderUs;
  console.log(`frame: ${frameHex.length / 2} bytes (64 on the wire); sender: one sendmmsg a millisecond from a ring port in A; receiver: a ring port in B`);
  console.log('  path           sent      at B     sender us/frame   bridge us/frame');
  console.log(`  kernel bridge  ${f0(kernel.sent).padStart(8)}  ${f0(kernel.atB).padStart(8)}  ${f2(kernel.senderUs).padStart(10)}        ${f2(kernelBridgeUs).padStart(6)} (sender's extra over the ring path's sender)`);
  console.log(`  ring + JS      ${f0(ring.sent).padStart(8)}  ${f0(ring.atB).padStart(8)}  ${f2(ring.senderUs).padStart(10)}        ${f2(ring.bridgeUs).padStart(6)} (bridge process; ring drops ${f0(ring.bridgeDrops)})`);
  console.log(`  ring/kernel bridge CPU per frame: ${f2(ring.bridgeUs / kernelBridgeUs)}x`);
}

// `node dist/bench/ring.bench.js` runs it alone.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await runRingBench();
}
