// A tiny TCP proxy on loopback for tests: a load balancer in front of control
// plane replicas (round robin over its backends, skipping one that refuses,
// so a killed replica's share goes to the others), or a path between a
// replica and PostgreSQL that a test can hold (new connections wait until
// released), refuse, or cut, to cut one replica off its database. Bytes pass as they are, so
// HTTP and WebSocket upgrades go through unchanged; when either side of a
// pair closes, the other is closed too, as a load balancer does.
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export interface Backend {
  host: string;
  port: number;
}

/** One client connection and the backend connection it is paired with. */
interface Pair {
  client: Socket;
  upstream: Socket | undefined;
}

export class TcpProxy {
  /** Connections the proxy made to backends so far, by backend port (which one each client went to). */
  readonly routed: number[] = [];
  private readonly pairs = new Set<Pair>();
  private next = 0;
  private held: Array<() => void> | undefined;
  private refusing = false;

  private constructor(
    private readonly server: Server,
    readonly port: number,
    private backends: Backend[],
  ) {}

  /** Listens on 127.0.0.1 (a kernel-chosen port) in front of `backends`. */
  static async start(backends: Backend[]): Promise<TcpProxy> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const proxy = new TcpProxy(server, (server.address() as { port: number }).port, backends);
    server.on('connection', (client) => proxy.accept(client));
    return proxy;
  }

  /** host:port of the proxy. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Local ports of the connections to backends that are open now (as the backend sees them: its peers' ports). */
  upstreamPorts(): number[] {
    return [...this.pairs].flatMap((p) => (p.upstream?.localPort === undefined ? [] : [p.upstream.localPort]));
  }

  /** New connections wait (accepted, not forwarded) until release(); open ones keep flowing. */
  hold(): void {
    this.held ??= [];
  }

  /** Forwards the connections that waited, and new ones again. */
  release(): void {
    const waiting = this.held ?? [];
    this.held = undefined;
    for (const go of waiting) go();
  }

  /** New connections are closed at once (a backend refusing), until accept(). */
  refuse(): void {
    this.refusing = true;
  }

  /** New connections are forwarded again after refuse(). */
  acceptAgain(): void {
    this.refusing = false;
  }

  /** Closes every open pair (a network cut) but those whose backend side uses a port of `except`; the proxy keeps listening. */
  cut(except: readonly number[] = []): void {
    for (const p of this.pairs) {
      if (p.upstream?.localPort !== undefined && except.includes(p.upstream.localPort)) continue;
      p.client.destroy();
      p.upstream?.destroy();
    }
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const pair: Pair = { client, upstream: undefined };
    this.pairs.add(pair);
    client.on('error', () => undefined);
    client.on('close', () => {
      this.pairs.delete(pair);
      pair.upstream?.destroy();
    });
    if (this.refusing) {
      client.destroy();
      return;
    }
    client.pause();
    const go = (): void => this.connect(pair, 0);
    if (this.held !== undefined) this.held.push(go);
    else go();
  }

  /** Connects to the next backend in turn; one that refuses is skipped, and with none left the client is closed. */
  private connect(pair: Pair, tried: number): void {
    if (pair.client.destroyed) return;
    if (tried >= this.backends.length) {
      pair.client.destroy();
      return;
    }
    const backend = this.backends[this.next++ % this.backends.length]!;
    const upstream = createConnection({ host: backend.host, port: backend.port });
    let connected = false;
    upstream.once('connect', () => {
      connected = true;
      pair.upstream = upstream;
      this.routed.push(backend.port);
      upstream.pipe(pair.client);
      pair.client.pipe(upstream);
      pair.client.resume();
    });
    upstream.on('error', () => {
      if (!connected) this.connect(pair, tried + 1);
    });
    upstream.on('close', () => {
      if (connected) pair.client.destroy();
    });
  }
}
