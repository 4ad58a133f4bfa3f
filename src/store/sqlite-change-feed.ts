// The change feed of one SQLite file: this process's commits (told at once)
// combined with PRAGMA data_version, polled, which changes when another
// connection to the same file commits: `moat lists load-managed`, `moat
// managed import`, `moat daemons revoke`, a second `moat serve`. A signal
// carries nothing: listeners read what changed (cheap fingerprints), so
// signals may be merged or spurious. PostgreSQL's feed (LISTEN/NOTIFY) keeps
// the same contract (ChangeFeed in types.ts).

import type { Database } from './database.js';
import type { ChangeFeed } from './types.js';

/** Milliseconds between two data_version reads: a commit of another process is seen within this. */
export const DEFAULT_POLL_MS = 150;

/** The change feed of one SQLite file. */
export class SqliteChangeFeed implements ChangeFeed {
  readonly name = 'change-feed';
  private readonly listeners = new Set<() => void>();
  private timer: NodeJS.Timeout | undefined;
  private unhook: (() => void) | undefined;
  private version = 0;
  private scheduled = false;

  constructor(
    private readonly store: Database,
    private readonly pollMs: number = DEFAULT_POLL_MS,
  ) {}

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  start(): void {
    if (this.timer !== undefined) return;
    this.version = this.dataVersion();
    // Own commits: told by the store right after COMMIT; the signal goes out
    // after the writer's turn, so the API's answer is never held up by it.
    this.unhook = this.store.onCommit(() => this.signal());
    this.timer = setInterval(() => {
      const v = this.dataVersion();
      if (v !== this.version) {
        this.version = v;
        this.signal();
      }
    }, this.pollMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.unhook?.();
    this.unhook = undefined;
  }

  private dataVersion(): number {
    return this.store.db.open ? (this.store.db.pragma('data_version', { simple: true }) as number) : this.version;
  }

  /** Several commits in one turn are one signal. */
  private signal(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      for (const l of this.listeners) l();
    });
  }
}
