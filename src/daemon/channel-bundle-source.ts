// The daemon's bundle source from its control plane: one WebSocket to `moat
// serve` (README "The control channel protocol"). Each bundle pushed is
// checked and written to the state directory (a large one in a worker thread:
// bundle-intake.ts), loaded by the daemon, made the current one there, and
// only then acknowledged; a rejected one is acknowledged with its
// errors and the running one stays. The daemon never waits for the channel:
// it starts on the cached bundle (or none), and losing the control plane
// changes nothing it enforces. Reconnection backs off (jittered, capped);
// with several URLs (replicas of the control plane), each new attempt goes to
// the next one, so a daemon whose replica died reaches another and resumes
// from its digest.

import { statSync } from 'node:fs';
import type { Logger } from 'pino';
import { WebSocket, type RawData } from 'ws';
import { z } from 'zod';
import { CHANNEL_PATH, CLOSE, HEARTBEAT_SECONDS, PROTOCOL_VERSION, SUBPROTOCOL, closeReason, type Ack, type Hello, type Status } from '../channel/index.js';
import { controlPlaneUrls, type DaemonConfig } from '../config/index.js';
import type { BundleFiles, LoadedBundle } from '../engine/index.js';
import { ERRORS, MoatError, readRegularFile } from '../errors/index.js';
import { BundleCache, writeFileAtomic, type CachedBundle } from './bundle-cache.js';
import { BundleIntake, issue } from './bundle-intake.js';
import type { BundleLoading, BundleSource, ReloadOutcome, SourceHost, SourceStatus } from './bundle-source.js';

const digest = z.string().regex(/^[0-9a-f]{64}$/);
const object = z.record(z.string(), z.unknown());
// What the daemon reads of the control plane's messages (bundles: bundle-intake.ts); unknown fields are ignored.
const welcomeSchema = z.object({ type: z.literal('welcome'), protocol: z.number(), heartbeat_seconds: z.number().positive().max(3600), daemon: object });
const upToDateSchema = z.object({ type: z.literal('up_to_date'), digest });

/** Largest message taken from the control plane: a bundle carries whole lists the first time. */
const MAX_BUNDLE_MESSAGE = 512 * 1024 * 1024;

/** Knobs for tests; the defaults are the protocol's. */
export interface ChannelOptions {
  /** The Moat version said in the hello. */
  moat?: string | undefined;
  /** First reconnection delay, ms (1 s), doubled per failed attempt up to maxBackoffSeconds. */
  initialBackoffMs?: number;
  /** Random numbers in [0, 1) for the jitter. */
  random?: () => number;
  /** Where large messages are parsed, checked and written: a worker thread (the default once built), or the event loop (for comparison). */
  intake?: 'worker' | 'in-thread';
  /** The intake worker's script (tests: one that fails). */
  intakeScript?: URL;
}

/** A bundle of the state directory being loaded, with what the ack needs. */
interface Pending {
  readonly bundle: CachedBundle;
  readonly seq: number;
}

