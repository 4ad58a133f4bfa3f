// The change feed of a PostgreSQL store: "something may have changed"
// signals to the control channel's hub, from this store's commits (told by
// PgStore right after COMMIT) and from other replicas' (their NOTIFY on
// CHANGES_CHANNEL, received by the store's LISTEN connection), plus one after
// each reconnection of that connection, since what was notified while it was
// down is lost: the listeners then catch up by reading the database. Same
// contract as SqliteChangeFeed (ChangeFeed in ../types.ts): signals carry
// nothing, may be merged or spurious, never missing.

import type { ChangeFeed } from '../types.js';

/** The channel every Moat store NOTIFYs on after a write (the payload: see PgStore). */
export const CHANGES_CHANNEL = 'moat_changes';

export class PgChangeFeed implements ChangeFeed {
  readonly name = 'change-feed';
  private readonly listeners = new Set<() => void>();
  private started = false;
  private scheduled = false;

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Signals flow from now on (the LISTEN connection is the store's, open since PgStore.open). */
  start(): void {
    this.started = true;
  }

  async stop(): Promise<void> {
    this.started = false;
    await Promise.resolve();
  }

  /**
   * Called by the store: after a commit of its own, a notification of another
   * store, a reconnection. Several in one turn are one signal, sent after the
   * turn, so a writer's answer is never held up by the listeners.
   */
  signal(): void {
    if (!this.started || this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (!this.started) return;
      for (const l of this.listeners) l();
    });
  }
}
