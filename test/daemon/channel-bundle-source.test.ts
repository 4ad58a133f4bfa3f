// A daemon fed by a control plane over the channel: the control plane here is
// a real `ws` server on loopback playing the protocol (README "The control
// channel protocol"), the daemon a real Daemon with in-memory captures and a
// real state directory. The daemon acknowledges what it applied only once it
// is the cached one, rejects a bad bundle and keeps the running one, enforces
// its cache when it starts without its control plane, holds traffic with no
// bundle at all (unless failOpen), backs off, resumes with its digest, and
// notices a dead connection.
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { CHANNEL_PATH, CLOSE, type Bundle } from '../../src/channel/index.js';
import { validateDaemonConfig } from '../../src/config/index.js';
import { BundleCache, ChannelBundleSource, Daemon, daemonMetrics } from '../../src/daemon/index.js';
import { ROOT } from '../support/cli.js';
import { MemorySource } from '../support/memory-source.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
const frame = (src: string, port: number) => Buffer.from(buildFrame({ ip: { version: 4, src, dst: '192.0.2.2', ttl: 64 }, l4: { kind: 'tcp', srcPort: 1000, dstPort: port, flags: TCP.SYN } }));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, f: () => T | undefined | false, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** A bundle the way a control plane builds one: account rules, and lists with entries (or only their digests). */
function bundle(seq: number, version: string, rules: Array<{ id: string; expression: string }>, lists: Record<string, { entries: string[]; send: boolean }> = {}): Bundle {
  const l = Object.fromEntries(Object.entries(lists).map(([name, x]) => [name, { digest: sha(x.entries.join('\n')), ...(x.send ? { entries: x.entries } : {}) }]));
  const account = { id: 'acc-entry', name: 'account', kind: 'root', phase: 'network_transit', version, rules: rules.map((r) => ({ ...r, action: 'block', enabled: true })) };
  const digest = sha(JSON.stringify([account, Object.entries(l).map(([n, x]) => [n, x.digest])]));
  return { type: 'bundle', seq, digest, account, zone: null, managed: [], lists: l };
}

type Msg = Record<string, unknown> & { type: string };

/** A control plane on loopback: records every connection's messages; `onHello` answers (default: welcome, then the bundle set or up_to_date). */
class FakeControlPlane {
  server!: WebSocketServer;
  port = 0;
  connections: Array<{ ws: WebSocket; messages: Msg[] }> = [];
  current: Bundle | undefined;
  heartbeat = 10;
  onHello: (ws: WebSocket, hello: Msg) => void = (ws, hello) => {
    ws.send(JSON.stringify({ type: 'welcome', protocol: 1, heartbeat_seconds: this.heartbeat, daemon: { id: 'd1', name: 'gw1', account_id: 'acc', zone_id: null } }));
    if (this.current === undefined) return;
    if (hello['digest'] === this.current.digest) ws.send(JSON.stringify({ type: 'up_to_date', digest: this.current.digest }));
    else ws.send(JSON.stringify(this.current));
  };
  /** Called with each ack as it arrives (before anything else runs). */
  onAck: ((ack: Msg) => void) | undefined;

  async start(port = 0): Promise<void> {
    this.server = new WebSocketServer({ host: '127.0.0.1', port, path: CHANNEL_PATH });
    await new Promise<void>((r) => this.server.once('listening', () => r()));
    this.port = (this.server.address() as { port: number }).port;
    this.server.on('connection', (ws) => {
      const c = { ws, messages: [] as Msg[] };
      this.connections.push(c);
      ws.on('message', (data) => {
        const m = JSON.parse(data.toString()) as Msg;
        c.messages.push(m);
        if (m.type === 'hello') this.onHello(ws, m);
        if (m.type === 'ack') this.onAck?.(m);
      });
    });
  }
  get url(): string {
    return `ws://127.0.0.1:${this.port}`;
  }
  messages(type: string): Msg[] {
    return this.connections.flatMap((c) => c.messages.filter((m) => m.type === type));
  }
  /** Pushes a bundle on the newest connection. */
  push(b: Bundle): void {
    this.current = b;
    this.connections.at(-1)!.ws.send(JSON.stringify(b));
  }
  /** Like `kill -9`: connections dropped without a close frame, the port closed. */
  async kill(): Promise<void> {
    for (const c of this.connections) c.ws.terminate();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

function logger(): { log: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  return { log: pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) }), lines };
}