/** Bundles from the control plane, kept in the state directory (last known good). */
export class ChannelBundleSource implements BundleSource {
  readonly name = 'control plane';
  private readonly cache: BundleCache;
  private readonly cp: NonNullable<DaemonConfig['controlPlane']>;
  /** The channel URLs (controlPlane.url's, with the channel's path), tried in turn. */
  private readonly urls: readonly string[];
  /** Which of them the current or next attempt uses. */
  private at = 0;
  private readonly ca: Buffer | undefined;
  /** The applied bundle (in force), and where it came from. */
  private current: CachedBundle | undefined;
  private origin: SourceStatus['bundle'] = 'none';
  /** The bundle the next load() reads (received, not yet applied or rejected). */
  private pending: Pending | undefined;
  /** Which cached bundle each loaded bundle was (by the engine's digest), so an outcome names its bundle. */
  private readonly loadedFrom = new Map<string, CachedBundle>();
  /** Said at start(), when the log is there. */
  private readonly startNotes: Array<{ level: 'warn' | 'error'; obj: object; msg: string }> = [];
  private onChange: ((reason: string) => Promise<ReloadOutcome>) | undefined;
  private log: Logger | undefined;
  private host: SourceHost | undefined;
  private ws: WebSocket | undefined;
  private connected = false;
  private since: string | null = null;
  private lastClose: { code: number; reason: string } | undefined;
  /** Failed attempts since the last welcome: the back-off's exponent. */
  private attempt = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private readonly heartbeatTimers: NodeJS.Timeout[] = [];
  private lastHeard = 0;
  private stopped = false;
  private readonly initialBackoffMs: number;
  private readonly random: () => number;
  private readonly moat: string;
  private sighup: (() => void) | undefined;
  /** Parses, checks and writes the messages; `inbox` takes them one at a time, in arrival order. */
  readonly intake: BundleIntake;
  private inbox: Promise<void> = Promise.resolve();
  /** Applied bundles recorded (persisted, made current, acknowledged) one at a time, in the order they were loaded. */
  private recording: Promise<void> = Promise.resolve();

  /** Opens the state directory and reads the token and CA: throws MoatError 5012 or 5001 when they cannot be used. */
  constructor(config: DaemonConfig, options: ChannelOptions = {}) {
    if (config.controlPlane === undefined) throw new Error('ChannelBundleSource needs a controlPlane configuration');
    this.config = config;
    this.cp = config.controlPlane;
    this.cache = new BundleCache(this.cp.stateDir);
    this.cache.open();
    this.intake = new BundleIntake(this.cache, options.intake, options.intakeScript);
    this.intake.nice = config.capture.priority.background;
    this.urls = controlPlaneUrls(this.cp.url).map(channelUrl);
    this.token(); // a token file that cannot be read stops the start, not the first connection
    this.ca = this.cp.ca === undefined ? undefined : readSecret(this.cp.ca, 'controlPlane.ca', 'CA file');
    this.initialBackoffMs = options.initialBackoffMs ?? 1000;
    this.random = options.random ?? Math.random;
    this.moat = options.moat ?? 'unknown';
    this.current = this.cache.current();
    if (this.current !== undefined) this.origin = 'cached';
  }

  /** The token: the configuration's, or its file's (read again at each connection, so a new token takes effect on the next). */
  private token(): string {
    if (this.cp.token !== undefined) return this.cp.token;
    const file = this.cp.tokenFile!;
    const text = readSecret(file, 'controlPlane.tokenFile', 'token file').toString('utf8').trim();
    if (text === '' || /\s/.test(text)) throw new MoatError('CONFIG_INVALID', `controlPlane.tokenFile ${file}: expected one token (as \`moat daemons create\` wrote it), ${text === '' ? 'the file is empty' : 'found several words'}`, { pointer: '/controlPlane/tokenFile' });
    const mode = statSync(file).mode;
    if ((mode & 0o077) !== 0 && !this.startNotes.some((n) => n.msg.includes(file))) {
      this.startNotes.push({ level: 'warn', obj: { file, mode: `0${(mode & 0o777).toString(8)}` }, msg: `controlPlane.tokenFile ${file} can be read by other users: chmod 600 it (and chown it to the daemon's user)` });
    }
    return text;
  }

  /** Where the channel stands, for /health and metrics. */
  status(): SourceStatus {
    return { connected: this.connected, since: this.since, bundle: this.origin, digest: this.current?.digest ?? null, lastClose: this.lastClose, url: this.url };
  }

