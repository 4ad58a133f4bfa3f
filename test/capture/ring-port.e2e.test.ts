// The ring engine's batched ports (src/capture/ring-port.ts and its addon
// src/capture/ring/moat-ring.c), end to end in network namespaces:
//   (a0) A --- (ga) G (gb) --- (b0) B
// G has no addresses and no forwarding: frames cross it only when the test's
// bridge, built on two ring ports, forwards them. One agent program per
// namespace (test/support/ring-agent.ts) opens the ports and reports what they
// saw. The veths carry MTU 9000 (for the oversized-frame test) and no IPv6 (no
// stray neighbour discovery). Needs root: skipped otherwise, except under CI=true.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  addVethPair,
  createNamespace,
  destroyAll,
  ip,
  linkUp,
  nodeIn,
  projectUrl,
  requireRoot,
  setSysctl,
  type NsProcess,
} from '../support/netns.js';
import { buildFrame } from '../support/packet-builder.js';

const canRun = requireRoot(['setpriv']);
const AGENT = `import { runRingAgent } from ${JSON.stringify(projectUrl('test/support/ring-agent.ts'))}; runRingAgent();`;

/** BatchPortStats as JSON. */
interface PortStats {
  packets: number;
  bytes: number;
  ringDrops: number;
  truncated: number;
  batches: number;
  sent: number;
  sendErrors: number;
  lastSendError?: string;
  link: 'up' | 'down';
}
type Reply = Record<string, unknown> & { ok: boolean; seq: number; error?: { code: unknown; message: string } };
interface Frame {
  hex: string;
  caplen: number;
  origLen: number;
}

/** One agent in a namespace. */
class Agent {
  private seq = 0;
  constructor(readonly proc: NsProcess) {}
  static async start(ns: string, nodeArgs: string[] = []): Promise<Agent> {
    const proc = nodeIn(ns, AGENT, { nodeArgs });
    await proc.waitForJson((m: { op?: string }) => m.op === 'hello', 30_000);
    return new Agent(proc);
  }
  /** Sends a command; with wait false, returns the promise of its reply without awaiting it. */
  async call(op: string, args: Record<string, unknown> = {}, timeoutMs = 20_000): Promise<Reply> {
    const seq = ++this.seq;
    const from = this.proc.lines.length;
    this.proc.write(`${JSON.stringify({ ...args, op, seq })}\n`);
    const reply = await this.proc.waitForJson<Reply>((m) => m.seq === seq && m.op === op, timeoutMs, from);
    if (!reply.ok) throw new Error(`agent ${op} failed: ${JSON.stringify(reply.error)}\n${this.proc.stderr}`);
    return reply;
  }
  async frames(id: string): Promise<Frame[]> {
    return (await this.call('take', { id })).frames as Frame[];
  }
  async stats(id: string): Promise<PortStats> {
    return (await this.call('stats', { id })).stats as PortStats;
  }
  linkEvents(id: string): { state: string; reason: string }[] {
    return this.proc.lines
      .filter((l) => l.startsWith('{"op":"link"'))
      .map((l) => JSON.parse(l) as { id: string; state: string; reason: string })
      .filter((e) => e.id === id);
  }
}

/** A test frame: EtherType 0x88b5, a 4-byte sequence number, a marker byte, then a pattern up to `size` bytes. */
function testFrame(seq: number, marker: number, size = 60): string {
  const f = Buffer.alloc(size);
  Buffer.from('020000000002020000000001', 'hex').copy(f, 0);
  f.writeUInt16BE(0x88b5, 12);
  f.writeUInt32BE(seq, 14);
  f[18] = marker;
  for (let i = 19; i < size; i++) f[i] = (i * 7 + seq) & 0xff;
  return f.toString('hex');
}
const seqOf = (hex: string): number => Buffer.from(hex, 'hex').readUInt32BE(14);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until(test: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await test())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(50);
  }
}

