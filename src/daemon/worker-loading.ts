// Bundle loading off the packet loop: the daemon's BundleLoading through one
// long-lived worker thread (loader-worker.ts). The worker reads, compiles and
// builds the address table; this side (the packet loop) only makes the
// bundle's functions again and wraps the transferred arrays (engine's
// BundleImporter), so a swap stalls packet handling for milliseconds, not for
// the hundreds a list change costs to load (bench/swap.bench.ts). A worker
// that dies rejects the load it was doing (code 6008) and is replaced on the
// next load; the daemon keeps running its bundle.

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { BundleImporter, loadErrorOf, type BundleFiles, type LoadErrorData, type LoadedBundle, type TransferredBundle } from '../engine/index.js';
import { ERRORS, MoatError } from '../errors/index.js';
import type { BundleLoading } from './bundle-source.js';

/** A load asked of the worker. */
export interface LoaderRequest {
  readonly id: number;
  readonly files: BundleFiles;
}

/** What the loader thread is started with. */
export interface LoaderWorkerData {
  /** Its nice value (lowered: it must not take the CPU from the packet loop); undefined: left as inherited. */
  readonly nice: number | undefined;
}

/** The worker's answer to a load. */
export type LoaderReply =
  | { readonly id: number; readonly ok: true; readonly bundle: TransferredBundle }
  | { readonly id: number; readonly ok: false; readonly error: LoadErrorData };

/**
 * The worker's script: the compiled loader-worker.js beside this module; run
 * from the TypeScript sources (the tests), the one `npm run build` put in
 * dist/, since a worker thread runs JavaScript only.
 */
export function loaderWorkerScript(): URL {
  return import.meta.url.endsWith('.ts') ? new URL('../../dist/src/daemon/loader-worker.js', import.meta.url) : new URL('./loader-worker.js', import.meta.url);
}

/** Whether the worker's script is there (always, but from sources before a build). */
export function loaderWorkerAvailable(script = loaderWorkerScript()): boolean {
  return existsSync(fileURLToPath(script));
}

/** Longest slice of making a worker's bundle again between two turns of the event loop (as Daemon's warm-up: WARM_SLICE_MS). */
const IMPORT_SLICE_MS = 1;

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

interface Pending {
  readonly resolve: (b: LoadedBundle) => void;
  /** Set by loadTransferred: the bundle as the worker sent it, not made again on this thread. */
  readonly asSent?: ((b: TransferredBundle) => void) | undefined;
  readonly reject: (err: Error) => void;
}

/** BundleLoading through a worker thread. stop() ends the thread. */
export class WorkerLoading implements BundleLoading {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private readonly importer = new BundleImporter();
  /** Replies being made bundles again, one at a time and in the worker's order (the importer keeps the last table). */
  private importing: Promise<void> = Promise.resolve();
  private stopped = false;
  /** The thread's nice value (capture.priority.background), set before the first load; undefined: left as inherited. */
  nice: number | undefined;
  /** Workers started, the first included (a restart after a death adds one). */
  started = 0;
  /** What the last load's result cost this thread (ms), by step (see BundleImporter.lastTimings): what loading costs the packet loop. */
  get lastImport(): BundleImporter['lastTimings'] {
    return this.importer.lastTimings;
  }

  constructor(
    private readonly log: Logger,
    private readonly script: URL = loaderWorkerScript(),
    /** The import's slice (tests: 0, a turn of the event loop after every step). */
    private readonly importSliceMs = IMPORT_SLICE_MS,
  ) {}

  /** The worker thread, while one runs (for diagnostics and tests). */
  get thread(): Worker | undefined {
    return this.worker;
  }

  load(files: BundleFiles): Promise<LoadedBundle> {
    return this.ask(files, undefined);
  }

  /**
   * Loads `files` as load() does, but resolves with the bundle as the worker
   * sent it (its table's arrays transferred here), for the packet workers
   * (packet-workers.ts), which share its table and each make the functions.
   * Do not mix with load() on one WorkerLoading: a later bundle that reuses
   * its table expects this side to have it made (load) or kept (the packet workers).
   */
  loadTransferred(files: BundleFiles): Promise<TransferredBundle> {
    return new Promise<TransferredBundle>((resolve, reject) => {
      // The LoadedBundle promise never resolves here (the asSent handler answers instead); it rejects as load() would.
      this.ask(files, resolve).catch(reject);
    });
  }

