// The daemon's state directory for the control channel: the bundles it was
// sent and the lists they name, as the files a load reads, and the pointer to
// the last applied one (its "last known good", enforced when the daemon starts
// without its control plane). Files are written to a temporary name and
// renamed; before the pointer names a bundle, its files and folders are
// fsynced (persist), and the pointer itself is written the same way (temporary
// file, fsync, rename, fsync of the folder): a crash or a power cut leaves the
// previous pointer or the new one, each naming files that are whole. Files no
// pointer names may not be (a crash between writing and persisting): start()
// prunes them. Everything is asynchronous: an fsync takes ~10 ms on a
// virtual disk, which the packet loop must not wait for.
//
//   stateDir/current.json                    { digest, previous, appliedAt }: the applied bundle
//   stateDir/bundles/<digest>/bundle.json    what the bundle is (versions, list digests by name, ruleset files)
//   stateDir/bundles/<digest>/*.json         its rulesets, in the API's shape (account, zone, managed-N)
//   stateDir/lists/<digest>.txt              a list's entries, one a line: the file's SHA-256 is its digest

import { createHash } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { mkdir, open, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Bundle } from '../channel/index.js';
import { MoatError } from '../errors/index.js';

const DIGEST = /^[0-9a-f]{64}$/;

/** A bundle as kept in the state directory. */
export interface CachedBundle {
  readonly digest: string;
  /** The entrypoints' versions, null for a level without one. */
  readonly versions: { readonly account: string | null; readonly zone: string | null };
  /** List digests by list name. */
  readonly lists: Readonly<Record<string, string>>;
  /** Ruleset files, relative to the bundle's folder: the account entrypoint (an empty one when the bundle has none), the zone's, the managed ones. */
  readonly account: string;
  readonly zone: string | null;
  readonly managed: readonly string[];
}

/** A list's entries as its file holds them: one a line, joined with "\n" (no final newline), so that the file's SHA-256 is the list's digest. */
export function listText(entries: readonly string[]): string {
  return entries.join('\n');
}

