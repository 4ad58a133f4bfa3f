// Background runners of the control plane (list bulk operations today; health
// probes and a notification outbox join them). Each is started once the server
// listens, so a server that cannot bind starts no work, and stopped when the
// server closes, last started first.

/** Where a runner reports (fastify's and pino's loggers fit). */
export interface RunnerLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** A background job with a lifetime: start() takes up work, stop() waits for the running step to end. */
export interface Runner {
  /** A short name for logs. */
  readonly name: string;
  start(): void;
  stop(): Promise<void>;
}

/** The runners of one server, started and stopped together. */
export class Runners {
  private state: 'new' | 'started' | 'stopped' = 'new';

  constructor(private readonly all: readonly Runner[]) {}

  /** Whether start() ran (and stop() has not). */
  get started(): boolean {
    return this.state === 'started';
  }

  /** Starts every runner once; after stop() nothing starts again. */
  start(): void {
    if (this.state !== 'new') return;
    this.state = 'started';
    for (const r of this.all) r.start();
  }

  /** Stops every runner, in the reverse order of start. */
  async stop(): Promise<void> {
    this.state = 'stopped';
    for (const r of [...this.all].reverse()) await r.stop();
  }
}