  /**
   * Loads the bundle received last (when one waits), else the one in force:
   * at start, the cached one; with none, a bundle without rules, which the
   * daemon holds traffic behind (see Daemon: failOpen) until a first bundle.
   */
  async load(loader: BundleLoading): Promise<LoadedBundle> {
    const target = this.pending?.bundle ?? this.current;
    if (target === undefined) return loader.load(await this.noBundleFiles());
    try {
      const loaded = await loader.load(this.filesOf(target));
      this.loadedFrom.set(loaded.digest, target);
      // A few are enough: an outcome is read right after its load (two when reloads coalesced).
      if (this.loadedFrom.size > 8) this.loadedFrom.delete(this.loadedFrom.keys().next().value!);
      return loaded;
    } catch (err) {
      if (this.pending !== undefined || this.origin !== 'cached') throw err;
      // A cached bundle that no longer loads (the local GeoIP configuration changed, say): start as with none.
      this.startNotes.push({ level: 'error', obj: { digest: target.digest, err: err instanceof MoatError ? { code: err.code, message: err.message } : err }, msg: 'the cached bundle does not load; waiting for the control plane' });
      this.current = undefined;
      this.origin = 'none';
      return loader.load(await this.noBundleFiles());
    }
  }

  /** The files of the cached bundle in force (for `moat daemon --check`), or undefined with none. */
  cachedFiles(): BundleFiles | undefined {
    return this.current === undefined ? undefined : this.filesOf(this.current);
  }

  private filesOf(b: CachedBundle): BundleFiles {
    const dir = this.cache.bundleDir(b.digest);
    return {
      rules: [`${dir}/${b.account}`, ...(b.zone === null ? [] : [`${dir}/${b.zone}`])],
      managed: b.managed.map((m) => `${dir}/${m}`),
      lists: Object.entries(b.lists).map(([name, d]) => ({ name, file: this.cache.listFile(d) })),
      geoip: this.config.geoip.country,
      asn: this.config.geoip.asn,
      missingData: this.config.missingData,
    };
  }

  // Before any bundle: no rules (the daemon does not judge with it: it holds or passes traffic, see Daemon).
  private async noBundleFiles(): Promise<BundleFiles> {
    const file = `${this.cache.dir}/no-bundle.json`;
    await writeFileAtomic(file, JSON.stringify({ rules: [] }), false);
    return { rules: [file] };
  }

  private config: DaemonConfig;

  reconfigure(config: DaemonConfig): void {
    // controlPlane is restart-only (the daemon keeps the running one); GeoIP files and missingData apply.
    this.config = config;
  }

  start(onChange: (reason: string) => Promise<ReloadOutcome>, log: Logger, host?: SourceHost): void {
    this.onChange = onChange;
    this.log = log;
    this.host = host;
    this.stopped = false;
    for (const n of this.startNotes.splice(0)) log[n.level](n.obj, n.msg);
    // What no pointer names may be half-written (a crash before it was persisted): not to be trusted as held.
    try {
      this.cache.prune();
    } catch (err) {
      log.warn({ err, stateDir: this.cache.dir }, 'cannot tidy the state directory');
    }
    const p = this.cache.pointer();
    if (this.current !== undefined) {
      log.info({ digest: this.current.digest, versions: this.current.versions, appliedAt: p?.appliedAt, stateDir: this.cache.dir }, 'enforcing the cached bundle until the control plane answers');
    }
    // SIGHUP reads the configuration again (logs, GeoIP) with the bundle in force.
    this.sighup = () => {
      if (this.current === undefined) log.info('SIGHUP: no bundle yet; nothing to reload');
      else void onChange('SIGHUP');
    };
    process.on('SIGHUP', this.sighup);
    this.intake.warm();
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.stopHeartbeat();
    if (this.sighup !== undefined) process.off('SIGHUP', this.sighup);
    this.sighup = undefined;
    const ws = this.ws;
    this.ws = undefined;
    if (ws !== undefined) {
      ws.removeAllListeners();
      ws.on('error', () => {}); // a late error of a closing socket is of no interest now
      if (ws.readyState === WebSocket.OPEN) ws.close(CLOSE.GOING_AWAY, 'the daemon stops');
      else ws.terminate();
    }
    this.connected = false;
    void this.intake.stop();
  }

