// PLACEHOLDER: replaced by s10-pg2b at merge
// The PostgreSQL outbox repository is written on another branch; this stand-in
// only lets PgStore compile. Every method throws: nothing may depend on it.

import type { OutboxRepo } from '../types.js';
import type { PgRepoContext } from './pg-repo-context.js';

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export class PgOutboxRepo {
  constructor(readonly ctx: PgRepoContext) {
    return new Proxy(this, {
      get: (target, prop) => (prop in target ? (target as unknown as Record<string | symbol, unknown>)[prop] : () => Promise.reject(new Error(`PgOutboxRepo.${String(prop)}: not written yet (placeholder)`))),
    });
  }
}
// The placeholder's methods exist only through its Proxy.
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type
export interface PgOutboxRepo extends OutboxRepo {}
