// The delivery worker: a runner of `moat serve` that claims due notifications
// from the outbox, sends them (a few at a time), and records each attempt:
// success, a retry at the next step of the schedule (later if the receiver's
// Retry-After asks), or a give-up after the last step. `runOnce` does one
// pass at the clock's time, which is how tests walk days of schedule in
// milliseconds; `start` loops over it, sleeping until the next row is due or
// until new rows are queued.

import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';
import { newId, nowStamp, type OutboxRepo, type Store } from '../store/index.js';
import { DEPRECATION_ALERT, type DeprecationNotices } from './deprecation.js';
import type { NotificationPayload } from './notifier.js';
import type { AttemptOutcome, OutboxRow } from './outbox.js';
import { retryDelay, SYSTEM_CLOCK, type Clock } from './schedule.js';
import { postWebhook, WEBHOOK_TIMEOUT_MS, type Mailer } from './senders.js';

/** Where the worker reports (pino fits). */
export interface DeliveryLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** What the worker is built from. */
export interface DeliveryOptions {
  store: Store;
  mailer: Mailer;
  clock?: Clock | undefined;
  /** Random source of the jitter (default Math.random). */
  random?: (() => number) | undefined;
  /** How long a claim holds a row (default 60 s: longer than a webhook's 15 s timeout or an SMTP exchange). */
  leaseMs?: number | undefined;
  /** Deliver to loopback, link-local and private addresses (`--allow-private-webhooks`). */
  allowPrivateWebhooks?: boolean | undefined;
  /** Notifications sent at once (default 8). */
  concurrency?: number | undefined;
  /** Longest sleep between looks at the outbox (default 1 s; other processes may queue rows). */
  pollMs?: number | undefined;
  logger?: DeliveryLogger | undefined;
  /** Deprecation notices of legacy notification_email addresses, queued by the worker's passes. */
  deprecation?: DeprecationNotices | undefined;
  /** How often the passes look for due deprecation notices (default 60 s of the clock). */
  deprecationCheckMs?: number | undefined;
}

/** How long stop() waits for deliveries in flight. */
const STOP_GRACE_MS = 2000;

/** The note appended to legacy pool emails until the pool's notification_email is cleared. */
export function legacyNote(pool: string): string {
  return (
    `\n\nYou receive this email because pool ${pool} lists your address in notification_email, which is deprecated. ` +
    'Create a notification policy (alert type load_balancing_health_alert) and set notification_email to "" on every pool.'
  );
}

/** Sends the outbox's notifications. */
export class DeliveryWorker {
  readonly name = 'notification delivery';
  readonly outbox: OutboxRepo;
  /** This worker's claim owner id (pid space, pid and a random part). */
  readonly owner = `${PID_SPACE}:${process.pid}:${newId().slice(0, 8)}`;
  private readonly clock: Clock;
  private readonly random: () => number;
  private readonly leaseMs: number;
  private readonly concurrency: number;
  private readonly pollMs: number;
  private running = false;
  private loop: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private wakeUp: (() => void) | undefined;
  private nextDeprecationCheck = 0;
  private orphansReleased = false;
  private nextPrune = 0;