  /** The URL of the current (or next) attempt. */
  private get url(): string {
    return this.urls[this.at]!;
  }

  private connect(): void {
    if (this.stopped) return;
    const log = this.log!;
    let token: string;
    try {
      token = this.token();
    } catch (err) {
      log.error({ err: err instanceof MoatError ? { code: err.code, message: err.message } : err }, 'cannot read the token; trying again later');
      this.retry(this.cp.maxBackoffSeconds * 1000);
      return;
    }
    const ws = new WebSocket(this.url, [SUBPROTOCOL], { ca: this.ca, maxPayload: MAX_BUNDLE_MESSAGE, handshakeTimeout: 10_000, perMessageDeflate: false });
    this.ws = ws;
    this.lastHeard = Date.now();
    ws.on('open', () => {
      const hello: Hello = { type: 'hello', protocol: PROTOCOL_VERSION, token, moat: this.moat, digest: this.current?.digest ?? null, lists: this.cache.listDigests().slice(0, 4096) };
      ws.send(JSON.stringify(hello));
      // Until the welcome names the interval, the protocol's default one watches the connection.
      this.startHeartbeat(ws, this.cp.heartbeatSeconds ?? HEARTBEAT_SECONDS, false);
    });
    ws.on('ping', () => (this.lastHeard = Date.now()));
    ws.on('pong', () => (this.lastHeard = Date.now()));
    ws.on('message', (data, isBinary) => {
      this.lastHeard = Date.now();
      if (isBinary) return this.protocolError(ws, 'binary frames are not part of the protocol');
      // In arrival order: a bundle written after the next one's files must not be loaded after it.
      this.inbox = this.inbox.then(() => this.onMessage(ws, data)).catch((err: unknown) => this.log?.error({ err }, 'handling a control plane message failed; the running bundle stays'));
    });
    ws.on('error', (err) => {
      // A 'close' follows; the error says why (refused, TLS, an HTTP answer instead of an upgrade).
      log.warn({ url: this.url, err: { message: err.message, code: (err as NodeJS.ErrnoException).code } }, this.current === undefined ? 'control plane unreachable; no bundle yet' : 'control plane unreachable; the bundle in force stays');
    });
    ws.on('close', (code, reasonBytes) => this.onClose(ws, code, reasonBytes.toString('utf8')));
  }

  private onClose(ws: WebSocket, code: number, reason: string): void {
    if (ws !== this.ws) return;
    this.ws = undefined;
    this.stopHeartbeat();
    const wasConnected = this.connected;
    this.connected = false;
    this.since = new Date().toISOString();
    this.lastClose = { code, reason };
    if (this.stopped) return;
    const log = this.log!;
    const cap = this.cp.maxBackoffSeconds * 1000;
    // The next attempt goes to the next replica: the one just lost may be dead (one URL: the same again).
    this.at = (this.at + 1) % this.urls.length;
    if (code === CLOSE.UNAUTHORIZED || code === CLOSE.REVOKED || code === CLOSE.UNSUPPORTED_PROTOCOL) {
      // Retrying will not make the token valid or the version spoken: the longest wait, never a tight loop.
      log.error({ code, reason, retryInSeconds: this.cp.maxBackoffSeconds }, `the control plane refused this daemon (${code}: ${reason || 'no reason given'}); the bundle in force stays`);
      this.retry(cap);
      return;
    }
    if (code === CLOSE.REPLACED) {
      log.error({ code, reason }, 'another daemon connected with this token; this one stops taking bundles (it keeps enforcing its own): give each daemon its own token, then restart it');
      return;
    }
    if (wasConnected) log.warn({ code, reason, url: ws.url, next: this.url }, 'control plane connection closed; the bundle in force stays');
    const delay = Math.min(cap, this.initialBackoffMs * 2 ** Math.min(this.attempt, 30));
    this.attempt++;
    // Equal jitter: half the delay fixed, half random, so a fleet does not reconnect in step.
    this.retry(delay / 2 + (this.random() * delay) / 2);
  }

