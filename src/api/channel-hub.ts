// The control plane's end of the control channel (README "The control channel
// protocol"): a WebSocket server on the API's own listener at CHANNEL_PATH.
// It authenticates daemons by their hello, sends each the bundle of its
// account (and zone), pushes a new one after every change of what that
// bundle holds, and records fleet status in the database.
//
// Bundles are computed once per (account, zone) group and change, never per
// connection: 1,000 daemons of one account share one deployment read, one
// digest and one serialized message per set of lists that must travel. Each
// connection has at most one bundle in flight; changes meanwhile only mark it
// dirty, and after the ack it gets the latest (coalescing). Pushes run after
// commits, from the change feed, so no API write waits for a daemon, and a
// daemon that never acks or never reads holds up only itself.
// The store is asynchronous (any Store backend): a connection's messages are
// handled one after another (a hello that awaits the store holds back the
// messages behind it, never reorders them), groups are built once even when
// their first daemons say hello together, refreshes never overlap, and status
// batches are written in the order they were recorded.

import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import {
  CHANNEL_PATH,
  CLOSE,
  HEARTBEAT_SECONDS,
  HELLO_TIMEOUT_SECONDS,
  MAX_DAEMON_MESSAGE,
  PROTOCOL_VERSION,
  ProtocolError,
  SUBPROTOCOL,
  closeReason,
  parseDaemonMessage,
  type Counters,
  type DaemonMessage,
  type Hello,
  type Welcome,
} from '../channel/index.js';
import { nowStamp, type DaemonIdentity, type DaemonsRepo, type RunningRuleset, type StatusUpdate, type Store } from '../store/index.js';
import { apiError } from './api-error.js';
import { readAccountDeployment } from './account-deployment.js';
import type { ChangeFeed } from './change-feed.js';
import { fail } from './envelope.js';
import type { Runner, RunnerLogger } from './runner.js';

/** Settings of the hub; every field has a default. */
export interface HubOptions {
  /** Seconds between pings and status reports (`moat serve --channel-heartbeat`); default HEARTBEAT_SECONDS. */
  heartbeatSeconds?: number | undefined;
  /** Milliseconds a connection has to say hello (default HELLO_TIMEOUT_SECONDS). */
  helloTimeoutMs?: number | undefined;
  /** Connections from one address that have not said hello yet, at most (default 16); more are closed with 4029. */
  maxUnauthenticatedPerAddress?: number | undefined;
  /** A connection whose unsent bytes exceed this gets no new bundle until they drain (default 32 MiB). */
  maxBufferedBytes?: number | undefined;
}

/** A bundle of one group, ready to send in its variants. */
interface Built {
  digest: string;
  /** `"digest":…,"account":…,"zone":…,"managed":[…],"lists":{` : the part every variant shares. */
  head: string;
  lists: Array<{ digest: string; bare: string; full: string }>;
  /** Serialized rest of the message by which lists carry their entries ("0101"). */
  variants: Map<string, Buffer>;
  rulesets: RunningRuleset[];
  versions: { account: string | null; zone: string | null };
}

/** Daemons of one account and zone: one bundle for all of them. */
interface Group {
  accountId: string;
  zoneId: string | null;
  fingerprint: string;
  built: Built;
  conns: Set<Conn>;
}

interface Conn {
  ws: WebSocket;
  address: string;
  daemon: DaemonIdentity | undefined;
  group: Group | undefined;
  helloTimer: NodeJS.Timeout | undefined;
  lastHeard: number;
  seq: number;
  /** The bundle sent and not yet acknowledged. */
  inflight: { seq: number; digest: string; rulesets: RunningRuleset[] } | undefined;
  /** The digest the daemon runs or was last offered: the same one is not sent again. */
  offered: string | null;
  /** List digests the daemon holds (its hello) or was sent on this connection. */
  lists: Set<string>;
  counters: Counters | undefined;
  countersDirty: boolean;
  closed: boolean;
  /** When its hello was recorded (the row's connected_since): its disconnection is recorded only against it. */
  since: string | undefined;
  /** The handling of its messages so far: the next one runs after it (their order is the daemon's). */
  queue: Promise<void>;
}