/** A daemon on two in-memory ports ("ga" in, "gb" out) fed by the control plane at `url`. */
async function daemonFor(url: string | string[], stateDir: string, extra: { failOpen?: boolean; mode?: 'inline' | 'monitor'; metricsPort?: number; heartbeatSeconds?: number; maxBackoffSeconds?: number; initialBackoffMs?: number; intakeScript?: URL } = {}) {
  const mode = extra.mode ?? 'inline';
  const config = validateDaemonConfig(
    {
      mode,
      interfaces: mode === 'inline' ? ['ga', 'gb'] : ['ga'],
      controlPlane: { url, token: 'moatd_test_token', stateDir, maxBackoffSeconds: extra.maxBackoffSeconds ?? 30, ...(extra.heartbeatSeconds === undefined ? {} : { heartbeatSeconds: extra.heartbeatSeconds }) },
      failOpen: extra.failOpen ?? false,
      metrics: extra.metricsPort === undefined ? { enabled: false } : { listen: `127.0.0.1:${extra.metricsPort}` },
    },
    join(stateDir, '..', 'daemon.jsonc'),
  );
  const { log, lines } = logger();
  const ports = new Map<string, MemorySource>();
  const source = new ChannelBundleSource(config, { moat: '9.9.9', initialBackoffMs: extra.initialBackoffMs ?? 50, intakeScript: extra.intakeScript });
  const d = new Daemon(config, log, (iface) => {
    const s = new MemorySource(iface);
    ports.set(iface, s);
    return s;
  }, source);
  await d.start();
  cleanups.push(() => d.stop());
  const ga = ports.get('ga')!;
  const gb = ports.get('gb');
  /** Sends a frame in on ga; true when it was forwarded out of gb. */
  const forwards = (f: Buffer): boolean => {
    const before = gb?.sentFrames.length ?? 0;
    ga.deliver(f);
    return (gb?.sentFrames.length ?? 0) > before;
  };
  return { d, source, lines, forwards, ga };
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

const newState = () => join(mkdtempSync(join(tmpdir(), 'moat-channel-')), 'state');

describe('a daemon fed by its control plane', () => {
  it('says hello with its token, version and digests, applies a pushed bundle, and acknowledges it once it is cached', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    const b1 = bundle(1, '3', [{ id: 'ssh', expression: 'tcp.dstport == 22' }, { id: 'bad-hosts', expression: 'ip.src in $office_blocklist' }], { office_blocklist: { entries: ['198.51.100.0/24', '203.0.113.7'], send: true } });
    cp.current = b1;
    const state = newState();
    // What the state directory holds at the moment the ack arrives: the ack must come after the bundle is durable.
    let atAck: { pointer: unknown; list: string | undefined; account: boolean } | undefined;
    cp.onAck = () => {
      const list = join(state, 'lists', `${b1.lists['office_blocklist']!.digest}.txt`);
      atAck = { pointer: (JSON.parse(readFileSync(join(state, 'current.json'), 'utf8')) as { digest: string }).digest, list: existsSync(list) ? sha(readFileSync(list, 'utf8')) : undefined, account: existsSync(join(state, 'bundles', b1.digest, 'account.json')) };
    };
    const { d, forwards, lines } = await daemonFor(cp.url, state);
    const acks = await until('an ack', () => cp.messages('ack').length > 0 && cp.messages('ack'));
    expect(cp.messages('hello')).toEqual([{ type: 'hello', protocol: 1, token: 'moatd_test_token', moat: '9.9.9', digest: null, lists: [] }]);
    expect(acks).toEqual([{ type: 'ack', seq: 1, result: 'applied', digest: b1.digest, versions: { account: '3', zone: null } }]);
    expect(atAck).toEqual({ pointer: b1.digest, list: b1.lists['office_blocklist']!.digest, account: true });
    expect([forwards(frame('192.0.2.1', 22)), forwards(frame('198.51.100.9', 80)), forwards(frame('192.0.2.1', 80))]).toEqual([false, false, true]);
    expect(d.bundles.status!()).toMatchObject({ connected: true, bundle: 'live', digest: b1.digest });
    expect(lines.find((l) => l['msg'] === 'ruleset swapped')?.['reason']).toBe('control plane bundle 1: account version 3, zone version -');
  });

  it('rejects a bad bundle with the engine\'s coded errors and keeps enforcing the running one', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    const good = bundle(1, '1', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    cp.current = good;
    const state = newState();
    const { forwards } = await daemonFor(cp.url, state);
    await until('the first ack', () => cp.messages('ack').length === 1);
    cp.push(bundle(2, '2', [{ id: 'broken', expression: 'tcp.dstport ==' }]));
    const ack = await until('the second ack', () => cp.messages('ack')[1]);
    expect(ack).toMatchObject({ type: 'ack', seq: 2, result: 'rejected' });
    expect((ack['errors'] as Array<{ code: number; pointer: string }>).map((e) => [e.code, e.pointer])).toEqual([[1014, '/rules/0/expression']]);
    expect(forwards(frame('192.0.2.1', 22))).toBe(false);
    expect((JSON.parse(readFileSync(join(state, 'current.json'), 'utf8')) as { digest: string }).digest).toBe(good.digest);
  });

  it('takes a list that is not sent again from its cache, and says hello again when it lacks one', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    const entries = ['198.51.100.0/24'];
    cp.current = bundle(1, '1', [{ id: 'l', expression: 'ip.src in $office_blocklist' }], { office_blocklist: { entries, send: true } });
    const { forwards } = await daemonFor(cp.url, newState());
    await until('the first ack', () => cp.messages('ack').length === 1);
    // A rules change: the list travels as its digest only.
    cp.push(bundle(2, '2', [{ id: 'l', expression: 'ip.src in $office_blocklist' }, { id: 'ssh', expression: 'tcp.dstport == 22' }], { office_blocklist: { entries, send: false } }));
    expect(await until('the second ack', () => cp.messages('ack')[1])).toMatchObject({ seq: 2, result: 'applied', versions: { account: '2', zone: null } });
    expect([forwards(frame('198.51.100.5', 80)), forwards(frame('192.0.2.1', 22)), forwards(frame('192.0.2.1', 80))]).toEqual([false, false, true]);
    // A digest the daemon never held: it closes with 4000 and its next hello lists what it holds.
    const closed = new Promise<number>((r) => cp.connections.at(-1)!.ws.once('close', (code) => r(code)));
    cp.push(bundle(3, '3', [{ id: 'l', expression: 'ip.src in $other' }], { other: { entries: ['192.0.2.0/24'], send: false } }));
    expect(await closed).toBe(CLOSE.PROTOCOL_ERROR);
    const hello = await until('a second hello', () => cp.messages('hello')[1]);
    expect(hello['lists']).toEqual([sha(entries.join('\n'))]);
  });

  it('closes with 4000 on a list whose entries do not match its digest, and applies nothing of it', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    cp.current = bundle(1, '1', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    const state = newState();
    const { d } = await daemonFor(cp.url, state);
    await until('the first ack', () => cp.messages('ack').length === 1);
    const forged = bundle(2, '2', [{ id: 'l', expression: 'ip.src in $blocked' }], { blocked: { entries: ['198.51.100.0/24'], send: true } });
    forged.lists['blocked']!.entries = ['0.0.0.0/0'];
    const closed = new Promise<[number, string]>((r) => cp.connections.at(-1)!.ws.once('close', (code, why) => r([code, why.toString()])));
    cp.push(forged);
    expect(await closed).toEqual([CLOSE.PROTOCOL_ERROR, 'list blocked: its entries do not match its digest']);
    expect([d.swaps, d.version.startsWith('1@'), readdirSync(join(state, 'lists'))]).toEqual([1, true, []]);
  });

  it('parses, checks and writes a large bundle (a 10,000-prefix list) in its intake worker thread, not on the packet loop, and applies it', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    cp.current = bundle(1, '1', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    const state = newState();
    const { d, source, forwards } = await daemonFor(cp.url, state);
    await until('the first ack', () => cp.messages('ack').length === 1);
    // 10,000 /32s of 10.0.0.0/16 and 198.51.100.0/24: ~150 KB of JSON, over the in-thread limit (64 KiB).
    const entries = [...Array.from({ length: 10_000 }, (_, i) => `10.0.${i >> 8}.${i & 255}`), '198.51.100.0/24'];
    const big = bundle(2, '2', [{ id: 'l', expression: 'ip.src in $blocked' }], { blocked: { entries, send: true } });
    expect(JSON.stringify(big).length).toBeGreaterThan(64 * 1024);
    cp.push(big);
    await until('the second ack', () => cp.messages('ack').length === 2);
    // ~150 KB arrive in several reads, which ws assembles into a buffer of its own: moved to the worker, not copied.
    expect([source.intake.mode, source.intake.taken, source.intake.moved]).toEqual(['worker', 1, 1]);
    expect(cp.messages('ack')[1]).toMatchObject({ seq: 2, result: 'applied', digest: big.digest });
    expect(sha(readFileSync(join(state, 'lists', `${big.lists['blocked']!.digest}.txt`), 'utf8'))).toBe(big.lists['blocked']!.digest);
    expect([forwards(frame('10.0.39.15', 80)), forwards(frame('198.51.100.9', 80)), forwards(frame('192.0.2.1', 80)), d.version.startsWith('2@')]).toEqual([false, false, true, true]);
  });

  it('closes with 4000 on a large bundle whose list does not match its digest, found by its intake worker', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    cp.current = bundle(1, '1', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    const state = newState();
    const { d, source } = await daemonFor(cp.url, state);
    await until('the first ack', () => cp.messages('ack').length === 1);
    const entries = Array.from({ length: 10_000 }, (_, i) => `10.1.${i >> 8}.${i & 255}`);
    const forged = bundle(2, '2', [{ id: 'l', expression: 'ip.src in $blocked' }], { blocked: { entries, send: true } });
    forged.lists['blocked']!.entries = [...entries.slice(1), '0.0.0.0/0'];
    const closed = new Promise<[number, string]>((r) => cp.connections.at(-1)!.ws.once('close', (code, why) => r([code, why.toString()])));
    cp.push(forged);
    expect(await closed).toEqual([CLOSE.PROTOCOL_ERROR, 'list blocked: its entries do not match its digest']);
    expect([source.intake.taken, d.swaps, d.version.startsWith('1@'), readdirSync(join(state, 'lists'))]).toEqual([1, 1, true, []]);
  });

  it('closes with 1011 and says hello again when its intake worker dies with a message, keeping the bundle in force', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    cp.current = bundle(1, '1', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    // An intake thread that dies as it starts, every time.
    const script = join(mkdtempSync(join(tmpdir(), 'moat-intake-')), 'dies.mjs');
    writeFileSync(script, 'process.exit(3);\n');
    const state = newState();
    const { d, lines } = await daemonFor(cp.url, state, { intakeScript: new URL(`file://${script}`) });
    await until('the first ack', () => cp.messages('ack').length === 1);
    const entries = Array.from({ length: 10_000 }, (_, i) => `10.3.${i >> 8}.${i & 255}`);
    const closed = new Promise<[number, string]>((r) => cp.connections.at(-1)!.ws.once('close', (code, why) => r([code, why.toString()])));
    cp.push(bundle(2, '2', [{ id: 'l', expression: 'ip.src in $blocked' }], { blocked: { entries, send: true } }));
    expect(await closed).toEqual([1011, 'the daemon could not take a message']);
    await until('a second hello', () => cp.messages('hello').length >= 2);
    expect([d.version.startsWith('1@'), lines.some((l) => l['msg'] === 'cannot take a control plane message; reconnecting')]).toEqual([true, true]);
  });

  it('takes messages in the order they came: a small bundle right after a large one is the one in force at the end', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    cp.current = bundle(1, '1', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    const state = newState();
    const { d, source } = await daemonFor(cp.url, state);
    await until('the first ack', () => cp.messages('ack').length === 1);
    const entries = Array.from({ length: 20_000 }, (_, i) => `10.2.${i >> 8}.${i & 255}`);
    // The large one takes the worker milliseconds to parse and write; the small one, taken at once, would otherwise overtake it.
    cp.push(bundle(2, '2', [{ id: 'l', expression: 'ip.src in $blocked' }], { blocked: { entries, send: true } }));
    const last = bundle(3, '3', [{ id: 'telnet', expression: 'tcp.dstport == 23' }]);
    cp.push(last);
    await until('bundle 3 acknowledged', () => cp.messages('ack').some((a) => a['seq'] === 3));
    await sleep(300); // long enough for a late bundle 2 to have been loaded after it
    expect([source.intake.taken, d.version.startsWith('3@'), d.bundles.status!().digest]).toEqual([1, true, last.digest]);
  });

  it('keeps the applied bundle and the one before it in its state directory, and the lists they name, no more, tidied by its intake worker', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    const rule = [{ id: 'l', expression: 'ip.src in $blocked' }];
    const bs = [1, 2, 3].map((n) => bundle(n, String(n), rule, { blocked: { entries: [`198.51.100.${n}`], send: true } }));
    cp.current = bs[0];
    const state = newState();
    // Tidying on this thread (the packet loop's): a 2 MB list's unlink and a bundle's folder cost it milliseconds.
    const prunes = vi.spyOn(BundleCache.prototype, 'prune');
    cleanups.push(() => prunes.mockRestore());
    const { forwards, source } = await daemonFor(cp.url, state);
    await until('the first ack', () => cp.messages('ack').length === 1);
    cp.push(bs[1]!);
    await until('the second ack', () => cp.messages('ack').length === 2);
    cp.push(bs[2]!);
    await until('the third ack', () => cp.messages('ack').length === 3);
    const kept = [bs[1]!.digest, bs[2]!.digest].sort();
    await until('bundle 1 removed', () => readdirSync(join(state, 'bundles')).sort().join() === kept.join());
    expect(readdirSync(join(state, 'bundles')).sort()).toEqual(kept);
    expect(readdirSync(join(state, 'lists')).sort()).toEqual([bs[1]!, bs[2]!].map((b) => `${b.lists['blocked']!.digest}.txt`).sort());
    // Once at start (before any bundle), then only in the worker.
    expect([source.intake.mode, prunes.mock.calls.length]).toEqual(['worker', 1]);
    expect(JSON.parse(readFileSync(join(state, 'current.json'), 'utf8'))).toMatchObject({ digest: bs[2]!.digest, previous: bs[1]!.digest });
    expect([forwards(frame('198.51.100.3', 80)), forwards(frame('198.51.100.2', 80))]).toEqual([false, true]);
  });

  it('starts on its cached bundle while the control plane is down, without waiting for it, and says so', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    const b = bundle(1, '7', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    cp.current = b;
    const state = newState();
    const first = await daemonFor(cp.url, state);
    await until('the ack', () => cp.messages('ack').length === 1);
    await first.d.stop();
    const url = cp.url;
    await cp.kill();

    const t0 = Date.now();
    const { d, forwards, lines } = await daemonFor(url, state, { metricsPort: await freePort() });
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(forwards(frame('192.0.2.1', 22))).toBe(false);
    expect(forwards(frame('192.0.2.1', 80))).toBe(true);
    expect(d.bundles.status!()).toMatchObject({ connected: false, bundle: 'cached', digest: b.digest });
    expect(lines.find((l) => l['msg'] === 'enforcing the cached bundle until the control plane answers')).toMatchObject({ digest: b.digest, versions: { account: '7', zone: null } });
    const metrics = await daemonMetrics(d).metrics();
    expect(metrics).toMatch(/^moat_control_plane_connected 0$/m);
    expect(metrics).toMatch(/^moat_bundle_cached 1$/m);
    const health = (await (await fetch(`http://127.0.0.1:${d.metricsAddress!.port}/health`)).json()) as Record<string, unknown>;
    expect(health['controlPlane']).toMatchObject({ connected: false, bundle: 'cached', digest: b.digest, since: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) as unknown });
  });

  it('does not trust files no pointer names (a crash before they were persisted): they are removed at start, not claimed in the hello', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    const entries = ['198.51.100.0/24'];
    const b = bundle(1, '1', [{ id: 'l', expression: 'ip.src in $blocked' }], { blocked: { entries, send: true } });
    cp.current = b;
    const state = newState();
    const first = await daemonFor(cp.url, state);
    await until('the ack', () => cp.messages('ack').length === 1);
    await first.d.stop();
    // Left by a crash: a list file cut short, and a bundle folder without its bundle.json.
    const torn = sha('192.0.2.0/24\n192.0.2.');
    writeFileSync(join(state, 'lists', `${torn}.txt`), '192.0.2.0/24\n192.0.2.');
    mkdirSync(join(state, 'bundles', sha('torn')));
    await daemonFor(cp.url, state);
    const hello = await until('the second hello', () => cp.messages('hello')[1]);
    expect(hello).toMatchObject({ digest: b.digest, lists: [sha(entries.join('\n'))] });
    expect([readdirSync(join(state, 'lists')), readdirSync(join(state, 'bundles'))]).toEqual([[`${sha(entries.join('\n'))}.txt`], [b.digest]]);
  });

  it('with no cache and no control plane forwards nothing inline, until a first bundle arrives', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    cp.onHello = () => {}; // not answering yet
    const { d, forwards, lines } = await daemonFor(cp.url, newState());
    expect([forwards(frame('192.0.2.1', 80)), forwards(frame('192.0.2.1', 22))]).toEqual([false, false]);
    expect([d.awaitingBundle, d.unjudged]).toEqual([true, 2]);
    expect(lines.some((l) => l['msg'] === 'no bundle yet (none cached): forwarding nothing (failOpen is false) until the control plane sends one')).toBe(true);
    expect(await daemonMetrics(d).metrics()).toMatch(/^moat_unjudged_packets_total 2$/m);
    await until('a hello', () => cp.messages('hello').length === 1);
    cp.connections[0]!.ws.send(JSON.stringify({ type: 'welcome', protocol: 1, heartbeat_seconds: 10, daemon: { id: 'd1', name: 'gw1', account_id: 'acc', zone_id: null } }));
    cp.push(bundle(1, '1', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]));
    await until('the ack', () => cp.messages('ack').length === 1);
    expect([forwards(frame('192.0.2.1', 80)), forwards(frame('192.0.2.1', 22)), d.awaitingBundle]).toEqual([true, false, false]);
  });

  it('in monitor mode with no bundle judges nothing until one arrives, and says so', async () => {
    const { d, ga, lines } = await daemonFor('ws://127.0.0.1:9', newState(), { mode: 'monitor' });
    ga.deliver(frame('192.0.2.1', 22));
    expect([d.unjudged, d.ports[0]!.counters.packets]).toEqual([1, 0]);
    expect(lines.find((l) => String(l['msg']).startsWith('no bundle yet'))?.['msg']).toBe('no bundle yet (none cached): judging nothing until the control plane sends one');
  });

  it('on SIGHUP reloads the bundle in force, and with none yet keeps holding traffic', async () => {
    const held = await daemonFor('ws://127.0.0.1:9', newState());
    process.emit('SIGHUP', 'SIGHUP');
    await sleep(100);
    expect([held.d.swaps, held.d.awaitingBundle, held.forwards(frame('192.0.2.1', 80))]).toEqual([0, true, false]);
    await held.d.stop();

    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    cp.current = bundle(1, '5', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    const { d, forwards } = await daemonFor(cp.url, newState());
    await until('the ack', () => cp.messages('ack').length === 1);
    process.emit('SIGHUP', 'SIGHUP');
    await until('a second swap', () => d.swaps === 2);
    expect([d.version.startsWith('5@'), forwards(frame('192.0.2.1', 22)), cp.messages('ack').length]).toEqual([true, false, 1]);
  });

  it('with failOpen passes everything unjudged until a first bundle, and says so', async () => {
    const { d, forwards, lines } = await daemonFor('ws://127.0.0.1:9', newState(), { failOpen: true });
    expect([forwards(frame('192.0.2.1', 22)), d.unjudged]).toEqual([true, 1]);
    expect(lines.find((l) => String(l['msg']).startsWith('no bundle yet'))).toMatchObject({ level: 40, msg: 'no bundle yet (none cached): forwarding everything unjudged (failOpen) until the control plane sends one' });
  });

  it.each([
    [CLOSE.UNAUTHORIZED, 'unknown token'],
    [CLOSE.REVOKED, 'token revoked'],
    [CLOSE.UNSUPPORTED_PROTOCOL, 'protocol versions spoken: 2'],
  ])('waits its longest back-off after a close %i, never retrying in a tight loop, and logs the code and reason', async (code, reason) => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    cp.onHello = (ws) => ws.close(code, reason);
    const { lines, d } = await daemonFor(cp.url, newState(), { maxBackoffSeconds: 0.5, initialBackoffMs: 10 });
    await sleep(1200);
    // Attempts at 0, ~0.5 s and ~1 s: three. The ordinary back-off from 10 ms would have made seven or more by now.
    expect(cp.connections.length).toBeGreaterThanOrEqual(2);
    expect(cp.connections.length).toBeLessThanOrEqual(3);
    expect(lines.find((l) => l['code'] === code)).toMatchObject({ level: 50, reason, retryInSeconds: 0.5 });
    expect(d.bundles.status!().lastClose).toEqual({ code, reason });
  });

  it('backs off from its first delay, doubling up to the cap, each wait jittered between half and all of it', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    const at: number[] = [];
    cp.onHello = (ws) => {
      at.push(Date.now());
      ws.close(CLOSE.GOING_AWAY, 'restarting');
    };
    const state = newState();
    const config = validateDaemonConfig({ mode: 'monitor', interfaces: ['ga'], controlPlane: { url: cp.url, token: 't', stateDir: state, maxBackoffSeconds: 0.4 }, metrics: { enabled: false } }, join(state, '..', 'd.jsonc'));
    // The jitter's random numbers: all of the delay, then half of it.
    const randoms = [1, 1, 1, 0, 0];
    const d = new Daemon(config, pino({ level: 'silent' }), (iface) => new MemorySource(iface), new ChannelBundleSource(config, { initialBackoffMs: 100, random: () => randoms.shift() ?? 1 }));
    await d.start();
    cleanups.push(() => d.stop());
    await until('six attempts', () => at.length >= 6, 5000);
    const gaps = at.slice(1).map((t, i) => t - at[i]!);
    // 100, 200, 400 (the cap), then half of the cap twice.
    const expected = [100, 200, 400, 200, 200];
    gaps.forEach((g, i) => {
      expect(g).toBeGreaterThanOrEqual(expected[i]! - 5);
      expect(g).toBeLessThan(expected[i]! + 80);
    });
  });

  it('reconnects to a control plane killed and restarted, and says hello with the digest it enforces', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    const b = bundle(1, '4', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    cp.current = b;
    const { d, forwards } = await daemonFor(cp.url, newState());
    await until('the ack', () => cp.messages('ack').length === 1);
    const port = cp.port;
    await cp.kill();
    await until('the disconnection', () => !d.bundles.status!().connected);
    expect(forwards(frame('192.0.2.1', 22))).toBe(false); // still enforcing, same version
    expect(d.version.startsWith('4@')).toBe(true);

    const again = new FakeControlPlane();
    again.current = b;
    await again.start(port);
    cleanups.push(() => again.kill());
    const hello = await until('a hello on the new control plane', () => again.messages('hello')[0]);
    expect(hello).toMatchObject({ digest: b.digest, lists: [] });
    await until('connected', () => d.bundles.status!().bundle === 'live' && d.bundles.status!().connected);
    expect(again.messages('ack')).toEqual([]); // up to date: nothing to apply
  });

  it('with several URLs, reaches another replica when its own dies, resumes there with its digest (nothing applied again) and takes the next push', async () => {
    const a = new FakeControlPlane();
    const b = new FakeControlPlane();
    await a.start();
    await b.start();
    cleanups.push(() => a.kill());
    const v1 = bundle(1, '4', [{ id: 'ssh', expression: 'tcp.dstport == 22' }]);
    a.current = v1;
    b.current = v1;
    // B first: the daemon starts on it.
    const { d, forwards, lines } = await daemonFor([b.url, a.url], newState());
    await until('the ack on B', () => b.messages('ack').length === 1);
    expect(a.connections).toEqual([]);
    expect(d.bundles.status!()).toMatchObject({ connected: true, url: `${b.url}/moat/channel` });
    await b.kill();
    const hello = await until('a hello on A', () => a.messages('hello')[0]);
    expect(hello).toMatchObject({ digest: v1.digest });
    await until('connected to A', () => d.bundles.status!().connected && d.bundles.status!().url === `${a.url}/moat/channel`);
    // Up to date: A sent no bundle, the daemon applied nothing more, and enforced all along.
    expect(a.messages('ack')).toEqual([]);
    expect(lines.filter((l) => l['msg'] === 'ruleset swapped')).toHaveLength(1);
    expect(forwards(frame('192.0.2.1', 22))).toBe(false);
    expect(lines.find((l) => l['msg'] === 'control plane connection closed; the bundle in force stays')).toMatchObject({ url: `${b.url}/moat/channel`, next: `${a.url}/moat/channel` });
    const v2 = bundle(2, '5', [{ id: 'web', expression: 'tcp.dstport == 80' }]);
    a.push({ ...v2, seq: 1 });
    await until('the ack on A', () => a.messages('ack').length === 1);
    expect(a.messages('ack')[0]).toMatchObject({ result: 'applied', digest: v2.digest, versions: { account: '5', zone: null } });
    expect([forwards(frame('192.0.2.1', 22)), forwards(frame('192.0.2.1', 80))]).toEqual([true, false]);
  });

  it('with several URLs and none answering, tries each in turn', async () => {
    const ports = [await freePort(), await freePort(), await freePort()];
    const urls = ports.map((p) => `ws://127.0.0.1:${p}`);
    const { lines } = await daemonFor(urls, newState(), { initialBackoffMs: 20, maxBackoffSeconds: 0.1 });
    await until('six failed attempts', () => lines.filter((l) => l['msg'] === 'control plane unreachable; no bundle yet').length >= 6, 5000);
    const tried = lines.filter((l) => l['msg'] === 'control plane unreachable; no bundle yet').slice(0, 6).map((l) => l['url']);
    expect(tried).toEqual([...urls, ...urls].map((u) => `${u}/moat/channel`));
  });

  it('notices a silent control plane within three heartbeats and reconnects; pings keep a quiet connection up', async () => {
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    let welcomed = 0;
    let closedAfter = 0;
    const answer = cp.onHello;
    cp.onHello = (ws, hello) => {
      answer(ws, hello);
      if (welcomed !== 0) return;
      welcomed = Date.now();
      ws.once('close', () => (closedAfter = Date.now() - welcomed));
    };
    await daemonFor(cp.url, newState(), { heartbeatSeconds: 0.1 });
    await until('a second connection', () => cp.connections.length >= 2, 3000);
    // Closed by the daemon after three silent intervals (0.3 s), not four.
    expect(closedAfter).toBeGreaterThanOrEqual(290);
    expect(closedAfter).toBeLessThan(390);

    const pinging = new FakeControlPlane();
    await pinging.start();
    cleanups.push(() => pinging.kill());
    const timer = setInterval(() => pinging.connections.forEach((c) => c.ws.ping()), 50);
    cleanups.push(() => clearInterval(timer));
    await daemonFor(pinging.url, newState(), { heartbeatSeconds: 0.1 });
    await sleep(800);
    expect(pinging.connections.length).toBe(1);
    // Its status every interval: counters summed over the ports.
    expect(pinging.messages('status').length).toBeGreaterThanOrEqual(3);
    expect(pinging.messages('status')[0]).toEqual({ type: 'status', counters: { passed: 0, dropped: 0, undecodable: 0, swaps: 0 } });
  });
});