  private retry(ms: number): void {
    if (this.stopped) return;
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      this.connect();
    }, ms);
  }

  // Status every interval; three intervals of silence (no message, ping or
  // pong) and the connection is dead. Silence is checked ten times an interval
  // (at most every second), so a dead connection is closed at three intervals, not four.
  private startHeartbeat(ws: WebSocket, seconds: number, withStatus: boolean): void {
    this.stopHeartbeat();
    const ms = seconds * 1000;
    const watch = setInterval(() => {
      if (ws !== this.ws || Date.now() - this.lastHeard <= 3 * ms) return;
      this.log!.warn({ silentSeconds: Math.round((Date.now() - this.lastHeard) / 1000) }, 'nothing heard from the control plane for three heartbeat intervals; reconnecting');
      ws.terminate(); // a dead peer would never finish a close handshake
    }, Math.min(1000, ms / 10));
    watch.unref();
    this.heartbeatTimers.push(watch);
    if (!withStatus) return;
    const status = setInterval(() => {
      if (ws !== this.ws || this.host === undefined || ws.readyState !== WebSocket.OPEN) return;
      const message: Status = { type: 'status', counters: this.host.counters() };
      ws.send(JSON.stringify(message));
    }, ms);
    status.unref();
    this.heartbeatTimers.push(status);
  }

  private stopHeartbeat(): void {
    for (const t of this.heartbeatTimers.splice(0)) clearInterval(t);
  }

  private protocolError(ws: WebSocket, why: string): void {
    this.log!.error({ code: CLOSE.PROTOCOL_ERROR, reason: why }, `control plane protocol error: ${why}; reconnecting`);
    ws.close(CLOSE.PROTOCOL_ERROR, closeReason(why));
  }

  private async onMessage(ws: WebSocket, data: RawData): Promise<void> {
    let taken;
    try {
      taken = await this.intake.take(Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data));
    } catch (err) {
      // The intake's thread died with the message (a new one takes the next): unacknowledged, it would hold
      // the control plane's pushes to this daemon; a new connection's hello has it sent again.
      this.log!.error({ err: { message: (err as Error).message } }, 'cannot take a control plane message; reconnecting');
      ws.close(CLOSE.INTERNAL, closeReason('the daemon could not take a message'));
      return;
    }
    if (taken.kind === 'protocol') return this.protocolError(ws, taken.why);
    if (taken.kind === 'unwritable') {
      // Nothing was applied, and nothing can be until the state directory is writable again.
      this.log!.error({ err: { message: taken.message }, stateDir: this.cache.dir }, 'cannot write the bundle to the state directory; rejected, the running one stays');
      this.send(ws, { type: 'ack', seq: taken.seq, result: 'rejected', digest: taken.digest, errors: [{ code: ERRORS.CLI_SYSTEM.code, message: `state directory ${this.cache.dir}: ${taken.message}`.slice(0, 2000) }] });
      return;
    }
    if (taken.kind === 'bundle') {
      // Not awaited: the next message is taken while this one loads (the daemon coalesces reloads told meanwhile).
      this.onBundle(ws, taken.seq, taken.bundle).catch((err: unknown) => this.log?.error({ err }, 'handling a bundle failed; the running one stays'));
      return;
    }
    const msg = taken.message;
    const type = typeof msg === 'object' && msg !== null ? (msg as { type?: unknown }).type : undefined;
    if (type === 'welcome') {
      const w = welcomeSchema.safeParse(msg);
      if (!w.success) return this.protocolError(ws, `welcome: ${issue(w.error)}`);
      this.connected = true;
      this.attempt = 0;
      this.since = new Date().toISOString();
      this.startHeartbeat(ws, this.cp.heartbeatSeconds ?? w.data.heartbeat_seconds, true);
      this.log!.info({ url: this.url, daemon: w.data.daemon, heartbeatSeconds: this.cp.heartbeatSeconds ?? w.data.heartbeat_seconds }, 'connected to the control plane');
      return;
    }
    if (type === 'up_to_date') {
      const u = upToDateSchema.safeParse(msg);
      if (!u.success) return this.protocolError(ws, `up_to_date: ${issue(u.error)}`);
      if (this.current !== undefined && u.data.digest === this.current.digest) {
        this.origin = 'live';
        this.log!.info({ digest: u.data.digest }, 'the bundle in force is the control plane\'s current one');
      }
      return;
    }
    this.log!.warn({ type }, 'ignoring a message of a type this daemon does not know');
  }

  // A bundle written to the state directory: the daemon loads it, then
  // (applied) it becomes the current one there, then the ack.
  private async onBundle(ws: WebSocket, seq: number, cached: CachedBundle): Promise<void> {
    const pending: Pending = { bundle: cached, seq };
    this.pending = pending;
    const v = cached.versions;
    const outcome = await this.onChange!(`control plane bundle ${seq}: account version ${v.account ?? '-'}, zone version ${v.zone ?? '-'}`);
    if (this.pending === pending) this.pending = undefined;
    // Outcomes come in the order of the daemon's loads; recorded and acknowledged in that order too
    // (a large bundle's fsyncs must not make it the current one after the smaller one loaded next).
    const recorded = this.recording.then(() => this.record(ws, seq, cached, outcome));
    this.recording = recorded.catch(() => {});
    await recorded;
  }

  private async record(ws: WebSocket, seq: number, cached: CachedBundle, outcome: ReloadOutcome): Promise<void> {
    const log = this.log!;
    if (outcome.applied) {
      const applied = this.loadedFrom.get(outcome.digest) ?? cached;
      try {
        // Durable before the ack: an acknowledged bundle is the one a restart enforces.
        await this.cache.persist(applied);
        await this.cache.makeCurrent(applied.digest);
      } catch (err) {
        log.error({ err, stateDir: this.cache.dir }, 'cannot record the applied bundle in the state directory; a restart without the control plane would enforce the one before');
      }
      // Between two messages taken (see inbox), so never under the files of a bundle being written;
      // off the packet loop (see BundleIntake.prune).
      this.inbox = this.inbox.then(() =>
        this.intake.prune(this.pending === undefined ? [] : [this.pending.bundle.digest]).catch((err: unknown) => {
          log.warn({ err, stateDir: this.cache.dir }, 'cannot tidy the state directory');
        }),
      );
      this.current = applied;
      this.origin = 'live';
      this.send(ws, { type: 'ack', seq: seq, result: 'applied', digest: applied.digest, versions: applied.versions });
    } else {
      const errors = outcome.errors.slice(0, 100).map((e) => ({ code: e.code, message: e.message.slice(0, 2000), ...(e.pointer === undefined ? {} : { pointer: e.pointer.slice(0, 500) }) }));
      this.send(ws, { type: 'ack', seq: seq, result: 'rejected', digest: cached.digest, errors });
    }
  }

  private send(ws: WebSocket, ack: Ack): void {
    // An ack for a connection closed meanwhile is moot: the next hello carries the digest in force.
    if (ws === this.ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(ack));
  }
}

/** The channel's URL: the configuration's, with the protocol's path when it names none. */
export function channelUrl(url: string): string {
  const u = new URL(url);
  if (u.pathname === '' || u.pathname === '/') u.pathname = CHANNEL_PATH;
  return u.toString();
}

// A secret or key file: regular, size-limited, with a coded error naming the key.
function readSecret(file: string, key: string, what: string): Buffer {
  try {
    return readRegularFile(file, 'config', what);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new MoatError('CONFIG_READ', `${key} ${file}: cannot read: ${code === 'ENOENT' ? 'no such file' : (code ?? (err as Error).message)}`, { pointer: `/${key.replace('.', '/')}`, cause: err });
  }
}