describe.runIf(canRun)('ring ports between network namespaces', () => {
  let A: string, G: string, B: string;
  let a: Agent, g: Agent, b: Agent;

  async function wire(nsX: string, ifX: string, nsY: string, ifY: string): Promise<void> {
    await addVethPair(nsX, ifX, nsY, ifY);
    for (const [ns, iface] of [
      [nsX, ifX],
      [nsY, ifY],
    ] as const) {
      await ip(['-n', ns, 'link', 'set', iface, 'mtu', '9000']);
      await linkUp(ns, iface);
    }
  }

  beforeAll(async () => {
    [A, G, B] = [await createNamespace(), await createNamespace(), await createNamespace()];
    for (const ns of [A, G, B]) {
      await setSysctl(ns, 'net.ipv6.conf.all.disable_ipv6', 1);
      await setSysctl(ns, 'net.ipv6.conf.default.disable_ipv6', 1);
    }
    await wire(A, 'a0', G, 'ga');
    await wire(G, 'gb', B, 'b0');
    [a, g, b] = await Promise.all([Agent.start(A), Agent.start(G), Agent.start(B)]);
    await a.call('open', { id: 'a', iface: 'a0', options: { ringBytes: 1 << 20 } });
    await b.call('open', { id: 'b', iface: 'b0', options: { ringBytes: 1 << 20 } });
  }, 90_000);

  afterAll(async () => {
    await destroyAll();
  }, 30_000);

  it('receives the frames sent into a veth whole and byte-exact, in order, in batches of at most batchMax', async () => {
    await g.call('open', { id: 'rx', iface: 'ga', options: { ringBytes: 1 << 20, batchMax: 16 } });
    const sizes = [60, 61, 64, 128, 500, 1000, 1514, 1518, 1900];
    const sent = Array.from({ length: 180 }, (_, i) => testFrame(i, i & 0xff, sizes[i % sizes.length]));
    expect((await a.call('send', { id: 'a', frames: sent, chunk: 60 })).sent).toBe(180);
    await until(async () => (await g.stats('rx')).packets === 180);
    const take = await g.call('take', { id: 'rx' });
    const got = take.frames as Frame[];
    expect(got.map((f) => f.hex)).toEqual(sent);
    expect(got.every((f) => f.caplen === f.origLen)).toBe(true);
    const batches = take.batches as number[];
    expect(batches.reduce((s, n) => s + n, 0)).toBe(180);
    expect(Math.max(...batches)).toBeLessThanOrEqual(16);
    expect(batches.length).toBeGreaterThanOrEqual(12); // 180 frames / 16
    await g.call('close', { id: 'rx' });
  }, 60_000);

  it('forwards the frames its JavaScript passes out of the other port, byte-exact, and only those', async () => {
    await g.call('open', { id: 'ga', iface: 'ga', options: { ringBytes: 1 << 20 } });
    await g.call('open', { id: 'gb', iface: 'gb', options: { ringBytes: 1 << 20 } });
    await g.call('bridge', { from: 'ga', to: 'gb', rule: 'even' });
    await b.frames('b');
    const sent = Array.from({ length: 100 }, (_, i) => testFrame(1000 + i, i, 60 + i * 9));
    await a.call('send', { id: 'a', frames: sent, chunk: 25 });
    const even = sent.filter((_, i) => i % 2 === 0);
    let got: Frame[] = [];
    await until(async () => {
      got = got.concat(await b.frames('b'));
      return got.length >= 50;
    });
    await sleep(300); // nothing odd arrives late
    got = got.concat(await b.frames('b'));
    expect(got.map((f) => f.hex)).toEqual(even);
    expect((await g.call('take', { id: 'ga' })).judged).toBe(100);
    const gbStats = await g.stats('gb');
    expect(gbStats.sent).toBe(50);
    expect(gbStats.sendErrors).toBe(0);
    await g.call('close', { id: 'ga' });
    await g.call('close', { id: 'gb' });
  }, 60_000);

  it('hands every batch with pass[] all 0: a handler that only sets the frames it passes forwards exactly those', async () => {
    // pass[] lives in the port's native memory and is reused batch after batch: a 1 left by
    // an earlier batch would forward an odd frame here. Frames alternate odd and even, sent
    // in chunks of 7 so that batches start at both parities.
    await g.call('open', { id: 'ga', iface: 'ga', options: { ringBytes: 1 << 20, batchMax: 8 } });
    await g.call('open', { id: 'gb', iface: 'gb', options: { ringBytes: 1 << 20 } });
    await g.call('bridge', { from: 'ga', to: 'gb', rule: 'even-set-only' });
    await b.frames('b');
    const sent = Array.from({ length: 140 }, (_, i) => testFrame(3000 + i, i));
    await a.call('send', { id: 'a', frames: sent, chunk: 7 });
    const even = sent.filter((_, i) => i % 2 === 0);
    let got: Frame[] = [];
    await until(async () => {
      got = got.concat(await b.frames('b'));
      return got.length >= 70;
    });
    await sleep(300); // nothing odd arrives late
    got = got.concat(await b.frames('b'));
    expect(got.map((f) => f.hex)).toEqual(even);
    expect((await g.stats('ga')).batches).toBeGreaterThanOrEqual(18); // 140 frames / batchMax 8: several batches
    expect((await g.stats('gb')).sent).toBe(70);
    await g.call('close', { id: 'ga' });
    await g.call('close', { id: 'gb' });
  }, 60_000);

  it('never reads back what a port sends (PACKET_IGNORE_OUTGOING): a two-way bridge does not loop', async () => {
    // Sends with PACKET_QDISC_BYPASS skip the taps of every packet socket; without it, the
    // sender's own port (ignoreOutgoing) must still not see them, while a port that reads
    // outgoing frames (the control showing the option matters) sees them all.
    await a.call('open', { id: 'a-queued', iface: 'a0', options: { ringBytes: 1 << 20, qdiscBypass: false } });
    await a.call('open', { id: 'a-sees-out', iface: 'a0', options: { ringBytes: 1 << 20, ignoreOutgoing: false } });
    await g.call('open', { id: 'ga', iface: 'ga', options: { ringBytes: 1 << 20 } });
    await g.call('open', { id: 'gb', iface: 'gb', options: { ringBytes: 1 << 20 } });
    await g.call('bridge', { from: 'ga', to: 'gb', rule: 'all' });
    await g.call('bridge', { from: 'gb', to: 'ga', rule: 'all' });
    for (const id of ['a', 'a-queued', 'a-sees-out']) await a.frames(id);
    await b.frames('b');
    const sent = Array.from({ length: 20 }, (_, i) => testFrame(2000 + i, i));
    expect((await a.call('send', { id: 'a-queued', frames: sent })).sent).toBe(20);
    await until(async () => (await b.stats('b')).packets >= 20);
    await sleep(500);
    expect((await b.frames('b')).map((f) => f.hex)).toEqual(sent);
    expect(await a.frames('a-queued')).toEqual([]); // the sender's own port: nothing back
    expect(await a.frames('a')).toEqual([]);
    expect((await a.frames('a-sees-out')).map((f) => f.hex)).toEqual(sent);
    // The bridge: ga read 20 and gb sent 20, and gb never read them back to send them again.
    expect((await g.stats('ga')).packets).toBe(20);
    expect((await g.stats('gb')).packets).toBe(0);
    expect((await g.stats('gb')).sent).toBe(20);
    expect((await g.stats('ga')).sent).toBe(0);
    for (const id of ['ga', 'gb']) await g.call('close', { id });
    for (const id of ['a-queued', 'a-sees-out']) await a.call('close', { id });
  }, 60_000);

  it('gives 802.1Q-tagged frames with their tag in place (the kernel takes it off into metadata) and forwards them tagged', async () => {
    await g.call('open', { id: 'ga', iface: 'ga', options: { ringBytes: 1 << 20 } });
    await g.call('open', { id: 'gb', iface: 'gb', options: { ringBytes: 1 << 20 } });
    await g.call('bridge', { from: 'ga', to: 'gb', rule: 'all' });
    await b.frames('b');
    /** dst, src, 0x8100, TCI (priority 5, VLAN 42), then a test frame's EtherType and body. */
    const tagged = (seq: number): string => {
      const inner = Buffer.from(testFrame(seq, 0, 80), 'hex');
      return Buffer.concat([inner.subarray(0, 12), Buffer.from([0x81, 0x00, 0xa0, 42]), inner.subarray(12)]).toString('hex');
    };
    const sent = [tagged(11_000), testFrame(11_001, 0), tagged(11_002)];
    await a.call('send', { id: 'a', frames: sent });
    await until(async () => (await g.stats('ga')).packets >= 3);
    expect((await g.frames('ga')).map((f) => [f.hex, f.caplen, f.origLen])).toEqual(sent.map((h) => [h, h.length / 2, h.length / 2]));
    await until(async () => (await b.stats('b')).packets >= 3);
    expect((await b.frames('b')).map((f) => f.hex)).toEqual(sent);
    await g.call('close', { id: 'ga' });
    await g.call('close', { id: 'gb' });
  }, 60_000);

  it('wraps around its ring: ten times its slots at a paced rate, nothing lost, order kept', async () => {
    // 64 KiB of 2 KiB slots: 32 slots.
    await g.call('open', { id: 'rx', iface: 'ga', options: { ringBytes: 65_536 } });
    const sent = Array.from({ length: 320 }, (_, i) => testFrame(3000 + i, i & 0xff, 100));
    // Paced by the receiver: 16 frames (half the ring) at a time, the next once they are
    // read, so that a loaded machine cannot make the ring overflow.
    for (let i = 0; i < sent.length; i += 16) {
      await a.call('send', { id: 'a', frames: sent.slice(i, i + 16) });
      await until(async () => (await g.stats('rx')).packets >= i + 16);
    }
    expect((await g.stats('rx')).packets).toBe(320);
    expect((await g.frames('rx')).map((f) => seqOf(f.hex))).toEqual(sent.map(seqOf));
    expect((await g.stats('rx')).ringDrops).toBe(0);
    await g.call('close', { id: 'rx' });
  }, 60_000);

  it('gives the slots of a batch back to the kernel even when its handler throws, and logs the throw', async () => {
    await g.call('open', { id: 'rx', iface: 'ga', options: { ringBytes: 65_536 }, throwing: true }); // 32 slots
    const sent = Array.from({ length: 96 }, (_, i) => testFrame(3500 + i, 0));
    for (let i = 0; i < sent.length; i += 16) {
      await a.call('send', { id: 'a', frames: sent.slice(i, i + 16) });
      await until(async () => (await g.stats('rx')).packets >= i + 16);
    }
    expect((await g.frames('rx')).map((f) => f.hex)).toEqual(sent); // three times the ring: its slots came back
    expect((await g.stats('rx')).ringDrops).toBe(0);
    expect(g.proc.stderr).toMatch(/ring port ga: the batch handler threw \(1 so far\): handler failure on purpose/);
    await g.call('close', { id: 'rx' });
  }, 60_000);

  it('counts frames longer than a slot as truncated and never forwards them', async () => {
    await g.call('open', { id: 'ga', iface: 'ga', options: { ringBytes: 1 << 20 } });
    await g.call('open', { id: 'gb', iface: 'gb', options: { ringBytes: 1 << 20 } });
    await g.call('bridge', { from: 'ga', to: 'gb', rule: 'all' });
    await b.frames('b');
    const sent = [testFrame(4000, 0, 100), testFrame(4001, 0, 4000), testFrame(4002, 0, 8000), testFrame(4003, 0, 100)];
    expect((await a.call('send', { id: 'a', frames: sent })).sent).toBe(4);
    await until(async () => (await g.stats('ga')).packets === 4);
    const seen = await g.frames('ga');
    expect(seen.map((f) => f.origLen)).toEqual([100, 4000, 8000, 100]);
    // A 2 KiB slot holds 2048 - 66 bytes of frame: the tpacket2 header (32) and sockaddr_ll (20)
    // come first, padded so that the IP header after the 14-byte Ethernet header is 16-aligned.
    expect(seen.map((f) => f.caplen)).toEqual([100, 1982, 1982, 100]);
    expect(seen[1]!.hex).toBe(sent[1]!.slice(0, 1982 * 2));
    await until(async () => (await b.stats('b')).packets >= 2);
    await sleep(300);
    expect((await b.frames('b')).map((f) => f.hex)).toEqual([sent[0], sent[3]]);
    expect((await g.stats('ga')).truncated).toBe(2);
    expect((await g.stats('gb')).sent).toBe(2);
    await g.call('close', { id: 'ga' });
    await g.call('close', { id: 'gb' });
  }, 60_000);

  it('keeps each flow, both directions, on one port of a fanout group', async () => {
    await g.call('open', { id: 'f1', iface: 'ga', options: { ringBytes: 1 << 20, fanoutGroup: 42 } });
    await g.call('open', { id: 'f2', iface: 'ga', options: { ringBytes: 1 << 20, fanoutGroup: 42 } });
    const frames: string[] = [];
    for (let round = 0; round < 4; round++) {
      for (let flow = 0; flow < 16; flow++) {
        const hostA = `10.1.0.${flow + 1}`,
          hostB = `10.2.0.${flow + 1}`;
        const sport = 40_000 + flow,
          dport = 5000 + (flow % 3);
        const payload = Uint8Array.from([round, flow]);
        const there = { ip: { version: 4, src: hostA, dst: hostB, ttl: 64 }, l4: { kind: 'udp', srcPort: sport, dstPort: dport, payload } } as const;
        const back = { ip: { version: 4, src: hostB, dst: hostA, ttl: 64 }, l4: { kind: 'udp', srcPort: dport, dstPort: sport, payload } } as const;
        frames.push(Buffer.from(buildFrame(there)).toString('hex'), Buffer.from(buildFrame(back)).toString('hex'));
      }
    }
    await a.call('send', { id: 'a', frames, chunk: 32 });
    await until(async () => (await g.stats('f1')).packets + (await g.stats('f2')).packets >= 128);
    /** The flow of an IPv4 UDP frame, the same both ways: sorted (address, port) ends. */
    const flowOf = (hex: string): string => {
      const f = Buffer.from(hex, 'hex');
      const ends = [`${f.subarray(26, 30).join('.')}:${f.readUInt16BE(34)}`, `${f.subarray(30, 34).join('.')}:${f.readUInt16BE(36)}`];
      return ends.sort().join(' ');
    };
    const f1 = (await g.frames('f1')).map((f) => flowOf(f.hex));
    const f2 = (await g.frames('f2')).map((f) => flowOf(f.hex));
    expect(f1.length + f2.length).toBe(128);
    const s1 = new Set(f1),
      s2 = new Set(f2);
    expect(s1.size + s2.size).toBe(16); // 16 flows, none split
    expect([...s1].filter((k) => s2.has(k))).toEqual([]);
    expect(s1.size).toBeGreaterThan(0); // 16 flows all on one port: odds 2^-15
    expect(s2.size).toBeGreaterThan(0);
    // Every flow: 4 frames each way, all on its one port.
    for (const key of s1) expect(f1.filter((k) => k === key)).toHaveLength(8);
    await g.call('close', { id: 'f1' });
    await g.call('close', { id: 'f2' });
  }, 60_000);

  it("counts ring drops when JavaScript does not drain the ring", async () => {
    await g.call('open', { id: 'rx', iface: 'ga', options: { ringBytes: 65_536 } }); // 32 slots
    const blocked = g.call('block', { ms: 2000 }, 30_000);
    await sleep(300); // the agent is now busy: its event loop does not run
    const sent = Array.from({ length: 300 }, (_, i) => testFrame(5000 + i, 0, 100));
    await a.call('send', { id: 'a', frames: sent, chunk: 50 });
    await blocked;
    await sleep(300);
    const stats = await g.stats('rx');
    const got = await g.frames('rx');
    expect(got.length).toBeLessThanOrEqual(32);
    expect(got.map((f) => f.hex)).toEqual(sent.slice(0, got.length)); // the first ones, kept whole
    expect(stats.ringDrops).toBe(300 - got.length);
    await g.call('close', { id: 'rx' });
  }, 60_000);

  it('survives its interface going down and up, and being deleted and re-created, during traffic', async () => {
    await g.call('open', { id: 'rx', iface: 'ga', options: { ringBytes: 1 << 20 } });
    const traffic = (from: number, n: number): Promise<Reply> =>
      a.call('send', { id: 'a', frames: Array.from({ length: n }, (_, i) => testFrame(from + i, 0)), chunk: 1, pauseMs: 10 }, 60_000);
    const sending = traffic(6000, 250);
    await sleep(500);
    await ip(['-n', G, 'link', 'set', 'ga', 'down']);
    await until(() => g.linkEvents('rx').length >= 1);
    await sleep(600);
    await ip(['-n', G, 'link', 'set', 'ga', 'up']);
    await until(() => g.linkEvents('rx').length >= 2, 5000);
    expect(g.linkEvents('rx').map((e) => e.state)).toEqual(['down', 'up']);
    expect(g.linkEvents('rx')[0]!.reason).toMatch(/ga: .*ENETDOWN/);
    await sending;
    const seqs = (await g.frames('rx')).map((f) => seqOf(f.hex));
    expect(seqs.some((s) => s > 6150)).toBe(true); // traffic after the link came back
    expect((await g.stats('rx')).link).toBe('up');

    // Deleted (both ends of the veth go) and re-created with the same names: a new ifindex.
    const late = traffic(7000, 100);
    await sleep(200);
    await ip(['-n', A, 'link', 'del', 'a0']);
    await until(() => g.linkEvents('rx').length >= 3 && a.linkEvents('a').length >= 1);
    expect((await g.stats('rx')).link).toBe('down');
    await sleep(700);
    await wire(A, 'a0', G, 'ga');
    await until(() => g.linkEvents('rx').length >= 4 && a.linkEvents('a').length >= 2, 5000);
    expect(g.linkEvents('rx').map((e) => e.state)).toEqual(['down', 'up', 'down', 'up']);
    expect(a.linkEvents('a').map((e) => e.state)).toEqual(['down', 'up']);
    await late;
    await g.frames('rx');
    const after = Array.from({ length: 20 }, (_, i) => testFrame(8000 + i, 0));
    expect((await a.call('send', { id: 'a', frames: after })).sent).toBe(20);
    await until(async () => (await g.frames('rx')).length > 0 || false);
    await g.call('close', { id: 'rx' });
    expect(a.proc.done || g.proc.done).toBe(false);
  }, 90_000);

  it('runs in two worker threads at once, each with its own instance, and in a worker that ends with its port open', async () => {
    const reply = g.call('workers', { iface: 'ga', n: 2, leaveOpen: true }, 60_000);
    await g.proc.waitForJson((m: { op?: string }) => m.op === 'workers-ready', 30_000);
    const sent = Array.from({ length: 100 }, (_, i) => testFrame(9000 + i, 0));
    await a.call('send', { id: 'a', frames: sent, chunk: 20 });
    await sleep(500);
    g.proc.write(`${JSON.stringify({ op: 'workers-report', seq: -1 })}\n`);
    const r = await reply;
    expect(r.reports, JSON.stringify(r)).toEqual([
      { count: 100, live: 1, liveAfterClose: 0 },
      { count: 100, live: 1, liveAfterClose: 1 },
    ]);
    expect(r.mainLive).toBe(0);
    expect((await g.call('live')).live).toBe(0);
    expect(g.proc.done).toBe(false);
  }, 90_000);

  it('detaches the ring from JavaScript at close: views kept past close read empty, and GC after close is safe', async () => {
    const gcAgent = await Agent.start(G, ['--expose-gc']);
    const sending = a.call('send', { id: 'a', frames: Array.from({ length: 300 }, (_, i) => testFrame(10_000 + i, 0)), chunk: 1, pauseMs: 5 }, 60_000);
    const r = await gcAgent.call('gc-cycles', { iface: 'ga', n: 30, waitMs: 30 }, 60_000);
    await sending;
    expect(r.keptViews).toBeGreaterThan(10);
    expect(r.keptLengths).toEqual([0]);
    expect(r.live).toBe(0);
    gcAgent.proc.child.stdin!.end();
    expect(await gcAgent.proc.exited).toEqual({ code: 0, signal: null });
  }, 90_000);

  it('refuses an unknown interface with 3009 and a process without CAP_NET_RAW with 3010', async () => {
    const r = await g.call('open', { id: 'x', iface: 'nope0' }).catch((e: Error) => e.message);
    expect(r).toMatch(/"code":3009/);
    const unprivileged = nodeIn(
      G,
      `import { openRingPort } from ${JSON.stringify(projectUrl('src/capture/ring-port.ts'))};
       try { openRingPort('ga', {}); console.log('opened'); } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }
       process.exit(0);`,
      { prefix: ['setpriv', '--bounding-set=-all', '--inh-caps=-all', '--ambient-caps=-all'] },
    );
    const line = await unprivileged.waitForJson<{ code: number; message: string }>(() => true, 30_000);
    expect(line.code).toBe(3010);
    expect(line.message).toMatch(/CAP_NET_RAW/);
  }, 60_000);
});