describe('the channel over TLS (wss://)', () => {
  const TLS = join(ROOT, 'native-fixtures/tls');

  it('connects to a control plane whose certificate a private CA signed, given that CA, and refuses it without', async () => {
    const server = createHttpsServer({ cert: readFileSync(join(TLS, 'server.pem')), key: readFileSync(join(TLS, 'server.key')) });
    const wss = new WebSocketServer({ server, path: CHANNEL_PATH });
    const hellos: Array<Record<string, unknown>> = [];
    wss.on('connection', (ws) => ws.on('message', (d) => hellos.push(JSON.parse(d.toString()) as Record<string, unknown>)));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => {
      for (const c of wss.clients) c.terminate();
      wss.close();
      server.close(() => r());
    }));
    const url = `wss://127.0.0.1:${(server.address() as { port: number }).port}`;
    const start = async (ca: string | undefined) => {
      const state = newState();
      const config = validateDaemonConfig({ mode: 'monitor', interfaces: ['ga'], controlPlane: { url, token: 'moatd_tls', stateDir: state, ...(ca === undefined ? {} : { ca }) }, metrics: { enabled: false } }, join(state, '..', 'd.jsonc'));
      const { log, lines } = logger();
      const d = new Daemon(config, log, (iface) => new MemorySource(iface), new ChannelBundleSource(config));
      await d.start();
      cleanups.push(() => d.stop());
      return lines;
    };
    const refused = await start(undefined);
    const why = await until('a TLS failure logged', () => refused.find((l) => l['msg'] === 'control plane unreachable; no bundle yet'));
    expect((why['err'] as { code: string }).code).toBe('UNABLE_TO_VERIFY_LEAF_SIGNATURE');
    expect(hellos).toEqual([]);
    await start(join(TLS, 'ca.pem'));
    expect(await until('a hello over TLS', () => hellos[0])).toMatchObject({ type: 'hello', token: 'moatd_tls' });
  });
});

