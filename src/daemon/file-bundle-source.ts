// The daemon's bundle source from files: the ruleset, list and GeoIP files of
// its configuration, loaded again when they change (a folder watch, debounced)
// or on SIGHUP.

import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import type { Logger } from 'pino';
import type { DaemonConfig } from '../config/index.js';
import { MoatError } from '../errors/index.js';
import type { BundleFiles, LoadedBundle } from '../engine/index.js';
import type { BundleLoading, BundleSource, ReloadOutcome } from './bundle-source.js';

/** The bundle files a configuration names. */
export function bundleFiles(c: DaemonConfig): BundleFiles {
  const rules = rulesOf(c);
  return {
    rules: [rules.account, ...(rules.zone ? [rules.zone] : [])],
    lists: Object.entries(c.lists).map(([name, file]) => ({ name, file })),
    geoip: c.geoip.country,
    asn: c.geoip.asn,
    managed: rules.managed,
    missingData: c.missingData,
  };
}

// The rules files of a file-mode configuration (validation guarantees them without controlPlane).
function rulesOf(c: DaemonConfig): NonNullable<DaemonConfig['rules']> {
  if (c.rules === undefined) throw new MoatError('CONFIG_INVALID', 'rules: the configuration names no rules files (it takes them from its controlPlane)', { pointer: '/rules' });
  return c.rules;
}

/** Bundles from the configuration's files; a change is a file changed (when `watch` is on) or SIGHUP. */
export class FileBundleSource implements BundleSource {
  readonly name = 'files';
  private watchers: FSWatcher[] = [];
  private reloadTimer: NodeJS.Timeout | undefined;
  private sighup: (() => void) | undefined;
  private onChange: ((reason: string) => Promise<ReloadOutcome>) | undefined;
  private log: Logger | undefined;

  /** `configFile`: the configuration's own file, watched with the others (a reload reads it again). */
  constructor(
    private config: DaemonConfig,
    private readonly configFile?: string,
  ) {}

  reconfigure(config: DaemonConfig): void {
    const watched = () => JSON.stringify([this.config.watch, this.files()]);
    const before = watched();
    this.config = config;
    // The files to watch may have changed with it (only then are the watchers replaced: none is missed meanwhile).
    if (this.onChange !== undefined && this.log !== undefined && watched() !== before) {
      this.closeWatchers();
      if (config.watch) this.watchFiles(this.onChange, this.log);
    }
  }

  load(loader: BundleLoading): Promise<LoadedBundle> {
    return loader.load(bundleFiles(this.config));
  }

  start(onChange: (reason: string) => Promise<ReloadOutcome>, log: Logger): void {
    this.onChange = onChange;
    this.log = log;
    if (this.config.watch) this.watchFiles(onChange, log);
    this.sighup = () => void onChange('SIGHUP');
    process.on('SIGHUP', this.sighup);
  }

  private closeWatchers(): void {
    for (const w of this.watchers) w.close();
    this.watchers = [];
  }

  stop(): void {
    this.closeWatchers();
    this.onChange = undefined;
    this.log = undefined;
    if (this.reloadTimer !== undefined) clearTimeout(this.reloadTimer);
    this.reloadTimer = undefined;
    if (this.sighup !== undefined) process.off('SIGHUP', this.sighup);
    this.sighup = undefined;
  }

  private files(): string[] {
    const c = this.config;
    const r = c.rules ?? { account: undefined, zone: undefined, managed: [] };
    return [...(this.configFile === undefined ? [] : [resolve(this.configFile)]), ...(r.account ? [r.account] : []), ...(r.zone ? [r.zone] : []), ...r.managed, ...Object.values(c.lists), ...(c.geoip.country ? [c.geoip.country] : []), ...(c.geoip.asn ? [c.geoip.asn] : [])];
  }

  private watchFiles(onChange: (reason: string) => Promise<ReloadOutcome>, log: Logger): void {
    const byDir = new Map<string, Set<string>>();
    for (const f of this.files()) {
      const d = dirname(f);
      if (!byDir.has(d)) byDir.set(d, new Set());
      byDir.get(d)!.add(basename(f));
    }
    // Watch the folders, not the files: editors and deploy tools replace files by renaming.
    for (const [d, names] of byDir) {
      try {
        const w = watch(d, (_event, name) => {
          if (name !== null && names.has(name.toString())) this.scheduleReload(onChange);
        });
        this.watchers.push(w);
      } catch (err) {
        log.warn({ err, dir: d }, 'cannot watch folder; reload with SIGHUP');
      }
    }
  }

  private scheduleReload(onChange: (reason: string) => Promise<ReloadOutcome>): void {
    // Debounce: a deploy usually touches several files within a moment.
    if (this.reloadTimer !== undefined) clearTimeout(this.reloadTimer);
    this.reloadTimer = setTimeout(() => {
      this.reloadTimer = undefined;
      void onChange('file changed');
    }, 250);
  }
}