  private ask(files: BundleFiles, asSent: ((b: TransferredBundle) => void) | undefined): Promise<LoadedBundle> {
    if (this.stopped) return Promise.reject(new MoatError('BUNDLE_LOADER_FAILED', 'the bundle loader is stopped (the daemon is stopping)'));
    let w: Worker;
    try {
      w = this.ensureWorker();
    } catch (err) {
      return Promise.reject(new MoatError('BUNDLE_LOADER_FAILED', `cannot start the bundle loader's worker thread: ${(err as Error).message}`, { cause: err }));
    }
    const id = this.nextId++;
    return new Promise<LoadedBundle>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, asSent });
      // The thread keeps the process alive only while it has work (see ensureWorker).
      w.ref();
      w.postMessage({ id, files } satisfies LoaderRequest);
    });
  }

  /** Ends the worker thread; loads still running are rejected. Idempotent. */
  async stop(): Promise<void> {
    this.stopped = true;
    const w = this.worker;
    this.worker = undefined;
    this.rejectAll('the bundle loader was stopped during the load (the daemon is stopping)');
    if (w !== undefined) await w.terminate();
  }

  private ensureWorker(): Worker {
    if (this.worker !== undefined) return this.worker;
    if (!loaderWorkerAvailable(this.script)) throw new Error(`${fileURLToPath(this.script)} is missing (running from the TypeScript sources: npm run build)`);
    const w = new Worker(this.script, { name: 'moat-bundle-loader', workerData: { nice: this.nice } satisfies LoaderWorkerData });
    this.started++;
    w.on('message', (reply: LoaderReply) => this.settle(reply));
    w.on('error', (err) => this.died(w, `it threw ${err.message}`));
    w.on('exit', (code) => this.died(w, `it exited with code ${code}`));
    // Idle, the thread does not keep the process alive (a daemon's captures do; a test that forgot stop() still ends).
    w.unref();
    this.worker = w;
    return w;
  }

  private settle(reply: LoaderReply): void {
    const p = this.pending.get(reply.id);
    if (p === undefined) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker?.unref();
    if (!reply.ok) {
      p.reject(loadErrorOf(reply.error));
      return;
    }
    if (p.asSent !== undefined) {
      p.asSent(reply.bundle);
      return;
    }
    const w = this.worker;
    this.importing = this.importing.then(() => this.importReply(w, reply.bundle, p));
  }

  // A reply made a bundle again in slices (IMPORT_SLICE_MS), the packet loop running between them;
  // nothing of it is seen (loaded, swapped) before the last slice.
  private async importReply(from: Worker | undefined, transferred: TransferredBundle, p: Pending): Promise<void> {
    let bundle: LoadedBundle;
    try {
      bundle = await this.importer.importSliced(transferred, this.importSliceMs, nextTurn);
    } catch (err) {
      // A reply this side cannot take (a bug): the worker's loader may now count on a table this
      // side does not have, so a new worker, whose loader starts from nothing, takes the next load.
      p.reject(err as Error);
      if (this.worker !== from) return; // that worker is gone already (its pending loads rejected)
      const w = this.worker;
      this.worker = undefined;
      this.rejectAll(`the bundle loader was restarted after a reply it could not take (${(err as Error).message})`);
      if (w !== undefined) void w.terminate();
      return;
    }
    p.resolve(bundle);
  }

  // A worker that died: what it was loading is rejected; the next load starts a new one.
  private died(w: Worker, why: string): void {
    if (this.worker !== w) return;
    this.worker = undefined;
    if (this.stopped) return;
    this.log.error({ code: ERRORS.BUNDLE_LOADER_FAILED.code, pending: this.pending.size }, `the bundle loader's worker thread stopped (${why}); a new one starts with the next reload`);
    this.rejectAll(`the bundle loader's worker thread stopped during the load (${why}); the reload is rejected and the running bundle stays`);
  }

  private rejectAll(message: string): void {
    for (const p of this.pending.values()) p.reject(new MoatError('BUNDLE_LOADER_FAILED', message));
    this.pending.clear();
  }
}