describe('the daemon\'s token file', () => {
  const config = (tokenFile: string, stateDir: string) =>
    validateDaemonConfig({ mode: 'monitor', interfaces: ['ga'], controlPlane: { url: 'ws://127.0.0.1:9', tokenFile, stateDir }, metrics: { enabled: false } }, join(stateDir, '..', 'd.jsonc'));

  it('is read at start: a missing one stops it with 5001 naming the key', () => {
    const state = newState();
    const missing = (() => {
      try {
        new ChannelBundleSource(config(join(state, '..', 'none.token'), state));
      } catch (err) {
        return err as { code: number; message: string };
      }
      return undefined;
    })();
    expect(missing).toMatchObject({ code: 5001, message: `controlPlane.tokenFile ${join(state, '..', 'none.token')}: cannot read: no such file` });
  });

  it('is used when only its owner can read it, and warned about when others can', async () => {
    const state = newState();
    const file = join(state, '..', 'gw1.token');
    writeFileSync(file, 'moatd_from_file\n', { mode: 0o644 });
    chmodSync(file, 0o644);
    const cp = new FakeControlPlane();
    await cp.start();
    cleanups.push(() => cp.kill());
    const c = validateDaemonConfig({ mode: 'monitor', interfaces: ['ga'], controlPlane: { url: cp.url, tokenFile: file, stateDir: state }, metrics: { enabled: false } }, join(state, '..', 'd.jsonc'));
    const { log, lines } = logger();
    const d = new Daemon(c, log, (iface) => new MemorySource(iface), new ChannelBundleSource(c, { moat: '9.9.9' }));
    await d.start();
    cleanups.push(() => d.stop());
    expect(await until('a hello', () => cp.messages('hello')[0])).toMatchObject({ token: 'moatd_from_file' });
    expect(lines.find((l) => l['file'] === file)).toMatchObject({ level: 40, mode: '0644', msg: `controlPlane.tokenFile ${file} can be read by other users: chmod 600 it (and chown it to the daemon's user)` });
    // The state directory is the daemon's alone.
    expect(statSync(state).mode & 0o777).toBe(0o700);
  });
});