/** Wait before a failed refresh is tried again (its groups' fingerprints stay old, so it rebuilds them). */
const REFRESH_RETRY_MS = 1000;

const sha256 = (s: string): string => createHash('sha256').update(s, 'utf8').digest('hex');

/** The control channel's server end. */
export class ChannelHub implements Runner {
  readonly name = 'channel-hub';
  readonly heartbeatSeconds: number;
  private readonly helloTimeoutMs: number;
  private readonly maxUnauthenticated: number;
  private readonly maxBuffered: number;
  private readonly daemons: DaemonsRepo;
  private readonly wss: WebSocketServer;
  private readonly conns = new Set<Conn>();
  private readonly byDaemon = new Map<string, Conn>();
  private readonly groups = new Map<string, Group>();
  private readonly unauthenticated = new Map<string, number>();
  private pending: StatusUpdate[] = [];
  private flushTimer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private stopping = false;
  private buildCount = 0;
  /** Groups being built for their first daemons, by key: daemons saying hello together share one build. */
  private readonly creating = new Map<string, Promise<Group>>();
  /** A refresh runs; `refreshAgain`: a signal came meanwhile, so it runs once more. */
  private refreshing: Promise<void> | undefined;
  private refreshAgain = false;
  /** A refresh failed (the database unreachable): the next try, since no signal may come for a long time. */
  private retryTimer: NodeJS.Timeout | undefined;
  /** Change signals seen: a group built across one is refreshed once built. */
  private signals = 0;
  /** The status batches being written, in order. */
  private flushing: Promise<void> = Promise.resolve();
  /** List contents read for bundles, by ListStore.contentKey: a rules-only change does not read a 100k-entry list again (~70 ms). */
  private readonly listMemo = new Map<string, string[]>();
  /** Each list content's digest and JSON, made once per content. */
  private readonly listJson = new WeakMap<string[], { digest: string; json: string }>();

