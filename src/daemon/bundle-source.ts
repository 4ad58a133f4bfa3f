// Where the daemon takes its ruleset bundles from: a source says when a new
// bundle is there and loads it through the daemon's one BundleLoader; the
// daemon keeps the swap, the rejections, the logs and the metrics. Files
// (file-bundle-source.ts) are the source today; the control channel is next.

import type { Logger } from 'pino';
import type { DaemonConfig } from '../config/index.js';
import type { BundleFiles, LoadedBundle } from '../engine/index.js';
import { FileBundleSource } from './file-bundle-source.js';

/**
 * Loads bundle files for the daemon: its BundleLoader today, run on the event
 * loop; asynchronous so that loading can move off the packet loop (a worker)
 * without changing the sources.
 */
export interface BundleLoading {
  load(files: BundleFiles): Promise<LoadedBundle>;
}

/** What the daemon did with a bundle its source told of: swapped in, or rejected with the engine's coded errors. */
export type ReloadOutcome =
  | { readonly applied: true; readonly version: string; readonly digest: string; readonly rulesetVersions: ReadonlyArray<string | null> }
  | { readonly applied: false; readonly errors: ReadonlyArray<{ readonly code: number; readonly message: string; readonly pointer?: string | undefined }> };

/** A source of ruleset bundles for the daemon. */
export interface BundleSource {
  /** What the source is, for logs ("files"). */
  readonly name: string;
  /**
   * Loads the source's current bundle through `loader`, which keeps what did not
   * change since its last load. Throws MoatError or BundleError for a bad bundle.
   */
  load(loader: BundleLoading): Promise<LoadedBundle>;
  /**
   * Starts telling the daemon of new bundles: `onChange(reason)` whenever load()
   * would give a different one (the reason is logged with the swap or the
   * rejection); it resolves with what the daemon did (a source that reports
   * back, as the control channel does, acknowledges with it). Reloads are
   * serialised by the daemon: one runs at a time, and changes told meanwhile
   * coalesce into one more. Problems of the source itself go to `log`.
   */
  start(onChange: (reason: string) => Promise<ReloadOutcome>, log: Logger): void;
  /** Stops telling of changes. Idempotent, and safe when start() was never called. */
  stop(): void;
  /** Takes the configuration a reload read (and back, when its bundle is rejected). */
  reconfigure?(config: DaemonConfig): void;
}

/** The bundle source a configuration names; `configFile` (the file it was read from) is watched too. */
export function bundleSourceFor(config: DaemonConfig, configFile?: string): BundleSource {
  return new FileBundleSource(config, configFile);
}
