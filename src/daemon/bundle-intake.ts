// What the daemon does with a message of its control plane before the
// daemon's reload: parse it and, for a bundle, check it (its shape, each
// list's entries against its digest) and write its files to the state
// directory. With a 100k-prefix list a bundle message is ~2 MB of JSON, and
// this costs 15-25 ms warm, ~100 ms cold: so a large message goes to a worker
// thread (intake-worker.ts) as its raw bytes, and only the small result comes
// back to the packet loop. A small one (a rules-only change, a welcome) is
// taken in thread, where it costs less than the round trip would.

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { z } from 'zod';
import type { Bundle } from '../channel/index.js';
import { BundleCache, listDigest, listText, type CachedBundle } from './bundle-cache.js';

const digest = z.string().regex(/^[0-9a-f]{64}$/);
const object = z.record(z.string(), z.unknown());
// What the daemon reads of the control plane's bundles; unknown fields are ignored (a newer control plane may add some).
const bundleSchema = z.object({
  type: z.literal('bundle'),
  seq: z.number().int().min(1),
  digest,
  account: object.nullable(),
  zone: object.nullable(),
  managed: z.array(object),
  lists: z.record(
    z.string().regex(/^[a-z0-9_]+(\.[a-z0-9_]+)*$/, 'a list name'),
    // An entry is one line of the list file it is written to.
    z.object({ digest, entries: z.array(z.string().regex(/^[^\r\n]*$/, 'one entry, without line breaks')).optional() }),
  ),
});

/** A message taken: a bundle written and ready to load, a protocol error (close), a bundle the state directory could not take, or any other message, parsed. */
export type IntakeResult =
  | { readonly kind: 'bundle'; readonly seq: number; readonly bundle: CachedBundle }
  | { readonly kind: 'protocol'; readonly why: string }
  | { readonly kind: 'unwritable'; readonly seq: number; readonly digest: string; readonly message: string }
  | { readonly kind: 'message'; readonly message: unknown };

/** The first issue of a zod error, as a close reason says it. */
export function issue(e: z.ZodError): string {
  const i = e.issues[0];
  return i === undefined ? 'invalid' : `${i.path.join('.') || 'message'}: ${i.message}`;
}

/** Takes one message's text (see IntakeResult); never throws for what the message holds. */
export async function intakeMessage(text: string, cache: BundleCache): Promise<IntakeResult> {
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch {
    return { kind: 'protocol', why: 'a message is not JSON' };
  }
  if (typeof msg !== 'object' || msg === null || (msg as { type?: unknown }).type !== 'bundle') return { kind: 'message', message: msg };
  const parsed = bundleSchema.safeParse(msg);
  if (!parsed.success) return { kind: 'protocol', why: `bundle: ${issue(parsed.error)}` };
  const b = parsed.data as Bundle;
  // Each list's text is made once: its digest is checked on it, and it is what the file holds.
  const texts = new Map<string, string>();
  for (const [name, l] of Object.entries(b.lists)) {
    if (l.entries !== undefined) {
      const t = listText(l.entries);
      if (listDigest(t) !== l.digest) return { kind: 'protocol', why: `list ${name}: its entries do not match its digest` };
      texts.set(l.digest, t);
    } else if (!(await cache.hasList(l.digest))) {
      // Per the protocol: close, and the next hello says which lists this daemon holds.
      return { kind: 'protocol', why: `list ${name}: contents ${l.digest.slice(0, 12)} not held here` };
    }
  }
  try {
    // Not yet durable: the swap need not wait for the disk (the ack does: ChannelBundleSource persists first).
    for (const [d, t] of texts) await cache.writeList(d, t);
    return { kind: 'bundle', seq: b.seq, bundle: await cache.writeBundle(b) };
  } catch (err) {
    return { kind: 'unwritable', seq: b.seq, digest: b.digest, message: (err as Error).message };
  }
}

/** Messages up to this size are taken on the event loop (parsing and writing them costs well under a millisecond). */
export const INTAKE_IN_THREAD_BYTES = 64 * 1024;

/**
 * A request to the intake worker, on the state directory: a message's bytes
 * to take (transferred, or copied once into shared memory), or the state
 * directory to tidy (BundleCache.prune, keeping `keep` besides the bundles
 * current.json names).
 */
export type IntakeRequest =
  | { readonly id: number; readonly stateDir: string; readonly bytes: ArrayBuffer | SharedArrayBuffer }
  | { readonly id: number; readonly stateDir: string; readonly prune: readonly string[] };

/** The worker's answer: a message taken, or the state directory tidied (with the error that stopped it, if any). */
export type IntakeReply = { readonly id: number; readonly result: IntakeResult } | { readonly id: number; readonly pruned: string | null };

/** The worker's script, as for the loader (see loaderWorkerScript): from the sources, the built one in dist/. */
export function intakeWorkerScript(): URL {
  return import.meta.url.endsWith('.ts') ? new URL('../../dist/src/daemon/intake-worker.js', import.meta.url) : new URL('./intake-worker.js', import.meta.url);
}