  constructor(
    private readonly store: Store,
    private readonly feed: ChangeFeed,
    private readonly logger: RunnerLogger | undefined,
    options: HubOptions = {},
  ) {
    this.heartbeatSeconds = options.heartbeatSeconds ?? HEARTBEAT_SECONDS;
    this.helloTimeoutMs = options.helloTimeoutMs ?? HELLO_TIMEOUT_SECONDS * 1000;
    this.maxUnauthenticated = options.maxUnauthenticatedPerAddress ?? 16;
    this.maxBuffered = options.maxBufferedBytes ?? 32 * 1024 * 1024;
    this.daemons = store.daemons;
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: MAX_DAEMON_MESSAGE,
      // Frames to daemons are mostly small JSON or lists sent once: compression would cost CPU per connection.
      perMessageDeflate: false,
      handleProtocols: (offered) => (offered.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
    });
  }

  /** Serves the channel on `server`'s upgrade requests; any other upgrade path gets 404. */
  attach(server: { on(event: 'upgrade', listener: (req: IncomingMessage, socket: Duplex, head: Buffer) => void): unknown }): void {
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on('error', () => socket.destroy());
      const path = (req.url ?? '').split('?')[0];
      if (path !== CHANNEL_PATH || this.stopping) {
        const err = this.stopping ? apiError('API_INTERNAL', 'The control plane is shutting down') : apiError('API_NO_ROUTE', `No WebSocket endpoint here; the control channel is ${CHANNEL_PATH}`);
        const body = JSON.stringify(fail([err]));
        const status = this.stopping ? '503 Service Unavailable' : '404 Not Found';
        socket.end(`HTTP/1.1 ${status}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
        return;
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, req));
    });
  }

  start(): void {
    if (this.heartbeat !== undefined || this.stopping) return;
    this.unsubscribe = this.feed.subscribe(() => void this.refresh());
    this.heartbeat = setInterval(() => this.tick(), this.heartbeatSeconds * 1000);
    this.heartbeat.unref();
  }

  /** Closes every connection with 1001 and records them disconnected. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.unsubscribe?.();
    if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer);
    for (const c of [...this.conns]) this.close(c, CLOSE.GOING_AWAY, 'the control plane shuts down');
    // The close frames go out and most daemons answer at once; those that do not within a second are cut.
    for (let waited = 0; this.conns.size > 0 && waited < 1000; waited += 20) await new Promise((r) => setTimeout(r, 20));
    for (const c of [...this.conns]) c.ws.terminate();
    await this.refreshing;
    await this.flush();
    this.wss.close();
  }

  /** Bundles built since start (deployment reads): one per group and change, however many daemons share it. */
  get builds(): number {
    return this.buildCount;
  }

  /** Connections open now (authenticated or not). */
  get connections(): number {
    return this.conns.size;
  }

  /** Closes a revoked daemon's connection at once (the API's revocation; the CLI's reaches refresh()). */
  revoked(daemonId: string): void {
    const c = this.byDaemon.get(daemonId);
    if (c !== undefined) this.close(c, CLOSE.REVOKED, 'token revoked');
  }

  private accept(ws: WebSocket, req: IncomingMessage): void {
    const address = req.socket.remoteAddress ?? 'unknown';
    const c: Conn = {
      ws,
      address,
      daemon: undefined,
      group: undefined,
      helloTimer: undefined,
      lastHeard: Date.now(),
      seq: 0,
      inflight: undefined,
      offered: null,
      lists: new Set(),
      counters: undefined,
      countersDirty: false,
      closed: false,
      since: undefined,
      queue: Promise.resolve(),
    };
    this.conns.add(c);
    // The 'error' listener keeps a bad frame (too big: ws closes with 1009) from becoming an uncaught error.
    ws.on('error', (err) => this.logger?.warn({ address, err: err.message }, 'channel connection error'));
    ws.on('close', () => this.closed(c));
    ws.on('pong', () => (c.lastHeard = Date.now()));
    const waiting = (this.unauthenticated.get(address) ?? 0) + 1;
    this.unauthenticated.set(address, waiting);
    if (waiting > this.maxUnauthenticated) {
      this.close(c, CLOSE.TOO_MANY, `more than ${this.maxUnauthenticated} connections from ${address} waiting for hello`);
      return;
    }
    c.helloTimer = setTimeout(() => this.close(c, CLOSE.HELLO_TIMEOUT, `no hello within ${this.helloTimeoutMs / 1000} s`), this.helloTimeoutMs);
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (c.closed) return;
      c.lastHeard = Date.now();
      // Handled after the messages before it (a hello may still await the store).
      c.queue = c.queue.then(() => this.handle(c, data, isBinary));
    });
  }

  /** One message of a connection, after the ones before it; never rejects (a failure closes the connection). */
  private async handle(c: Conn, data: Buffer, isBinary: boolean): Promise<void> {
    if (c.closed) return;
    if (isBinary) return this.close(c, CLOSE.PROTOCOL_ERROR, 'binary frames are not part of the protocol: send JSON text frames');
    let msg: DaemonMessage;
    try {
      msg = parseDaemonMessage(data.toString('utf8'));
    } catch (err) {
      const e = err instanceof ProtocolError ? err : new ProtocolError(String(err));
      return this.close(c, e.close, e.message);
    }
    try {
      if (msg.type === 'hello') await this.hello(c, msg);
      else this.receive(c, msg);
    } catch (err) {
      this.logger?.error({ address: c.address, err: (err as Error).message }, 'channel message failed');
      this.close(c, CLOSE.INTERNAL, 'internal error');
    }
  }

  private receive(c: Conn, msg: Exclude<DaemonMessage, Hello>): void {
    if (c.daemon === undefined) return this.close(c, CLOSE.PROTOCOL_ERROR, `${msg.type} before hello: the first message is a hello`);
    if (msg.type === 'status') {
      c.counters = msg.counters;
      c.countersDirty = true;
      return;
    }
    // An ack: of the bundle in flight, nothing else.
    if (c.inflight === undefined || msg.seq !== c.inflight.seq) {
      return this.close(c, CLOSE.PROTOCOL_ERROR, `ack of seq ${msg.seq}, which is not the bundle in flight (${c.inflight === undefined ? 'none' : c.inflight.seq})`);
    }
    const sent = c.inflight;
    c.inflight = undefined;
    const at = nowStamp();
    if (msg.result === 'applied') {
      c.offered = msg.digest;
      this.record({ kind: 'applied', id: c.daemon.id, at, digest: msg.digest, versions: msg.versions, rulesets: msg.digest === sent.digest ? sent.rulesets : [] });
    } else {
      this.record({ kind: 'rejected', id: c.daemon.id, at, rejection: { digest: msg.digest, on: at, errors: msg.errors } });
    }
    this.pump(c);
  }

  private async hello(c: Conn, hello: Hello): Promise<void> {
    if (c.daemon !== undefined) return this.close(c, CLOSE.PROTOCOL_ERROR, 'a second hello: say hello once per connection');
    if (hello.protocol !== PROTOCOL_VERSION) {
      return this.close(c, CLOSE.UNSUPPORTED_PROTOCOL, `protocol ${hello.protocol} is not spoken here; this control plane speaks ${PROTOCOL_VERSION}`);
    }
    const daemon = await this.daemons.verify(hello.token);
    // Closed while the store answered (hello timeout, the peer left, shutdown): nothing more to do.
    if (c.closed) return;
    if (daemon === undefined) return this.close(c, CLOSE.UNAUTHORIZED, 'unknown token: create one with `moat daemons create`');
    if (daemon.revoked) return this.close(c, CLOSE.REVOKED, `token revoked (daemon ${daemon.name})`);
    this.authenticated(c);
    c.daemon = daemon;
    const older = this.byDaemon.get(daemon.id);
    if (older !== undefined) this.close(older, CLOSE.REPLACED, 'the same daemon connected again; this older connection is closed');
    this.byDaemon.set(daemon.id, c);
    for (const d of hello.lists) c.lists.add(d);
    c.offered = hello.digest;
    const welcome: Welcome = {
      type: 'welcome',
      protocol: PROTOCOL_VERSION,
      heartbeat_seconds: this.heartbeatSeconds,
      daemon: { id: daemon.id, name: daemon.name, account_id: daemon.account_id, zone_id: daemon.zone_id },
    };
    c.ws.send(JSON.stringify(welcome));
    const at = nowStamp();
    c.since = at;
    this.record({ kind: 'connected', id: daemon.id, at, remoteAddress: c.address, moatVersion: hello.moat });
    const group = await this.join(c, daemon);
    if (group === undefined) return;
    if (hello.digest === group.built.digest) {
      c.ws.send(JSON.stringify({ type: 'up_to_date', digest: group.built.digest }));
      this.record({ kind: 'applied', id: daemon.id, at, digest: group.built.digest, versions: group.built.versions, rulesets: group.built.rulesets });
      return;
    }
    this.pump(c);
  }

  /** The connection leaves the count of those waiting for hello (once). */
  private authenticated(c: Conn): void {
    if (c.helloTimer !== undefined) clearTimeout(c.helloTimer);
    c.helloTimer = undefined;
    const n = (this.unauthenticated.get(c.address) ?? 1) - 1;
    if (n <= 0) this.unauthenticated.delete(c.address);
    else this.unauthenticated.set(c.address, n);
  }

  /** Puts the connection in its group, building the group when it is the first; undefined when the connection closed meanwhile. */
  private async join(c: Conn, d: DaemonIdentity): Promise<Group | undefined> {
    const key = `${d.account_id}/${d.zone_id ?? ''}`;
    let g = this.groups.get(key);
    if (g === undefined) {
      let making = this.creating.get(key);
      if (making === undefined) {
        making = this.createGroup(key, d.account_id, d.zone_id);
        this.creating.set(key, making);
      }
      g = await making;
    }
    if (c.closed) {
      // A group nobody joined is not kept (as when its last connection closes).
      if (g.conns.size === 0 && this.groups.get(key) === g) this.groups.delete(key);
      return undefined;
    }
    g.conns.add(c);
    c.group = g;
    return g;
  }

  private async createGroup(key: string, accountId: string, zoneId: string | null): Promise<Group> {
    const signals = this.signals;
    try {
      // The fingerprint is read before the deployment: a commit between them leaves it older, never newer, than the bundle (the next refresh rebuilds).
      const fingerprint = await this.daemons.deploymentFingerprint(accountId, zoneId);
      const g: Group = { accountId, zoneId, fingerprint, built: await this.build(accountId, zoneId), conns: new Set() };
      this.groups.set(key, g);
      // A signal came while it was built: a refresh that ran meanwhile did not see this group.
      if (this.signals !== signals) void this.refresh();
      return g;
    } finally {
      this.creating.delete(key);
    }
  }

  /** Reads a group's deployment and serializes what every variant of its bundle shares. */
  private async build(accountId: string, zoneId: string | null): Promise<Built> {
    this.buildCount++;
    // Each list keeps one entry (its latest contents); deleted lists' stay until this bound clears them all.
    if (this.listMemo.size > 256) this.listMemo.clear();
    const dep = await readAccountDeployment(this.store, accountId, zoneId ?? undefined, this.listMemo);
    const names = Object.keys(dep.lists).sort();
    const lists = names.map((name) => {
      const entries = dep.lists[name]!;
      // An unchanged list is the same array (listMemo): its digest and JSON are made once per change, not per build.
      let made = this.listJson.get(entries);
      if (made === undefined) this.listJson.set(entries, (made = { digest: sha256(entries.join('\n')), json: JSON.stringify(entries) }));
      const { digest } = made;
      const key = JSON.stringify(name);
      return { name, digest, bare: `${key}:{"digest":"${digest}"}`, full: `${key}:{"digest":"${digest}","entries":${made.json}}` };
    });
    const content = { account: dep.account ?? null, zone: dep.zone ?? null, managed: dep.managed, lists: Object.fromEntries(lists.map((l) => [l.name, l.digest])) };
    const digest = sha256(JSON.stringify(content));
    const rulesets: RunningRuleset[] = [dep.account, dep.zone, ...dep.managed].filter((r) => r !== undefined).map((r) => ({ id: r.id, version: r.version }));
    const head = `"digest":"${digest}","account":${JSON.stringify(content.account)},"zone":${JSON.stringify(content.zone)},"managed":${JSON.stringify(content.managed)},"lists":{`;
    return { digest, head, lists: lists.map(({ digest: d, bare, full }) => ({ digest: d, bare, full })), variants: new Map(), rulesets, versions: { account: dep.account?.version ?? null, zone: dep.zone?.version ?? null } };
  }

  /** Sends the group's bundle when the connection has none in flight and does not run it already. */
  private pump(c: Conn): void {
    const g = c.group;
    if (c.closed || g === undefined || c.inflight !== undefined) return;
    const b = g.built;
    if (c.offered === b.digest) return;
    // A daemon that does not read: its socket's backlog drains first (the next heartbeat tries again).
    if (c.ws.bufferedAmount > this.maxBuffered) return;
    let key = '';
    for (const l of b.lists) key += c.lists.has(l.digest) ? '0' : '1';
    let rest = b.variants.get(key);
    if (rest === undefined) {
      rest = Buffer.from(`${b.head}${b.lists.map((l, i) => (key[i] === '1' ? l.full : l.bare)).join(',')}}}`, 'utf8');
      b.variants.set(key, rest);
    }
    c.seq++;
    c.inflight = { seq: c.seq, digest: b.digest, rulesets: b.rulesets };
    c.offered = b.digest;
    for (const l of b.lists) c.lists.add(l.digest);
    const prefix = Buffer.from(`{"type":"bundle","seq":${c.seq},`, 'utf8');
    if (rest.length <= 64 * 1024) {
      // One frame, one write: copying a small body costs less than a second frame's syscall (1,000 daemons: 1,000 writes, not 2,000).
      c.ws.send(Buffer.concat([prefix, rest]), { binary: false });
    } else {
      // Two fragments of one message: a body holding list contents is sent as is, never copied per connection.
      c.ws.send(prefix, { fin: false, binary: false });
      c.ws.send(rest, { fin: true, binary: false });
    }
  }

  /**
   * After a change signal: rebuild the groups whose deployment changed, push,
   * and close revoked daemons. Refreshes never overlap: signals during one
   * make it run once more (merged). Resolves when no refresh is left to run.
   */
  refresh(): Promise<void> {
    this.signals++;
    if (this.stopping) return Promise.resolve();
    if (this.refreshing !== undefined) {
      this.refreshAgain = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        await this.refreshOnce();
      } while (this.refreshAgain && !this.stopping);
      this.refreshing = undefined;
    })();
    return this.refreshing;
  }

  private async refreshOnce(): Promise<void> {
    try {
      for (const g of [...this.groups.values()]) {
        const fp = await this.daemons.deploymentFingerprint(g.accountId, g.zoneId);
        if (fp === g.fingerprint) continue;
        const before = g.built.digest;
        g.built = await this.build(g.accountId, g.zoneId);
        // Only once built: a build that failed is tried again on the next signal.
        g.fingerprint = fp;
        if (g.built.digest === before) continue;
        for (const c of g.conns) this.pump(c);
      }
      for (const id of await this.daemons.revokedAmong([...this.byDaemon.keys()])) this.revoked(id);
    } catch (err) {
      // The signal that brought this refresh is spent: without a retry, its daemons would wait for the next write.
      this.logger?.error({ err: (err as Error).message, retryInMs: REFRESH_RETRY_MS }, 'channel refresh failed; trying again');
      if (this.retryTimer === undefined && !this.stopping) {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = undefined;
          void this.refresh();
        }, REFRESH_RETRY_MS);
        this.retryTimer.unref();
      }
    }
  }

  /** Every heartbeat: ping, close the silent, retry bundles held back, write counters and last_seen in one transaction. */
  private tick(): void {
    const now = Date.now();
    const at = nowStamp();
    const limit = 3 * this.heartbeatSeconds * 1000;
    for (const c of this.conns) {
      if (c.closed) continue;
      if (now - c.lastHeard > limit) {
        this.close(c, CLOSE.DEAD, `nothing heard for ${3 * this.heartbeatSeconds} s`);
        continue;
      }
      c.ws.ping();
      if (c.daemon === undefined) continue;
      this.pending.push({ kind: 'seen', id: c.daemon.id, at, counters: c.countersDirty ? c.counters : undefined });
      c.countersDirty = false;
      this.pump(c);
    }
    void this.flush();
  }

  /** Status changes are written in batches: 1,000 hellos are one transaction, not 1,000. */
  private record(u: StatusUpdate): void {
    this.pending.push(u);
    if (this.flushTimer === undefined) {
      this.flushTimer = setTimeout(() => void this.flush(), 25);
      this.flushTimer.unref();
    }
  }

  /** Writes the pending status updates after the batches before them; resolves when they are written (or given up). */
  private flush(): Promise<void> {
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return this.flushing;
    this.flushing = this.flushing.then(async () => {
      if (this.store.closed) return;
      try {
        await this.daemons.recordStatus(batch);
      } catch (err) {
        // Status is worth less than the API's writes: a busy database drops one batch, the next heartbeat writes again.
        this.logger?.warn({ err: (err as Error).message, updates: batch.length }, 'fleet status not recorded');
      }
    });
    return this.flushing;
  }

  private close(c: Conn, code: number, reason: string): void {
    if (c.closed) return;
    c.closed = true;
    this.logger?.info({ address: c.address, daemon: c.daemon?.name, code, reason }, 'channel connection closed');
    c.ws.close(code, closeReason(reason));
    // A peer that does not answer the close frame is cut after 2 s.
    setTimeout(() => c.ws.terminate(), 2000).unref();
  }

  private closed(c: Conn): void {
    c.closed = true;
    if (!this.conns.delete(c)) return;
    if (c.daemon === undefined) this.authenticated(c);
    if (c.helloTimer !== undefined) clearTimeout(c.helloTimer);
    const g = c.group;
    if (g !== undefined) {
      g.conns.delete(c);
      // A group without connections is forgotten: its bundle is rebuilt when a daemon joins again.
      if (g.conns.size === 0) this.groups.delete(`${g.accountId}/${g.zoneId ?? ''}`);
    }
    if (c.daemon !== undefined && this.byDaemon.get(c.daemon.id) === c) {
      this.byDaemon.delete(c.daemon.id);
      this.record({ kind: 'disconnected', id: c.daemon.id, at: nowStamp(), since: c.since! });
    }
  }
}
