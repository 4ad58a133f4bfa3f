// LISTEN on a connection of its own, kept alive: PostgreSQL delivers a NOTIFY
// only to sessions listening at that moment, so when the connection is lost
// (server restart, failover, pg_terminate_backend, network) the listener
// reconnects with a growing pause, LISTENs again, and then calls onReconnect:
// what was notified in between is lost, and the caller catches up from the
// database (a control channel re-reads the latest versions). A notification is
// a hint, the database the truth.

import type * as pg from 'pg';
import { pgModule } from './pg-module.js';
import { mapPgError, type PgTarget } from './connection.js';

export interface ListenerOptions {
  /** Called for each notification on a channel listened to. */
  onNotify: (channel: string, payload: string) => void;
  /** Called after each reconnection, once listening again (not after the first connection). */
  onReconnect?: () => void;
  /** First pause before reconnecting (default 50 ms), doubled per failure up to maxDelayMs (default 5000). */
  minDelayMs?: number;
  maxDelayMs?: number;
  log?: { warn(msg: string): void };
}

/** A LISTEN session that comes back by itself. */
export class PgListener {
  /** Reconnections so far. */
  reconnects = 0;
  private client: pg.Client | undefined;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private delay: number;
  private readonly closeHooks: Array<() => void> = [];

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly target: PgTarget,
    private readonly channels: readonly string[],
    private readonly options: ListenerOptions,
  ) {
    this.delay = options.minDelayMs ?? 50;
  }

  /** Connects and listens; throws (8021/8022) when the first connection fails. */
  async start(): Promise<void> {
    await this.open();
  }

  /** The backend pid of the current session (undefined while reconnecting). */
  get pid(): number | undefined {
    return (this.client as unknown as { processID?: number } | undefined)?.processID;
  }

  private async open(): Promise<void> {
    const client = new (pgModule().Client)(this.config);
    let lost = false;
    const onLost = (err?: Error): void => {
      if (lost) return;
      lost = true;
      if (this.client === client) this.client = undefined;
      client.removeAllListeners('notification');
      // Ends the socket if still open; errors after this are of a connection we gave up.
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.options.log?.warn(`PostgreSQL ${this.target.description}: the LISTEN connection was lost (${err === undefined ? 'closed' : (mapPgError(err, this.target) as Error).message}); reconnecting`);
      this.schedule();
    };
    client.on('error', onLost);
    client.on('end', () => onLost());
    client.on('notification', (n) => {
      if (!this.closed) this.options.onNotify(n.channel, n.payload ?? '');
    });
    try {
      await client.connect();
      for (const channel of this.channels) await client.query(`LISTEN ${client.escapeIdentifier(channel)}`);
    } catch (err) {
      lost = true;
      client.removeAllListeners();
      client.on('error', () => undefined);
      await client.end().catch(() => undefined);
      throw mapPgError(err, this.target);
    }
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
  }

  private schedule(): void {
    if (this.closed || this.timer !== undefined) return;
    const wait = this.delay;
    this.delay = Math.min(this.delay * 2, this.options.maxDelayMs ?? 5000);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.open().then(
        () => {
          if (this.closed) return;
          this.delay = this.options.minDelayMs ?? 50;
          this.reconnects++;
          this.options.onReconnect?.();
        },
        (err: unknown) => {
          this.options.log?.warn(`PostgreSQL ${this.target.description}: cannot LISTEN again yet (${(err as Error).message}); retrying`);
          this.schedule();
        },
      );
    }, wait);
  }

  /** Runs `hook` once the listener is closed. */
  onClose(hook: () => void): void {
    this.closeHooks.push(hook);
  }

  /** Stops listening and closes the connection; no callback runs after it resolves. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const client = this.client;
    this.client = undefined;
    if (client !== undefined) await client.end().catch(() => undefined);
    for (const hook of this.closeHooks.splice(0)) hook();
  }
}