/** What the intake thread is started with. */
export interface IntakeWorkerData {
  /** Its nice value (lowered: parsing a 2 MB message must not take the CPU from the packet loop); undefined: left as inherited. */
  readonly nice: number | undefined;
}

/**
 * Takes the channel's messages: large ones in a worker thread ('worker'), or
 * all on the event loop ('in-thread': what the daemon did before, kept for
 * comparison, and used when the worker's script is not built).
 */
export class BundleIntake {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, { resolve: (r: IntakeReply) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  /** Messages the worker took, and of them those whose bytes were moved rather than copied (for tests and the benchmark). */
  taken = 0;
  moved = 0;
  readonly mode: 'worker' | 'in-thread';
  /** The thread's nice value (capture.priority.background), set before the first message; undefined: left as inherited. */
  nice: number | undefined;

  constructor(
    private readonly cache: BundleCache,
    mode?: 'worker' | 'in-thread',
    private readonly script: URL = intakeWorkerScript(),
  ) {
    this.mode = mode ?? (existsSync(fileURLToPath(script)) ? 'worker' : 'in-thread');
  }

  /** Takes a message's bytes; rejects only when the worker thread died meanwhile. */
  take(data: Buffer): Promise<IntakeResult> {
    if (this.mode === 'in-thread' || data.length <= INTAKE_IN_THREAD_BYTES) return intakeMessage(data.toString('utf8'), this.cache);
    const w = this.ensureWorker();
    // A message ws assembled from several reads is a Buffer of its own: moved to the worker, not copied
    // (a 2 MB copy costs this loop a millisecond or more). A view into a larger buffer is copied once.
    const own = data.byteOffset === 0 && data.byteLength === data.buffer.byteLength && data.buffer instanceof ArrayBuffer;
    let bytes: ArrayBuffer | SharedArrayBuffer;
    if (own) bytes = data.buffer as ArrayBuffer;
    else {
      bytes = new SharedArrayBuffer(data.length);
      new Uint8Array(bytes).set(data);
    }
    this.moved += own ? 1 : 0;
    return this.ask(w, { id: this.nextId++, stateDir: this.cache.dir, bytes }, own ? [bytes as ArrayBuffer] : []).then((r) => ('result' in r ? r.result : { kind: 'protocol', why: 'the intake answered a message with a tidying' }));
  }

  /**
   * Tidies the state directory (BundleCache.prune: the bundles and lists no
   * longer named are removed), in the worker: after a list change that
   * unlinks the old list's file (2 MB for 100k prefixes) and a bundle's
   * folder, 2-19 ms of synchronous file system calls on a busy 2-core
   * machine, which on the event loop would stall the packet loop that long.
   * Throws what stopped the tidying (the caller logs it).
   */
  async prune(keep: readonly string[]): Promise<void> {
    if (this.mode === 'in-thread') return this.cache.prune(keep);
    const r = await this.ask(this.ensureWorker(), { id: this.nextId++, stateDir: this.cache.dir, prune: keep }, []);
    if ('pruned' in r && r.pruned !== null) throw new Error(r.pruned);
  }

  private ask(w: Worker, req: IntakeRequest, transfer: ArrayBuffer[]): Promise<IntakeReply> {
    return new Promise((resolve, reject) => {
      this.pending.set(req.id, { resolve, reject });
      w.ref();
      w.postMessage(req, transfer);
    });
  }

  /** Starts the worker thread ahead of the first large message (starting one costs the event loop milliseconds). */
  warm(): void {
    if (this.mode === 'worker') this.ensureWorker();
  }

  /** Ends the worker thread (a later take() starts another). */
  async stop(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    this.failAll('the daemon stops');
    if (w !== undefined) await w.terminate();
  }

  private ensureWorker(): Worker {
    if (this.worker !== undefined) return this.worker;
    const w = new Worker(this.script, { name: 'moat-bundle-intake', workerData: { nice: this.nice } satisfies IntakeWorkerData });
    w.on('message', (reply: IntakeReply) => {
      const p = this.pending.get(reply.id);
      if (p === undefined) return;
      this.pending.delete(reply.id);
      if ('result' in reply) this.taken++;
      if (this.pending.size === 0) w.unref();
      p.resolve(reply);
    });
    const died = (why: string) => {
      if (this.worker !== w) return;
      this.worker = undefined;
      this.failAll(`the bundle intake's worker thread stopped (${why})`);
    };
    w.on('error', (err) => died(err.message));
    w.on('exit', (code) => died(`exit code ${code}`));
    // Idle, it does not keep the process alive.
    w.unref();
    this.worker = w;
    return w;
  }

  private failAll(why: string): void {
    for (const p of this.pending.values()) p.reject(new Error(why));
    this.pending.clear();
  }
}
