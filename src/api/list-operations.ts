// The runner of asynchronous list bulk operations. The API queues an operation
// in the bulk_operations table and answers at once; this runner applies queued
// operations in the background, oldest first and one at a time, each in its
// own transaction, and picks up whatever a previous process left queued.

import type { ListStore } from '../store/index.js';

/** The runner of list bulk operations. */
export interface ListOperations {
  /** Stops taking work and waits for the running operation to end. */
  stop(): Promise<void>;
}

/** The runner with the hooks the lists routes use. */
export interface ListOperationsRunner extends ListOperations {
  /** Says there may be new work; the runner starts on the next turn of the event loop. */
  wake(): void;
  /** Resolves when nothing is queued or running (tests and shutdown use it). */
  idle(): Promise<void>;
}

/** Where the runner reports (fastify's and pino's loggers fit). */
export interface RunnerLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Options of the runner. */
export interface ListOperationsOptions {
  lists: ListStore;
  /** Items a list may hold; an operation that would pass it fails. */
  maxListItems: number;
  logger?: RunnerLogger | undefined;
}

/**
 * Starts a runner and wakes it once, so operations left pending by a stopped
 * process resume without waiting for a new request.
 */
export function startListOperations(options: ListOperationsOptions): ListOperationsRunner {
  const { lists, maxListItems, logger } = options;
  let stopped = false;
  let current: Promise<void> | undefined;

  // Yields to the event loop between steps so requests (the status endpoint
  // included) are answered while a queue drains; applying one operation is a
  // single synchronous transaction.
  const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

  async function drain(): Promise<void> {
    await tick();
    while (!stopped) {
      const next = lists.nextOperation();
      if (next === undefined) return;
      try {
        lists.markRunning(next.id);
        await tick();
        if (stopped) return;
        const status = lists.applyOperation(next.id, maxListItems);
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
    if (stopped || current !== undefined) return;
    current = drain()
      .catch((err: unknown) => {
        logger?.error({ err }, 'list bulk operations runner failed');
      })
      .finally(() => {
        current = undefined;
        // Work queued while the last step ran is picked up here.
        let more = false;
        try {
          more = !stopped && lists.nextOperation() !== undefined;
        } catch {
          more = false;
        }
        if (more) wake();
      });
  }

  wake();
  return {
    wake,
    async idle() {
      while (current !== undefined) await current;
    },
    async stop() {
      stopped = true;
      await current;
    },
  };
}
