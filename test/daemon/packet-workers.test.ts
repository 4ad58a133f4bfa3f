// Packet workers (PacketWorkers, the compiled dist/src/daemon/packet-worker.js)
// over replay ports (capture files as batched ports): N workers judge as a
// packet path in this thread does, with one address table in shared memory;
// an inline pair forwards what passes and passes the inside port unjudged; a
// swap during traffic is atomic across workers; a bundle one worker cannot
// prepare is rejected for all; a killed worker is restarted alone; the
// counters sum to the frames fed.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildPcap, PcapReader } from '../../src/capture/index.js';
import { PacketWorkers, replayPortOpener, WorkerLoading, type PortSpec } from '../../src/daemon/index.js';
import { BundleLoader, PacketPath, type BundleFiles, type TransferredBundle } from '../../src/engine/index.js';
import { LINKTYPE } from '../../src/packet/index.js';
import { ensureBuilt } from '../support/cli.js';
import { buildFixtureDatabases } from '../support/make-mmdb.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

let dir: string;
const at = (name: string) => join(dir, name);
let loading: WorkerLoading;
const silent = pino({ level: 'silent' });

beforeAll(() => {
  ensureBuilt();
  dir = mkdtempSync(join(tmpdir(), 'moat-packet-workers-'));
  const { country, asn } = buildFixtureDatabases();
  writeFileSync(at('country.mmdb'), country);
  writeFileSync(at('asn.mmdb'), asn);
  writeFileSync(at('bad.txt'), '1.1.1.7\n2001:db8:1::/64\n');
  writeFileSync(at('office.txt'), '198.51.100.0/25\n');
}, 300_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));
// A loader per test, as a daemon has one for its packet workers: its first bundle carries the table, later ones may reuse it.
beforeEach(() => {
  loading = new WorkerLoading(silent);
});
afterEach(() => loading.stop());

function writeRules(name: string, expressions: readonly string[]): string {
  writeFileSync(at(name), JSON.stringify({ phase: 'network_transit', rules: expressions.map((expression, i) => ({ id: `r${i}`, action: 'block', expression })) }));
  return at(name);
}
const filesOf = (rules: string): BundleFiles => ({
  rules: [rules],
  lists: [{ name: 'bad', file: at('bad.txt') }, { name: 'office', file: at('office.txt') }],
  geoip: at('country.mmdb'),
  asn: at('asn.mmdb'),
});
const RULES = ['ip.src.country in {"AU" "DE"} and tcp.dstport == 443', 'ip.src in $bad and tcp.dstport == 22', 'tcp.dstport in {3389 5900}', 'ip.src in $office and ip.proto == "udp"', 'ip.dst.asnum == 13335 and ip.proto == "udp"'];

/** Frames over GeoIP countries, AS numbers, both lists, TCP and UDP, v4 and v6; `salt` varies the mix. */
function frames(salt: number): Uint8Array[] {
  const v4 = ['1.1.1.7', '1.1.1.8', '5.9.1.1', '8.8.8.8', '133.1.2.3', '192.0.2.200', '198.51.100.5', '198.51.100.200', '100.64.0.1'];
  const v6 = ['2001:db8::1', '2001:db8:1::5', '2400:cb00::1', '2a00:1450::9', 'fd00::1'];
  const out: Uint8Array[] = [];
  let k = salt;
  for (const [addrs, version] of [[v4, 4], [v6, 6]] as const) {
    for (const src of addrs) {
      for (const port of [22, 53, 443, 3389, 5900, 8080]) {
        const dst = addrs[(k++ * 7) % addrs.length]!;
        const ip = version === 4 ? { version, src, dst, ttl: 64 } as const : { version, src, dst, hopLimit: 64 } as const;
        out.push(buildFrame({ ip, l4: k % 3 === 0 ? { kind: 'udp', srcPort: 40000 + k, dstPort: port } : { kind: 'tcp', srcPort: 40000 + k, dstPort: port, flags: TCP.SYN } }));
      }
    }
  }
  return out;
}

function writeCapture(name: string, list: readonly Uint8Array[]): string {
  writeFileSync(at(name), buildPcap(list.map((data, i) => ({ data, tsSec: 1_700_000_000 + i }))));
  return at(name);
}

function readFrames(file: string): Buffer[] {
  return readCapture(file).frames;
}

