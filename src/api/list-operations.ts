// The runner of asynchronous list bulk operations. The API queues an operation
// in the bulk_operations table and answers at once; this runner applies queued
// operations in the background, oldest first and one at a time, each in its
// own transaction, and picks up whatever a previous process left queued. It
// also looks every pollMs: replicas share one queue (PostgreSQL), and an
// operation queued or left half-applied by a replica that died wakes no other.

import type { ListsRepo } from '../store/index.js';
import type { Runner, RunnerLogger } from './runner.js';

/** The runner, with the hook the lists service calls after queueing. */
export interface ListOperationsRunner extends Runner {
  /** Says there may be new work; a started runner takes it on the next turn of the event loop. */
  wake(): void;
}

/** Options of the runner. */
export interface ListOperationsOptions {
  lists: ListsRepo;
  /** Items a list may hold; an operation that would pass it fails. */
  maxListItems: number;
  logger?: RunnerLogger | undefined;
  /** How often a started runner looks at the queue unasked (default 2 s). */
  pollMs?: number | undefined;
}

/**
 * A runner, not yet started. start() wakes it once, so operations left pending
 * by a stopped process resume without waiting for a new request; until then
 * queued work stays in the table.
 */
export function createListOperations(options: ListOperationsOptions): ListOperationsRunner {
  const { lists, maxListItems, logger } = options;
  let started = false;
  let stopped = false;
  let current: Promise<void> | undefined;
  let poll: NodeJS.Timeout | undefined;
  // The head of the queue is being applied by another process: wait for the poll, not loop on it.
  let heldElsewhere = false;

  // Yields to the event loop between steps so requests (the status endpoint
  // included) are answered while a queue drains; applying one operation is a
  // single transaction.
  const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

  async function drain(): Promise<void> {
    await tick();
    while (!stopped) {
      const next = await lists.nextOperation();
      if (next === undefined) return;
      try {
        await lists.markRunning(next.id);
        await tick();
        if (stopped) return;
        const status = await lists.applyOperation(next.id, maxListItems);
        if (status === 'running') {
          // Another replica holds it (and the queue is FIFO): look again at the next poll.
          heldElsewhere = true;
          return;
        }
        logger?.info({ operation: next.id, list: next.listId, status }, 'list bulk operation finished');
      } catch (err) {
        // Only a busy database gets here (another process holds the write
        // lock); the operation stays queued and is retried shortly.
        logger?.warn({ err, operation: next.id }, 'list bulk operation postponed');
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  }

  function wake(): void {
    if (!started || stopped || current !== undefined) return;
    heldElsewhere = false;
    current = drain()
      .catch((err: unknown) => {
        logger?.error({ err }, 'list bulk operations runner failed');
      })
      .finally(() => {
        current = undefined;
        // Work queued while the last step ran is picked up here (a failed look is retried by the next wake).
        if (stopped || heldElsewhere) return;
        lists.nextOperation().then(
          (more) => {
            if (more !== undefined) wake();
          },
          () => undefined,
        );
      });
  }

  return {
    name: 'list bulk operations',
    wake,
    start() {
      started = true;
      poll = setInterval(wake, options.pollMs ?? 2000);
      poll.unref();
      wake();
    },
    async stop() {
      stopped = true;
      clearInterval(poll);
      await current;
    },
  };
}
