// Test support: a program run inside a network namespace (nodeIn) that drives
// ring-engine ports (src/capture/ring-port.ts) on the test's behalf. A port
// captures in the namespace of the process that opens it, so the tests talk
// to one agent per namespace through JSON lines: commands on stdin (each with
// a `seq`), replies and link events on stdout. See test/capture/ring-port*.test.ts.
//
// The agent sends with the port under test too (forward() of a batch built
// from the frames the test gave): the frames compared byte for byte on the far
// side are the test's own, built by test/support/packet-builder.ts.

import { Worker } from 'node:worker_threads';
import { openRingPort, ringLivePorts } from '../../src/capture/ring-port.js';
import type { BatchPort, BatchPortOptions, FrameBatch } from '../../src/capture/batch-port.js';

/** The test frames' EtherType (IEEE 802 local experimental 1): nothing else on the link uses it. */
export const TEST_ETHERTYPE = 0x88b5;

interface Command {
  seq: number;
  op: string;
  [key: string]: unknown;
}

interface Received {
  hex: string;
  caplen: number;
  origLen: number;
}

interface Slot {
  port: BatchPort;
  frames: Received[];
  batches: number[];
  collect: boolean;
  judged: number;
}

const ports = new Map<string, Slot>();

function say(msg: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

function hexToBytes(hex: string): Uint8Array {
  return Uint8Array.from(Buffer.from(hex, 'hex'));
}

/** Frames to record: the test EtherType, IPv4 (the fanout test's UDP flows) or 802.1Q-tagged. */
function wanted(bytes: Uint8Array, off: number): boolean {
  const type = (bytes[off + 12]! << 8) | bytes[off + 13]!;
  return type === TEST_ETHERTYPE || type === 0x0800 || type === 0x8100;
}

function record(slot: Slot, b: FrameBatch): void {
  slot.batches.push(b.count);
  for (let i = 0; i < b.count; i++) {
    const off = b.offset[i]!;
    if (!wanted(b.bytes, off)) continue;
    slot.frames.push({
      hex: Buffer.from(b.bytes.buffer, b.bytes.byteOffset + off, b.caplen[i]!).toString('hex'),
      caplen: b.caplen[i]!,
      origLen: b.origLen[i]!,
    });
  }
}

/** A batch over frames given by the test, as a port would deliver it, to send with forward(). */
function batchOf(frames: Uint8Array[]): FrameBatch {
  const total = frames.reduce((s, f) => s + f.length, 0);
  const bytes = new Uint8Array(total);
  const offset = new Uint32Array(frames.length);
  const caplen = new Uint32Array(frames.length);
  let at = 0;
  frames.forEach((f, i) => {
    bytes.set(f, at);
    offset[i] = at;
    caplen[i] = f.length;
    at += f.length;
  });
  return { bytes, count: frames.length, offset, caplen, origLen: caplen.slice(), pass: new Uint8Array(frames.length).fill(1) };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function slotOf(id: unknown): Slot {
  const slot = ports.get(String(id));
  if (slot === undefined) throw new Error(`no port ${String(id)}`);
  return slot;
}

/** The worker_threads program: its own port (its own addon instance), counting test frames. */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
import(workerData.portModule).then(({ openRingPort, ringLivePorts }) => {
  const port = openRingPort(workerData.iface, { ringBytes: 1 << 20 });
  let count = 0;
  port.onBatch((b) => {
    for (let i = 0; i < b.count; i++) if (((b.bytes[b.offset[i] + 12] << 8) | b.bytes[b.offset[i] + 13]) === ${TEST_ETHERTYPE}) count++;
  });
  parentPort.postMessage({ ready: true });
  parentPort.on('message', (m) => {
    if (m === 'report') {
      const live = ringLivePorts();
      if (!workerData.leaveOpen) port.close();
      parentPort.postMessage({ count, live, liveAfterClose: ringLivePorts() });
    }
  });
});
`;

async function runWorkers(cmd: Command): Promise<Record<string, unknown>> {
  const n = Number(cmd.n);
  const workers: Worker[] = [];
  const messages: Record<string, unknown>[][] = [];
  // Worker threads do not inherit the TypeScript loader: they run the build (npm run build first).
  const portModule = new URL('../../dist/src/capture/ring-port.js', import.meta.url).href;
  for (let i = 0; i < n; i++) {
    // leaveOpen: the second worker ends with its port open (closed by the addon's cleanup hook).
    const w = new Worker(WORKER_SOURCE, { eval: true, workerData: { iface: cmd.iface, portModule, leaveOpen: cmd.leaveOpen === true && i === 1 } });
    workers.push(w);
    messages.push([]);
    w.on('message', (m: Record<string, unknown>) => messages[i]!.push(m));
    w.on('error', (err) => messages[i]!.push({ error: String(err) }));
  }
  const until = async (test: () => boolean): Promise<void> => {
    for (let t = 0; t < 300 && !test(); t++) await sleep(50);
  };
  await until(() => messages.every((m) => m.length >= 1));
  say({ op: 'workers-ready', seq: cmd.seq, messages });
  // The test now sends its frames, then writes {op: 'workers-report'}.
  await new Promise<void>((resolve) => (pendingReport = resolve));
  for (const w of workers) w.postMessage('report');
  await until(() => messages.every((m) => m.length >= 2));
  const exits = await Promise.all(workers.map((w) => w.terminate()));
  return { reports: messages.map((m) => m[1]), messages, exits, mainLive: ringLivePorts() };
}

let pendingReport: (() => void) | undefined;

async function handle(cmd: Command): Promise<Record<string, unknown>> {
  switch (cmd.op) {
    case 'open': {
      const id = String(cmd.id);
      const port = openRingPort(String(cmd.iface), (cmd.options ?? {}) as BatchPortOptions);
      const slot: Slot = { port, frames: [], batches: [], collect: cmd.collect !== false, judged: 0 };
      ports.set(id, slot);
      port.onBatch((b) => {
        if (slot.collect) record(slot, b);
        if (cmd.throwing === true) throw new Error('handler failure on purpose');
      });
      port.onLink((state, reason) => say({ op: 'link', id, state, reason, at: Date.now() }));
      return { link: port.stats().link };
    }
    case 'bridge': {
      // from -> to, passing the test frames whose byte 18 (after dst, src, type and a 4-byte sequence) is even;
      // rule 'even-set-only' writes pass[i] = 1 for those and never writes a 0 (the port hands pass[] zeroed).
      const from = slotOf(cmd.from);
      const to = slotOf(cmd.to);
      from.port.onBatch((b) => {
        for (let i = 0; i < b.count; i++) {
          const off = b.offset[i]!;
          const type = (b.bytes[off + 12]! << 8) | b.bytes[off + 13]!;
          const even = type === TEST_ETHERTYPE && b.bytes[off + 18]! % 2 === 0;
          if (cmd.rule === 'even-set-only') {
            if (even) b.pass[i] = 1;
          } else b.pass[i] = cmd.rule === 'all' || even ? 1 : 0;
          if (type === TEST_ETHERTYPE) from.judged++;
        }
        if (from.collect) record(from, b);
        to.port.forward(b);
      });
      return {};
    }
    case 'send': {
      const slot = slotOf(cmd.id);
      const frames = (cmd.frames as string[]).map(hexToBytes);
      const chunk = Number(cmd.chunk ?? 64);
      const pauseMs = Number(cmd.pauseMs ?? 0);
      let sent = 0;
      for (let i = 0; i < frames.length; i += chunk) {
        sent += slot.port.forward(batchOf(frames.slice(i, i + chunk)));
        if (pauseMs > 0) await sleep(pauseMs);
      }
      return { sent };
    }
    case 'take': {
      const slot = slotOf(cmd.id);
      const out = { frames: slot.frames, batches: slot.batches, judged: slot.judged };
      slot.frames = [];
      slot.batches = [];
      return out;
    }
    case 'stats':
      return { stats: slotOf(cmd.id).port.stats() };
    case 'block': {
      // Keeps the event loop busy: the ports do not drain their rings meanwhile.
      const end = Date.now() + Number(cmd.ms);
      while (Date.now() < end) {
        // busy
      }
      return {};
    }
    case 'close': {
      const slot = slotOf(cmd.id);
      slot.port.close();
      slot.port.close(); // idempotent
      ports.delete(String(cmd.id));
      return { live: ringLivePorts() };
    }
    case 'live':
      return { live: ringLivePorts() };
    case 'workers':
      return runWorkers(cmd);
    case 'workers-report':
      pendingReport?.();
      return {};
    case 'gc-cycles': {
      // Open and close ports many times, keeping views of their rings past close
      // and collecting garbage in between: views must read as empty (detached),
      // never as unmapped memory.
      const gc = (globalThis as { gc?: () => void }).gc;
      if (gc === undefined) throw new Error('run with --expose-gc');
      const kept: Uint8Array[] = [];
      for (let i = 0; i < Number(cmd.n); i++) {
        const port = openRingPort(String(cmd.iface), { ringBytes: 1 << 20 });
        let view: Uint8Array | undefined;
        port.onBatch((b) => {
          view ??= b.bytes;
        });
        await sleep(Number(cmd.waitMs ?? 20));
        if (view !== undefined) kept.push(view);
        port.close();
        gc();
      }
      await sleep(50);
      gc();
      return { keptViews: kept.length, keptLengths: [...new Set(kept.map((v) => v.length))], live: ringLivePorts() };
    }
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

/** Reads commands from stdin until it closes. */
export function runRingAgent(): void {
  let pending = '';
  process.stdin.setEncoding('utf8').on('data', (chunk: string) => {
    pending += chunk;
    for (let i; (i = pending.indexOf('\n')) >= 0; ) {
      const line = pending.slice(0, i);
      pending = pending.slice(i + 1);
      if (line.trim() === '') continue;
      const cmd = JSON.parse(line) as Command;
      handle(cmd).then(
        (reply) => say({ ...reply, op: cmd.op, seq: cmd.seq, ok: true }),
        (err: unknown) => {
          const e = err as { code?: unknown; message?: unknown };
          say({ op: cmd.op, seq: cmd.seq, ok: false, error: { code: e.code, message: String(e.message) } });
        },
      );
    }
  });
  say({ op: 'hello' });
}