function readCapture(file: string): { frames: Buffer[]; linkType: number; origLens: number[] } {
  const frames: Buffer[] = [];
  const origLens: number[] = [];
  let linkType = -1;
  const r = PcapReader.open(file);
  try {
    while (r.next()) {
      frames.push(Buffer.from(r.data.subarray(r.offset, r.offset + r.caplen)));
      origLens.push(r.origLen);
      if (linkType === -1) linkType = r.linkType;
    }
  } finally {
    r.close();
  }
  return { frames, linkType, origLens };
}

const FIXTURES = new URL('../../native-fixtures/', import.meta.url);
const fixture = (name: string) => fileURLToPath(new URL(name, FIXTURES));

/** A verdict file's lines: [index, passed, hrtime]. */
function verdictLines(file: string): Array<[number, number, bigint]> {
  return readFileSync(file, 'utf8').trim().split('\n').filter((l) => l !== '').map((l) => {
    const [i, p, t] = l.split(' ');
    return [Number(i), Number(p), BigInt(t!)];
  });
}

async function until(what: string, ok: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const opener = () => replayPortOpener(new URL('../../dist/src/daemon/packet-worker.js', import.meta.url));

describe('packet workers', () => {
  it('judge every frame as a packet path in this thread does, N workers over one shared table, and the counters sum to the frames fed', async () => {
    const files = filesOf(writeRules('rules.json', RULES));
    const bundle = await loading.loadTransferred(files);
    const reference = new BundleLoader().load(files);
    // Generated frames, and the native fixtures' Ethernet (IPv4, IPv6, VLAN, extension headers) and Linux cooked captures.
    const caps = [writeCapture('in-0.pcap', frames(0)), writeCapture('in-1.pcap', frames(1)), fixture('pcap-us-le.pcap'), fixture('ipv6-ext.pcap'), fixture('sll.pcap')];
    const N = caps.length;
    const ports = (w: number): PortSpec[] => [{ iface: caps[w]!, judge: true, peer: null, options: { batchMax: 16, verdictFile: at(`v-${w}.txt`) } as PortSpec['options'] }];
    const pw = await PacketWorkers.start({ workers: N, ports, opener: opener(), bundle, log: silent });
    let fed = 0;
    try {
      fed = caps.reduce((n, c) => n + readFrames(c).length, 0);
      await until('every frame judged', () => pw.counters().ports[0]!.path.packets === fed);
      // One table, in shared memory: every worker wraps the same SharedArrayBuffers.
      expect(pw.tables().map((t) => t?.shared)).toEqual([true, true, true, true, true]);
      expect(pw.tables()[0]!.bytes).toBeGreaterThan(100_000);
    } finally {
      await pw.stop();
    }
    const c = pw.counters();
    let drops = 0;
    for (let w = 0; w < N; w++) {
      const path = new PacketPath(reference.evaluator, { table: reference.table });
      const cap = readCapture(caps[w]!);
      const expected = cap.frames.map((f, i) => `${i} ${path.process(f, 0, f.length, cap.origLens[i]!, cap.linkType) ? 0 : 1}`);
      const got = verdictLines(at(`v-${w}.txt`)).map(([i, p]) => `${i} ${p}`);
      expect(got).toEqual(expected);
      drops += expected.filter((v) => v.endsWith(' 0')).length;
      expect(c.workers[w]!.frames).toBe(expected.length);
      expect(c.workers[w]!.ports[0]!.packets).toBe(expected.length);
    }
    // The comparison means something: some frames are dropped, most pass.
    expect(drops).toBeGreaterThan(5);
    expect(drops).toBeLessThan(fed / 2);
    expect([c.ports[0]!.path.packets, c.ports[0]!.path.dropped, c.ports[0]!.path.passed]).toEqual([fed, drops, fed - drops]);
    expect(c.ports[0]!.stats.packets).toBe(fed);
  }, 60_000);

  it('forward what the outside port passes and pass the inside port unjudged, one forward per batch', async () => {
    const bundle = await loading.loadTransferred(filesOf(writeRules('rules.json', RULES)));
    const reference = new BundleLoader().load(filesOf(at('rules.json')));
    const outside = writeCapture('outside.pcap', frames(7));
    // The inside port's frames would be dropped if judged (their sources are in $bad and go to port 22).
    const insideFrames = Array.from({ length: 20 }, (_, i) => buildFrame({ ip: { version: 4, src: '1.1.1.7', dst: '10.0.0.1', ttl: 64 }, l4: { kind: 'tcp', srcPort: 1000 + i, dstPort: 22, flags: TCP.SYN } }));
    const inside = writeCapture('inside.pcap', insideFrames);
    const ports: PortSpec[] = [
      { iface: outside, judge: true, peer: 1, options: { batchMax: 8, forwardFile: at('to-outside.pcap') } as PortSpec['options'] },
      { iface: inside, judge: false, peer: 0, options: { batchMax: 8, forwardFile: at('to-inside.pcap') } as PortSpec['options'] },
    ];
    const pw = await PacketWorkers.start({ workers: 1, ports, opener: opener(), bundle, log: silent });
    const outFrames = readFrames(outside);
    try {
      await until('both ports delivered', () => pw.counters().workers[0]!.frames === outFrames.length + insideFrames.length);
    } finally {
      await pw.stop();
    }
    const path = new PacketPath(reference.evaluator, { table: reference.table });
    const passed = outFrames.filter((f) => !path.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET));
    expect(passed.length).toBeLessThan(outFrames.length);
    expect(readFrames(at('to-inside.pcap')).map((f) => f.toString('hex'))).toEqual(passed.map((f) => f.toString('hex')));
    expect(readFrames(at('to-outside.pcap')).map((f) => f.toString('hex'))).toEqual(insideFrames.map((f) => Buffer.from(f).toString('hex')));
    const c = pw.counters();
    expect([c.ports[0]!.path.packets, c.ports[1]!.path.packets, c.ports[1]!.stats.unjudged]).toEqual([outFrames.length, 0, insideFrames.length]);
    expect([c.ports[1]!.stats.sent, c.ports[0]!.stats.sent]).toEqual([passed.length, insideFrames.length]);
  }, 60_000);

  it('count frames longer than a slot as truncated and never forward them cut', async () => {
    const bundle = await loading.loadTransferred(filesOf(writeRules('rules.json', RULES)));
    const cut = fixture('snaplen-truncated.pcap');
    const cap = readCapture(cut);
    const whole = cap.frames.filter((f, i) => f.length === cap.origLens[i]);
    expect([cap.frames.length, whole.length]).toEqual([4, 2]);
    const ports: PortSpec[] = [
      { iface: cut, judge: false, peer: 1, options: { forwardFile: at('cut-out.pcap') } as PortSpec['options'] },
      { iface: writeCapture('empty-side.pcap', []), judge: true, peer: 0, options: { forwardFile: at('cut-in.pcap') } as PortSpec['options'] },
    ];
    const pw = await PacketWorkers.start({ workers: 1, ports, opener: opener(), bundle, log: silent });
    try {
      await until('the file delivered', () => pw.counters().workers[0]!.frames === 4);
    } finally {
      await pw.stop();
    }
    const c = pw.counters();
    expect([c.ports[0]!.stats.truncated, c.ports[1]!.stats.sent]).toEqual([2, 2]);
    expect(readFrames(at('cut-in.pcap')).map((f) => f.toString('hex'))).toEqual(whole.map((f) => f.toString('hex')));
  }, 60_000);

  it('swap a bundle during traffic atomically: no frame is judged by it before every worker has prepared it', async () => {
    const passAll = await loading.loadTransferred(filesOf(writeRules('pass.json', ['tcp.dstport == 1'])));
    const dropAll = await loading.loadTransferred(filesOf(writeRules('drop.json', ['ip.proto == "tcp"'])));
    const tcpOnly = (w: number) => Array.from({ length: 50 }, (_, i) => buildFrame({ ip: { version: 4, src: `192.0.2.${w + 1}`, dst: '198.18.0.1', ttl: 64 }, l4: { kind: 'tcp', srcPort: 2000 + i, dstPort: 443, flags: TCP.SYN } }));
    const N = 3;
    const caps = Array.from({ length: N }, (_, w) => writeCapture(`tcp-${w}.pcap`, tcpOnly(w)));
    const ports = (w: number): PortSpec[] => [{ iface: caps[w]!, judge: true, peer: null, options: { batchMax: 4, intervalMs: 1, repeat: 80, verdictFile: at(`swap-${w}.txt`) } as PortSpec['options'] }];
    // Worker 2 prepares 300 ms later than the others: the others must wait for it before judging with the new bundle.
    const pw = await PacketWorkers.start({ workers: N, ports, opener: opener(), bundle: passAll, log: silent, slowPrepare: { worker: 2, ms: 300 } });
    const total = N * 50 * 80;
    let outcome;
    try {
      await until('traffic on every worker', () => pw.counters().workers.every((w) => w.frames > 100));
      outcome = await pw.swap(dropAll);
      expect(outcome.ok).toBe(true);
      await until('every frame judged', () => pw.counters().ports[0]!.path.packets === total);
    } finally {
      await pw.stop();
    }
    if (!outcome.ok) throw outcome.error;
    const lastPrepared = outcome.preparedAt.reduce((a, b) => (a > b ? a : b));
    expect(outcome.preparedAt).toHaveLength(N);
    for (let w = 0; w < N; w++) {
      const lines = verdictLines(at(`swap-${w}.txt`));
      const firstDrop = lines.findIndex(([, p]) => p === 0);
      // Each worker judged with the old bundle, then the new, never back.
      expect(firstDrop).toBeGreaterThan(0);
      expect(lines.slice(0, firstDrop).every(([, p]) => p === 1)).toBe(true);
      expect(lines.slice(firstDrop).every(([, p]) => p === 0)).toBe(true);
      // No frame judged by the new bundle before the last worker had prepared it.
      expect(lines[firstDrop]![2] > lastPrepared).toBe(true);
      // The old bundle judged on meanwhile: the workers that were ready early kept judging with it until the flip.
      expect(lines[firstDrop - 1]![2] > outcome.preparedAt[w]! || w === 2).toBe(true);
    }
    expect(pw.counters().workers.map((w) => w.gen)).toEqual([2, 2, 2]);
    expect(pw.counters().ports[0]!.path.dropped + pw.counters().ports[0]!.path.passed).toBe(total);
    // The swap's steps on each worker's loop: functions made, paths built, warm-up slices, none long.
    for (const cost of outcome.costs) expect(cost.longestSliceMs).toBeLessThan(50);
  }, 60_000);

  it("measure each worker's longest packet-loop pause: a prepare that blocks one worker's loop 60 ms shows there, not on the other, and a reset starts a new window", async () => {
    const passAll = await loading.loadTransferred(filesOf(writeRules('pass.json', ['tcp.dstport == 1'])));
    const dropAll = await loading.loadTransferred(filesOf(writeRules('drop.json', ['ip.proto == "tcp"'])));
    const caps = Array.from({ length: 2 }, (_, w) => writeCapture(`gap-${w}.pcap`, frames(w).slice(0, 40)));
    // A batch every ~1 ms on each worker for the whole test (repeat: far more than it runs).
    const ports = (w: number): PortSpec[] => [{ iface: caps[w]!, judge: true, peer: null, options: { batchMax: 4, intervalMs: 1, repeat: 1_000_000 } as PortSpec['options'] }];
    const pw = await PacketWorkers.start({ workers: 2, ports, opener: opener(), bundle: passAll, log: silent, stallPrepare: { worker: 1, ms: 60 } });
    try {
      await until('traffic', () => pw.counters().workers.every((w) => w.frames > 100));
      pw.resetPauses();
      expect(pw.counters().workers.map((w) => [w.longestGapMs, w.longestStepMs])).toEqual([[0, 0], [0, 0]]);
      const outcome = await pw.swap(dropAll);
      expect(outcome.ok).toBe(true);
      const after = pw.counters().workers[1]!.batches;
      await until('batches after the swap', () => pw.counters().workers[1]!.batches > after + 5);
      const [w0, w1] = pw.counters().workers;
      // The stalled worker: no batch for the 60 ms its loop was blocked (a stall outside the prepare's timed steps:
      // longestStepMs does not see it, the gap does).
      expect(w1!.longestGapMs).toBeGreaterThanOrEqual(60);
      expect(w1!.longestStepMs).toBeLessThan(60);
      // The other one prepared without blocking: its batches kept coming (a shared machine may pause it, not 60 ms).
      expect(w0!.longestGapMs).toBeGreaterThan(0);
      expect(w0!.longestGapMs).toBeLessThan(60);
      pw.resetPauses();
      const batches = pw.counters().workers[1]!.batches;
      await until('batches in the new window', () => pw.counters().workers[1]!.batches > batches + 20);
      // A new window without a swap: the 60 ms is gone, the paced batches' gaps remain (about 1 ms each).
      expect(pw.counters().workers[1]!.longestGapMs).toBeGreaterThan(0);
      expect(pw.counters().workers[1]!.longestGapMs).toBeLessThan(60);
      expect(pw.counters().workers[1]!.longestStepMs).toBe(0);
    } finally {
      await pw.stop();
    }
  }, 60_000);

  it('reject for every worker a bundle one worker cannot prepare: the running bundle stays everywhere', async () => {
    const passAll = await loading.loadTransferred(filesOf(writeRules('pass.json', ['tcp.dstport == 1'])));
    const dropAll = await loading.loadTransferred(filesOf(writeRules('drop.json', ['ip.proto == "tcp"'])));
    const caps = Array.from({ length: 3 }, (_, w) => writeCapture(`fail-${w}.pcap`, frames(w).slice(0, 40)));
    const ports = (w: number): PortSpec[] => [{ iface: caps[w]!, judge: true, peer: null, options: { batchMax: 4, intervalMs: 2, repeat: 20 } as PortSpec['options'] }];
    const pw = await PacketWorkers.start({ workers: 3, ports, opener: opener(), bundle: passAll, log: silent, failPrepareIn: [1] });
    try {
      await until('traffic', () => pw.counters().workers.every((w) => w.frames > 20));
      const outcome = await pw.swap(dropAll);
      expect(outcome.ok).toBe(false);
      if (outcome.ok) return;
      expect([outcome.worker, outcome.error.message]).toEqual([1, 'packet worker 1 was told to fail this prepare (a test)']);
      expect(pw.generation).toBe(1);
      const before = pw.counters().workers.map((w) => w.frames);
      await until('more traffic', () => pw.counters().workers.every((w, i) => w.frames > before[i]! + 40));
      // Still the passing bundle everywhere: nothing dropped.
      expect(pw.counters().ports[0]!.path.dropped).toBe(0);
      expect(pw.counters().workers.map((w) => w.gen)).toEqual([1, 1, 1]);
    } finally {
      await pw.stop();
    }
  }, 60_000);

  it('restart a killed worker alone, with the bundle in force, its counters kept; and swap after it (a bundle that reuses the table)', async () => {
    const passAll = await loading.loadTransferred(filesOf(writeRules('pass.json', ['tcp.dstport == 1'])));
    const lines: string[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(s) });
    const caps = Array.from({ length: 2 }, (_, w) => writeCapture(`kill-${w}.pcap`, frames(w).slice(0, 40)));
    const ports = (w: number): PortSpec[] => [{ iface: caps[w]!, judge: true, peer: null, options: { batchMax: 4, intervalMs: 2, repeat: 1000 } as PortSpec['options'] }];
    const pw = await PacketWorkers.start({ workers: 2, ports, opener: opener(), bundle: passAll, log });
    try {
      await until('traffic', () => pw.counters().workers.every((w) => w.frames > 20));
      const other = pw.thread(0);
      const judgedBefore = pw.counters().ports[0]!.path.packets;
      await pw.thread(1)!.terminate();
      await until('worker 1 restarted', () => pw.counters().workers[1]!.restarts === 1 && pw.thread(1) !== undefined);
      expect(pw.thread(0)).toBe(other);
      expect(lines.some((l) => l.includes('packet worker 1 stopped') && l.includes('"code":6009'))).toBe(true);
      const w1 = pw.counters().workers[1]!.frames;
      await until('the new worker 1 judges', () => pw.counters().workers[1]!.frames > w1 + 40);
      expect(pw.counters().ports[0]!.path.packets).toBeGreaterThan(judgedBefore);
      // A rules-only change: the loader reuses the table and does not send it; the restarted worker still has it.
      const dropTcp: TransferredBundle = await loading.loadTransferred(filesOf(writeRules('drop.json', ['ip.proto == "tcp"'])));
      expect(dropTcp.table).toBeNull();
      const outcome = await pw.swap(dropTcp);
      expect(outcome.ok).toBe(true);
      const dropped = pw.counters().ports[0]!.path.dropped;
      await until('both workers drop', () => pw.counters().workers.every((w) => w.gen === 2) && pw.counters().ports[0]!.path.dropped > dropped + 40);
    } finally {
      await pw.stop();
    }
  }, 60_000);
});
