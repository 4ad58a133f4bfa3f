// Where the daemon takes its ruleset bundles from: a source says when a new
// bundle is there and loads it through the daemon's one BundleLoader; the
// daemon keeps the swap, the rejections, the logs and the metrics. Files
// (file-bundle-source.ts), or the control plane over its channel
// (channel-bundle-source.ts).

import type { Logger } from 'pino';
import type { DaemonConfig } from '../config/index.js';
import type { BundleFiles, LoadedBundle } from '../engine/index.js';
import { ChannelBundleSource } from './channel-bundle-source.js';
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

/** What a source reports to the daemon's host side: the heartbeat counters (totals since start, summed over ports). */
export interface SourceHost {
  counters(): { passed: number; dropped: number; undecodable: number; swaps: number };
}

/** Where a source that has a remote end stands (for /health and metrics). */
export interface SourceStatus {
  /** Whether the channel to the control plane is open (welcomed). */
  readonly connected: boolean;
  /** When it last opened or closed (ISO 8601); null before the first attempt ended. */
  readonly since: string | null;
  /** The bundle in force: none yet, the one cached in the state directory, or one applied or confirmed over the channel. */
  readonly bundle: 'none' | 'cached' | 'live';
  /** Its digest (the control plane's), null with none. */
  readonly digest: string | null;
  /** The last close: its code and reason. */
  readonly lastClose?: { readonly code: number; readonly reason: string } | undefined;
  /** The control plane URL connected to, or tried last (one of controlPlane.url's). */
  readonly url?: string | undefined;
}

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
  start(onChange: (reason: string) => Promise<ReloadOutcome>, log: Logger, host?: SourceHost): void;
  /** Stops telling of changes. Idempotent, and safe when start() was never called. */
  stop(): void;
  /** Takes the configuration a reload read (and back, when its bundle is rejected). */
  reconfigure?(config: DaemonConfig): void;
  /** Where a remote source stands (the control channel); absent for files. */
  status?(): SourceStatus;
}

/**
 * The bundle source a configuration names: its control plane, or its files
 * (`configFile`, the file it was read from, is watched too). `moat`: the
 * version the daemon reports to its control plane.
 */
export function bundleSourceFor(config: DaemonConfig, configFile?: string, options: { moat?: string } = {}): BundleSource {
  if (config.controlPlane !== undefined) return new ChannelBundleSource(config, { moat: options.moat });
  return new FileBundleSource(config, configFile);
}