/** The digest of a list's text (listText), as the protocol defines it: SHA-256 of the entries joined with "\n" (UTF-8). */
export function listDigest(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** Writes `data` to `file` through a temporary file and a rename (a reader sees the old file or the new, whole); durable only with `sync`. */
export async function writeFileAtomic(file: string, data: string | Uint8Array, sync: boolean): Promise<void> {
  const tmp = `${file}.tmp-${process.pid}`;
  if (sync) {
    const fh = await open(tmp, 'w', 0o600);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
  } else {
    await writeFile(tmp, data, { mode: 0o600 });
  }
  await rename(tmp, file);
  if (sync) await fsyncPath(join(file, '..'));
}

// fsync of a file's data, or of a folder's entries (a rename is durable only once its folder's are).
async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** The state directory of a daemon fed by a control plane. */
export class BundleCache {
  constructor(readonly dir: string) {}

  /**
   * Creates the directory (0700: it holds the rules in force) and its folders.
   * Throws MoatError 5012 when it cannot.
   */
  open(): void {
    try {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      const st = lstatSync(this.dir);
      if (!st.isDirectory()) throw new Error('it is not a directory');
      // An existing folder open to others is narrowed when it is ours (the same rule as the control plane's data directory).
      if ((st.mode & 0o077) !== 0 && typeof process.getuid === 'function' && st.uid === process.getuid()) chmodSync(this.dir, 0o700);
      mkdirSync(join(this.dir, 'lists'), { recursive: true, mode: 0o700 });
      mkdirSync(join(this.dir, 'bundles'), { recursive: true, mode: 0o700 });
    } catch (err) {
      throw new MoatError('DAEMON_PRECHECK', `controlPlane.stateDir ${this.dir}: cannot use it: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { pointer: '/controlPlane/stateDir', cause: err });
    }
  }

  listFile(digest: string): string {
    return join(this.dir, 'lists', `${digest}.txt`);
  }

  bundleDir(digest: string): string {
    return join(this.dir, 'bundles', digest);
  }

  /** The list digests held (their files are there). */
  listDigests(): string[] {
    try {
      return readdirSync(join(this.dir, 'lists'))
        .filter((n) => n.endsWith('.txt') && DIGEST.test(n.slice(0, -4)))
        .map((n) => n.slice(0, -4))
        .sort();
    } catch {
      return [];
    }
  }

  /** Whether a list's file is here (asynchronous: a small bundle is taken on the packet loop, see bundle-intake.ts). */
  async hasList(digest: string): Promise<boolean> {
    try {
      return (await stat(this.listFile(digest))).isFile();
    } catch {
      return false;
    }
  }

  /** Writes a list's text (listText) under its digest; see persist(). */
  async writeList(digest: string, text: string): Promise<void> {
    if (await this.hasList(digest)) return; // content-addressed: the same digest is the same file
    await writeFileAtomic(this.listFile(digest), text, false);
  }

  /**
   * Writes a bundle's rulesets and description into its folder (its lists must
   * be written already), ready to load; durable after persist(), current after makeCurrent().
   */
  async writeBundle(b: Bundle): Promise<CachedBundle> {
    const dir = this.bundleDir(b.digest);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const version = (r: Record<string, unknown> | null): string | null => (r !== null && typeof r['version'] === 'string' ? r['version'] : null);
    // A bundle without an account entrypoint runs no account rules: an empty ruleset stands for it (a load needs one first).
    await writeFileAtomic(join(dir, 'account.json'), JSON.stringify(b.account ?? { rules: [] }), false);
    if (b.zone !== null) await writeFileAtomic(join(dir, 'zone.json'), JSON.stringify(b.zone), false);
    const managed = b.managed.map((_m, i) => `managed-${i}.json`);
    for (let i = 0; i < b.managed.length; i++) await writeFileAtomic(join(dir, managed[i]!), JSON.stringify(b.managed[i]), false);
    const cached: CachedBundle = {
      digest: b.digest,
      versions: { account: version(b.account), zone: version(b.zone) },
      lists: Object.fromEntries(Object.entries(b.lists).map(([name, l]) => [name, l.digest])),
      account: 'account.json',
      zone: b.zone === null ? null : 'zone.json',
      managed,
    };
    // Last: a folder without its bundle.json is not a bundle (a crash in the middle left it half-written).
    await writeFileAtomic(join(dir, 'bundle.json'), JSON.stringify(cached), false);
    return cached;
  }

  /** Makes a written bundle durable: its files, its lists and their folders fsynced (at once: the disk groups them). */
  async persist(b: CachedBundle): Promise<void> {
    const dir = this.bundleDir(b.digest);
    const files = [b.account, ...(b.zone === null ? [] : [b.zone]), ...b.managed, 'bundle.json'].map((f) => join(dir, f));
    const lists = [...new Set(Object.values(b.lists))].map((d) => this.listFile(d));
    await Promise.all([...files, ...lists, dir, join(this.dir, 'bundles'), join(this.dir, 'lists')].map(fsyncPath));
  }

  /** A bundle of the cache by digest, or undefined when it is not (wholly) there. */
  bundle(digest: string): CachedBundle | undefined {
    if (!DIGEST.test(digest)) return undefined;
    try {
      const b = JSON.parse(readFileSync(join(this.bundleDir(digest), 'bundle.json'), 'utf8')) as CachedBundle;
      return b.digest === digest ? b : undefined;
    } catch {
      return undefined;
    }
  }

  /** The applied bundle's pointer, or undefined with none (or an unreadable one). */
  pointer(): { digest: string; previous: string | null; appliedAt: string } | undefined {
    try {
      const p = JSON.parse(readFileSync(join(this.dir, 'current.json'), 'utf8')) as { digest: string; previous: string | null; appliedAt: string };
      return typeof p.digest === 'string' && DIGEST.test(p.digest) ? p : undefined;
    } catch {
      return undefined;
    }
  }

  /** The applied bundle, or undefined with none. */
  current(): CachedBundle | undefined {
    const p = this.pointer();
    return p === undefined ? undefined : this.bundle(p.digest);
  }

  /** Makes `digest` (persisted) the applied bundle, the one before it kept as `previous`: one durable atomic rename. */
  async makeCurrent(digest: string): Promise<void> {
    const before = this.pointer();
    const previous = before === undefined ? null : before.digest === digest ? before.previous : before.digest;
    await writeFileAtomic(join(this.dir, 'current.json'), JSON.stringify({ digest, previous, appliedAt: new Date().toISOString() }), true);
  }

  /**
   * Removes the bundles and lists that neither the current bundle nor the
   * previous one names, nor `also` (bundles received and not applied yet).
   */
  prune(also: readonly string[] = []): void {
    const p = this.pointer();
    const keep = [...(p === undefined ? [] : [p.digest, ...(p.previous === null ? [] : [p.previous])]), ...also];
    const lists = new Set<string>();
    for (const d of keep) for (const l of Object.values(this.bundle(d)?.lists ?? {})) lists.add(l);
    for (const name of readdirSync(join(this.dir, 'bundles'))) {
      if (!keep.includes(name)) rmSync(this.bundleDir(name), { recursive: true, force: true });
    }
    for (const name of readdirSync(join(this.dir, 'lists'))) {
      const d = name.replace(/\.txt$/, '');
      if (!lists.has(d)) unlinkSync(join(this.dir, 'lists', name));
    }
    for (const name of readdirSync(this.dir)) if (name.includes('.tmp-')) rmSync(join(this.dir, name), { force: true });
  }
}
