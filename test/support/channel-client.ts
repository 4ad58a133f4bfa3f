// A daemon's side of the control channel as tests drive it: a plain `ws`
// client that says hello, collects what the control plane sends, acks on
// demand and reports how the connection closed. It speaks the protocol as
// README documents it, independently of the hub's code.
import { createHash } from 'node:crypto';
import WebSocket from 'ws';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary messages and assert on their shape
export type Msg = any;

/** How a connection ended. */
export interface Closed {
  code: number;
  reason: string;
}

/** The SHA-256 of a list's entries as the protocol defines it (joined with "\n"), computed here, not by the hub. */
export function listDigest(entries: readonly string[]): string {
  return createHash('sha256').update(entries.join('\n'), 'utf8').digest('hex');
}

/** One test daemon connection. */
export class ChannelClient {
  readonly messages: Msg[] = [];
  readonly closed: Promise<Closed>;
  private waiters: Array<() => void> = [];
  private cursor = 0;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      this.messages.push(isBinary ? { type: '<binary>' } : JSON.parse(data.toString('utf8')));
      for (const w of this.waiters.splice(0)) w();
    });
    this.closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    void this.closed.then(() => {
      for (const w of this.waiters.splice(0)) w();
    });
    ws.on('error', () => undefined);
  }

  /** Opens a connection to `url` (ws:// or wss://, the channel's path included). */
  static open(url: string, options: WebSocket.ClientOptions = {}): Promise<ChannelClient> {
    const ws = new WebSocket(url, options);
    const c = new ChannelClient(ws);
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(c));
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    });
  }

  /** Opens and says hello with `token` (digest and lists as given). */
  static async hello(url: string, token: string, extra: { digest?: string | null; lists?: string[]; moat?: string } = {}, options: WebSocket.ClientOptions = {}): Promise<ChannelClient> {
    const c = await ChannelClient.open(url, options);
    c.send({ type: 'hello', protocol: 1, token, moat: extra.moat ?? '0.0.0-test', digest: extra.digest ?? null, lists: extra.lists ?? [] });
    return c;
  }

  send(message: unknown): void {
    this.ws.send(typeof message === 'string' ? message : JSON.stringify(message));
  }

  /** The next message not read yet (of `type` when given, skipping others), within `ms`. */
  async next(type?: string, ms = 5000): Promise<Msg> {
    const deadline = Date.now() + ms;
    for (;;) {
      while (this.cursor < this.messages.length) {
        const m = this.messages[this.cursor++];
        if (type === undefined || m.type === type) return m;
      }
      const left = deadline - Date.now();
      if (left <= 0 || this.ws.readyState === WebSocket.CLOSED) throw new Error(`no ${type ?? 'message'} within ${ms} ms; got ${JSON.stringify(this.messages.map((x: Msg) => x.type))}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** Nothing more of `type` arrives within `ms` (the messages read so far excepted). */
  async nothingMore(type: string, ms: number): Promise<void> {
    await new Promise((r) => setTimeout(r, ms));
    const extra = this.messages.slice(this.cursor).filter((m: Msg) => m.type === type);
    if (extra.length > 0) throw new Error(`unexpected ${type}: ${JSON.stringify(extra).slice(0, 300)}`);
  }

  /** Acks a bundle as applied, with the versions it carries. */
  applied(bundle: Msg): void {
    this.send({ type: 'ack', seq: bundle.seq, result: 'applied', digest: bundle.digest, versions: { account: bundle.account?.version ?? null, zone: bundle.zone?.version ?? null } });
  }

  close(): void {
    this.ws.close();
  }
}
