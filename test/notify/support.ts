// Shared parts of the notification tests: a real database in a temporary
// directory, a pool directory backed by a set, health events, and a clock the
// test moves.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AlertingStore, Notifier, sqliteNotifyRepos, type Clock } from '../../src/notify/index.js';
import { Database, SqliteStore, newId, type HealthEvent } from '../../src/store/index.js';

/** A clock that only moves when the test says so. */
export class TestClock implements Clock {
  constructor(public t = Date.parse('2026-11-24T10:00:00Z')) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

/** A database with one account, the pools a test names, and the notify parts over it. */
export function notifyFixture(dir = mkdtempSync(join(tmpdir(), 'moat-notify-'))) {
  const store = Database.open(dir);
  const accountId = newId();
  const otherAccount = newId();
  store.write(() => {
    for (const a of [accountId, otherAccount]) store.db.prepare("INSERT OR IGNORE INTO accounts VALUES (?, '2026-01-01T00:00:00.000000Z')").run(a);
  });
  const pools = new Set<string>();
  const poolDirectory = { poolExists: (account: string, id: string) => account === accountId && pools.has(id) };
  const alerting = new AlertingStore(store, poolDirectory);
  // The asynchronous store over the same database, through which events are recorded as the health monitor records them.
  const asyncStore = new SqliteStore(store, (database) => sqliteNotifyRepos(database, poolDirectory));
  const clock = new TestClock();
  const notifier = new Notifier(clock);
  return {
    dir,
    store,
    accountId,
    otherAccount,
    pools,
    alerting,
    asyncStore,
    clock,
    notifier,
    /** Records an event as the health side does: the listener runs inside the write transaction. */
    emit(event: HealthEvent): Promise<void> {
      return asyncStore.write((tx) => notifier.onHealthEvent(event, tx));
    },
    outbox(): { policy_id: string | null; mechanism_type: string; target: string; payload: string; event_id: string; id: string; status: string; attempts: number }[] {
      return store.db.prepare('SELECT * FROM alert_outbox ORDER BY rowid').all() as never;
    },
    dispose(): void {
      store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A health event of `pool` (overrides merge in). */
export function healthEvent(accountId: string, pool: { id: string; name?: string; notificationEmail?: string; notificationFilter?: Record<string, unknown> | null }, over: Partial<HealthEvent> = {}): HealthEvent {
  return {
    id: newId(),
    accountId,
    eventSource: 'pool',
    pool: { id: pool.id, name: pool.name ?? 'web', notificationEmail: pool.notificationEmail ?? '', notificationFilter: pool.notificationFilter ?? null },
    oldHealth: 'healthy',
    newHealth: 'unhealthy',
    reason: 'HTTP 503',
    at: '2026-11-24T10:00:00.000000Z',
    ...over,
  };
}