  constructor(private readonly o: DeliveryOptions) {
    this.outbox = o.store.outbox;
    this.clock = o.clock ?? SYSTEM_CLOCK;
    this.random = o.random ?? Math.random;
    this.leaseMs = o.leaseMs ?? 60_000;
    this.concurrency = o.concurrency ?? 8;
    this.pollMs = o.pollMs ?? 1000;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  /**
   * Stops taking work. A delivery in flight is given a moment to finish
   * (STOP_GRACE_MS), not its whole timeout: one that does not finish is
   * sent again after its lease, with the same id.
   */
  async stop(): Promise<void> {
    this.running = false;
    this.wake();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.loop, new Promise<void>((resolve) => (timer = setTimeout(resolve, STOP_GRACE_MS)))]);
    clearTimeout(timer);
    this.o.mailer.close();
  }

  /**
   * Pools were written: check the legacy addresses at the next pass instead of
   * up to deprecationCheckMs later, so an address set on a pool is told of the
   * deprecation within seconds, like its first health email.
   */
  legacyChanged(): void {
    this.nextDeprecationCheck = 0;
    this.wake();
  }

  /** New rows were queued: look now instead of at the next poll. */
  wake(): void {
    const w = this.wakeUp;
    this.wakeUp = undefined;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    w?.();
  }

  private async run(): Promise<void> {
    while (this.running) {
      let sent = 0;
      let due: number | undefined;
      try {
        sent = await this.runOnce();
        // Inside the try: a store that fails here (PostgreSQL unreachable, a
        // closed database) must not end the loop with an unhandled rejection,
        // which would stop the process; the next pass retries after pollMs.
        if (this.running && sent === 0) due = await this.outbox.nextDue();
      } catch (err) {
        this.o.logger?.error({ err }, 'notification delivery pass failed; retrying');
      }
      if (!this.running) break;
      if (sent > 0) continue;
      const wait = Math.max(0, Math.min(this.pollMs, due === undefined ? this.pollMs : due - this.clock.now()));
      await new Promise<void>((resolve) => {
        this.wakeUp = resolve;
        this.timer = setTimeout(() => this.wake(), wait);
      });
    }
  }

  /** One pass: claims what is due now, sends it, records the outcomes; returns how many were attempted. */
  async runOnce(): Promise<number> {
    if (!this.orphansReleased) {
      // Once per worker: rows held by a dead process of this host (the server before a SIGKILL) are due now, not after their lease.
      this.orphansReleased = true;
      const freed = await this.outbox.releaseDeadOwners(PID_SPACE, pidAlive, this.clock.now());
      if (freed > 0) this.o.logger?.info({ freed }, 'notification delivery: took back the notifications of a worker that is gone');
    }
    const { deprecation } = this.o;
    if (deprecation !== undefined && this.clock.now() >= this.nextDeprecationCheck) {
      this.nextDeprecationCheck = this.clock.now() + (this.o.deprecationCheckMs ?? 60_000);
      await deprecation.run(this.clock.now());
    }
    if (this.clock.now() >= this.nextPrune) {
      this.nextPrune = this.clock.now() + 3_600_000;
      await this.outbox.prune(this.clock.now());
    }
    // As many rows as there are lanes, each sent at once: a row claimed to
    // wait behind others could outlive its lease (100 rows through 8 lanes of
    // 15 s timeouts is 3 minutes) and be sent by another replica meanwhile.
    const rows = await this.outbox.claim(this.owner, this.clock.now(), this.leaseMs, this.concurrency);
    let next = 0;
    const lane = async (): Promise<void> => {
      while (next < rows.length) {
        const row = rows[next++]!;
        const outcome = await this.attempt(row).catch((err: Error): AttemptOutcome => ({ ok: false, code: row.mechanism_type === 'email' ? 9401 : 9400, error: err.message }));
        await this.finish(row, outcome);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.concurrency, rows.length) }, lane));
    return rows.length;
  }

  private async attempt(row: OutboxRow): Promise<AttemptOutcome> {
    const payload = JSON.parse(row.payload) as NotificationPayload;
    if (row.mechanism_type === 'email') {
      const text =
        payload.alert_type === DEPRECATION_ALERT
          ? payload.text
          : payload.legacy_pool === undefined
            ? `${payload.text}\n\nNotification policy: ${payload.name}`
            : payload.text + legacyNote(payload.legacy_pool);
      return this.o.mailer.send({ id: row.id, to: row.target, subject: payload.subject, text });
    }
    const target = await this.o.store.alerting.webhookTarget(row.account_id, row.target);
    if (target === undefined) return { ok: false, code: 9400, error: `webhook destination ${row.target} was deleted`, final: true };
    // webhook-timestamp is wall-clock time, not the schedule's clock: receivers check it against theirs.
    // The attempt ends within half the lease, so no other worker takes the row over while it is still being sent.
    const timeoutMs = Math.min(WEBHOOK_TIMEOUT_MS, Math.floor(this.leaseMs / 2));
    return postWebhook({ url: target.url, secret: target.secret, id: row.id, body: JSON.stringify(payload.body), timestampSeconds: Math.floor(Date.now() / 1000) }, this.o.allowPrivateWebhooks === true, timeoutMs);
  }

  /**
   * Records an attempt. The outcomes of the lanes finishing in one turn of
   * the event loop share a commit (group commit): one fsync per outcome held
   * loopback delivery to about 600 webhooks a second.
   */
  private async finish(row: OutboxRow, outcome: AttemptOutcome): Promise<void> {
    // Stopped and closed while this attempt ran: the lease brings the row back.
    if (this.o.store.closed) return;
    const now = this.clock.now();
    const delay = outcome.ok ? undefined : retryDelay(row.attempts + 1, this.random, outcome.retryAfterMs);
    const result = await this.o.store.write(async (tx) => {
      const r = await tx.outbox.record(row, now, outcome, delay === undefined ? undefined : now + delay);
      if (row.mechanism_type === 'webhook') await tx.alerting.markWebhook(row.target, outcome.ok, nowStamp(new Date(now)));
      return r;
    });
    const info = { notification: row.id, mechanism: row.mechanism_type, target: row.target, attempt: row.attempts + 1, status: outcome.statusCode, error: outcome.error };
    if (result === 'stale') this.o.logger?.warn(info, 'notification attempt not recorded: its lease ran out and another worker holds the row (it is sent again with the same id)');
    else if (result === 'gave_up') this.o.logger?.error({ ...info, code: 9402 }, 'notification given up');
    else if (result === 'retry') this.o.logger?.warn({ ...info, code: outcome.code, retryInMs: delay }, 'notification delivery failed; will retry');
  }
}

/**
 * The space in which this process's pid means something: the host name, the
 * kernel's boot id and the pid namespace. Replicas on one host name in other
 * pid namespaces (containers sharing the host's network and name) or after a
 * reboot cannot test each other's pids: their rows wait for their lease
 * instead of being freed at start. The host name alone let a replica in a
 * container free, as dead, the rows of a live replica in another.
 */
export const PID_SPACE = pidSpace();

function pidSpace(): string {
  const read = (f: () => string): string => {
    try {
      return f().trim();
    } catch {
      return '?';
    }
  };
  const boot = read(() => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8')).slice(0, 8);
  // "pid:[4026531836]": the namespace's inode.
  const ns = read(() => readlinkSync('/proc/self/ns/pid')).replace(/\D/g, '');
  return `${hostname()}/${boot}/${ns}`;
}

/** Whether a process of this pid space runs with `pid` (EPERM: it does, as another user). */
function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
