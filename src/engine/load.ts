// Loading a bundle from files: ruleset JSON (account, then zone), list files and
// GeoIP databases, merged into one address table and one evaluator. Shared by
// `moat replay` and the daemon; every error names its file. A BundleLoader
// (the daemon's reloads) keeps the last address table and reuses it while the
// lists and databases are byte for byte the same, so that a rules-only change
// costs a compile, not a rebuild of the table.

import { createHash } from 'node:crypto';
import { statSync, type BigIntStats } from 'node:fs';
import { MoatError, quoteInput, readRegularFile } from '../errors/index.js';
import { canonicalListName, type Limits } from '../expr/index.js';
import { geoIpFromBuffer, readGeoIpFileSync, type AsnTable, type CountryTable } from '../geoip/index.js';
import { parseListText, readListFileSync, type IpRangeList } from '../net/index.js';
import { AddressTable, MAX_LISTS, type AddressTableList } from '../table/index.js';
import { BundleError, compileBundle } from './compile-bundle.js';
import { expressionPosition } from './locate-source.js';
import { missingData, type MissingDataPolicy } from './missing-data.js';
import type { Evaluator } from './evaluator.js';
import { tableLists } from './table-lists.js';
import { parseRuleset, type Ruleset } from './ruleset.js';

/** Files that make a bundle. */
export interface BundleFiles {
  /** The account entrypoint, then optionally the zone entrypoint. */
  rules: readonly string[];
  /** List contents by name (`svc.malware`, `cf.botnetcc`, `office_blocklist`). */
  lists?: ReadonlyArray<{ name: string; file: string }> | undefined;
  geoip?: string | undefined;
  asn?: string | undefined;
  limits?: Partial<Limits> | undefined;
  /** Managed rulesets (JSON files with an id) that execute rules run. */
  managed?: readonly string[] | undefined;
  /**
   * A rule that reads a country or AS number with no database given, or a list
   * with no file: `warn` (default) loads the bundle and names the rules in
   * `missing`; `error` rejects the bundle with those errors (BundleError).
   */
  missingData?: MissingDataPolicy | undefined;
}

/** A loaded bundle. */
export interface LoadedBundle {
  readonly evaluator: Evaluator;
  readonly table: AddressTable;
  readonly rulesets: readonly Ruleset[];
  /**
   * SHA-256 (hex) of the contents of every input file, in the order rules,
   * managed rulesets, lists (with their names), GeoIP country, ASN: what the
   * bundle was built from (the daemon's version shows its start).
   */
  readonly digest: string;
  /** Whether the address table is the one of the loader's previous load (lists and databases unchanged). */
  readonly tableReused: boolean;
  /** Rules that read data the bundle was not given (code 5011), to warn about (see BundleFiles.missingData). */
  readonly missing: readonly MoatError[];
}

/** Reads a file, with the coded error the caller names. */
function readBytes(file: string, what: 'RULESET_BAD_JSON'): Buffer {
  try {
    return readRegularFile(file, 'rules', 'rules file');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new MoatError(what, `${file}: cannot read: ${code === 'ENOENT' ? 'no such file' : (code ?? (err as Error).message)}`, { file, cause: err });
  }
}

/**
 * Prefixes each expression error of a rules file with `file:line:column: `
 * where the span starts in the file (the message keeps its rule; the pointer
 * stays). Errors of managed rulesets' rules keep their own wording.
 */
function withFilePositions(err: BundleError, files: readonly string[], bytes: readonly Buffer[], rulesets: readonly Ruleset[]): void {
  for (const e of err.errors) {
    const m = /^\/rules\/(\d+)\/expression$/.exec(e.pointer ?? '');
    if (m === null || e.span === undefined || / of managed ruleset /.test(e.message)) continue;
    const level = e.message.startsWith('zone ruleset') ? 1 : e.message.startsWith('account ruleset') ? 0 : -1;
    const rule = rulesets[level]?.rules[Number(m[1])];
    if (level < 0 || rule === undefined || files[level] === undefined) continue;
    const at = expressionPosition(bytes[level]!.toString('utf8'), Number(m[1]), rule.expression, e.span.start);
    if (at !== undefined) e.message = `${files[level]}:${at.line}:${at.column}: ${e.message}`;
  }
}

const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** What a loader knows of a file it hashed: its identity then, and its digest. */
interface KnownFile {
  readonly dev: bigint;
  readonly ino: bigint;
  readonly size: bigint;
  readonly mtimeNs: bigint;
  readonly ctimeNs: bigint;
  /** Wall-clock time of the read, in ns (the clock file times use). */
  readonly readAtNs: bigint;
  readonly digest: string;
}

/** A list file or GeoIP database to read and parse for the address table. */
interface TableInput {
  readonly file: string;
  readonly kind: 'list' | 'country' | 'asn';
  readonly read: (file: string) => Buffer;
  readonly parse: (bytes: Buffer) => IpRangeList | CountryTable | AsnTable;
}

/** A table input as parsed, with the digest of the bytes it was parsed from. */
interface ParsedInput {
  readonly kind: TableInput['kind'];
  readonly digest: string;
  readonly value: IpRangeList | CountryTable | AsnTable;
}

/**
 * A file whose modification time is this close to (or after) the moment it
 * was read may have changed again within the file system's timestamp
 * granularity, unseen: it is read again rather than trusted ("racy" files,
 * as git calls them). 2 s covers every Linux file system's granularity.
 */
const RACY_NS = 2_000_000_000n;

/**
 * Loads bundles one after another, keeping the address table of the last
 * load: when the next load names the same lists with the same contents and
 * the same GeoIP databases, it reuses that table (immutable) instead of
 * parsing the lists and flattening the databases again. Rebuilding is most of
 * a load: on the pipeline benchmark's bundle (3 x 100k prefixes, country and
 * ASN databases) a load from nothing takes ~0.6 s, against ~10 ms for its 50
 * rules with the table kept, and ~0.3 s when one list changed, for the
 * inputs that did not change are not parsed again and the value screens of
 * unchanged databases are kept (bench/swap.bench.ts).
 *
 * Contents are compared by SHA-256. A list or database file is not read
 * again while its device, inode, size, modification and change times are
 * those of the last read and it had not been modified within RACY_NS of that
 * read (rewriting, renaming over or `touch`ing a file changes its change
 * time, which no user can set); reading and hashing those files was ~10 ms
 * of a ~17 ms rules-only load on the benchmark's 8 MB of inputs. Loads are
 * synchronous; a failed load leaves the kept table as it was.
 */
export class BundleLoader {
  private table: AddressTable | undefined;
  /** The digests of the inputs `table` was built from. */
  private tableKey = '';
  private readonly known = new Map<string, KnownFile>();
  /** What the kept table was built from, parsed, by file. */
  private parsed = new Map<string, ParsedInput>();
  /** The GeoIP inputs (kinds and digests) of the kept table. */
  private geoKey = '';
  private readonly racyNs: bigint;
  /** A table of the kept GeoIP databases alone (see geoOnlyTable), with the geoKey it was built for. */
  private geoTable: { readonly key: string; readonly table: AddressTable } | undefined;
  /** List and database files read so far (the others were known unchanged). */
  filesRead = 0;

  /** `racyMs`: see RACY_NS (tests shorten it). */
  constructor(options: { racyMs?: number } = {}) {
    this.racyNs = options.racyMs === undefined ? RACY_NS : BigInt(Math.round(options.racyMs * 1e6));
  }

  /** Loads and compiles a bundle; throws MoatError or BundleError, never a half-built bundle. */
  load(files: BundleFiles): LoadedBundle {
    if (files.rules.length < 1 || files.rules.length > 2) throw new Error('give one or two ruleset files (account, then zone)');
    const whole = createHash('sha256');
    const ruleBytes = files.rules.map((f) => readBytes(f, 'RULESET_BAD_JSON'));
    const rulesets = files.rules.map((f, i) => parseRuleset(ruleBytes[i]!.toString('utf8'), f));
    const managed = new Map<string, Ruleset>();
    const managedBytes = (files.managed ?? []).map((f) => readBytes(f, 'RULESET_BAD_JSON'));
    (files.managed ?? []).forEach((f, i) => {
      const m = parseRuleset(managedBytes[i]!.toString('utf8'), f);
      if (m.id === undefined) throw new MoatError('RULESET_BAD_SHAPE', `${f}: a managed ruleset needs its "id" (execute rules name it)`, { file: f, pointer: '/id' });
      if (managed.has(m.id)) throw new MoatError('RULESET_BAD_SHAPE', `${f}: managed ruleset ${m.id} is given twice`, { file: f });
      managed.set(m.id, m);
    });
    for (const b of [...ruleBytes, ...managedBytes]) whole.update(sha256(b));
    // The table's inputs: list names and files, then the databases.
    const names: string[] = [];
    const inputs: TableInput[] = [];
    for (const { name, file } of files.lists ?? []) {
      const canonical = canonicalListName(name.replace(/^\$/, ''));
      if (!/^[a-z0-9_]+(\.[a-z0-9_]+)*$/.test(canonical)) {
        throw new MoatError('LIST_BAD_ENTRY', `${file}: ${quoteInput(name)} is not a valid list name`, { file });
      }
      if (names.includes(canonical)) throw new MoatError('LIST_BAD_ENTRY', `list ${canonical} is given twice`, { file });
      names.push(canonical);
      inputs.push({ file, kind: 'list', read: readListFileSync, parse: (b) => parseListText(b.toString('utf8'), file) });
    }
    if (names.length > MAX_LISTS) {
      throw new MoatError('RULESET_TOO_MANY_LISTS', `${names.length} lists given; at most ${MAX_LISTS} are supported`);
    }
    const { geoip, asn } = files;
    if (geoip !== undefined) inputs.push({ file: geoip, kind: 'country', read: readGeoIpFileSync, parse: (b) => geoIpFromBuffer(b, geoip, { kind: 'country' }).table });
    if (asn !== undefined) inputs.push({ file: asn, kind: 'asn', read: readGeoIpFileSync, parse: (b) => geoIpFromBuffer(b, asn, { kind: 'asn' }).table });
    const read = new Map<string, Buffer>();
    const keyOf = (digests: readonly string[]) => JSON.stringify([names, geoip !== undefined, asn !== undefined, digests]);
    const digests = inputs.map((i) => this.digestOf(i.file, i.read, read));
    let tableKey = keyOf(digests);
    const tableReused = this.table !== undefined && tableKey === this.tableKey;
    let table: AddressTable;
    const parsed = new Map<string, ParsedInput>();
    let geoKey = this.geoKey;
    if (tableReused) {
      table = this.table!;
    } else {
      // Each input parsed again only when its digest changed (a list update
      // re-parses that list, not the others or the databases: ~40% of a
      // rebuild on the pipeline benchmark's bundle is flattening the two
      // databases and parsing the lists).
      const values = inputs.map((inp, k) => {
        const known = this.parsed.get(inp.file);
        if (known !== undefined && known.kind === inp.kind && known.digest === digests[k]) {
          parsed.set(inp.file, known);
          return known.value;
        }
        const bytes = read.get(inp.file) ?? this.readFresh(inp.file, inp.read, read);
        digests[k] = this.known.get(inp.file)!.digest;
        const p: ParsedInput = { kind: inp.kind, digest: digests[k]!, value: inp.parse(bytes) };
        parsed.set(inp.file, p);
        return p.value;
      });
      tableKey = keyOf(digests);
      const lists: AddressTableList[] = names.map((name, i) => ({ name, ranges: values[i] as IpRangeList }));
      let at = names.length;
      table = AddressTable.build({
        country: geoip === undefined ? undefined : (values[at++] as CountryTable),
        asn: asn === undefined ? undefined : (values[at] as AsnTable),
        lists,
      });
      // Same databases as the kept table (a list update): its value screens hold.
      geoKey = JSON.stringify(inputs.flatMap((inp, k) => (inp.kind === 'list' ? [] : [inp.kind, digests[k]])));
      if (this.table !== undefined && geoKey === this.geoKey) table.shareValueScreens(this.table);
    }
    whole.update(tableKey);
    let evaluator;
    try {
      evaluator = compileBundle({ account: rulesets[0], zone: rulesets[1], lists: tableLists(table), limits: files.limits, managed });
    } catch (err) {
      if (err instanceof BundleError) withFilePositions(err, files.rules, ruleBytes, rulesets);
      throw err;
    }
    const missing = missingData(evaluator, { country: geoip !== undefined, asn: asn !== undefined, lists: names });
    if (missing.length > 0 && files.missingData === 'error') throw new BundleError(missing);
    // Kept only once the whole bundle compiled: a rejected load changes nothing.
    this.table = table;
    this.tableKey = tableKey;
    if (!tableReused) {
      this.parsed = parsed;
      this.geoKey = geoKey;
    }
    return { evaluator, table, rulesets, digest: whole.digest('hex'), tableReused, missing };
  }

  /** What the kept table's GeoIP data was read from (kinds and digests): equal keys, equal GeoIP ranges. */
  get geoIpKey(): string {
    return this.geoKey;
  }

  /**
   * A table of the kept table's GeoIP databases alone, without lists (built on
   * the first call after the databases change); undefined when there are none.
   * Its value screens are those of every table of these databases (see
   * AddressTable.shareValueScreens): a loader in a worker thread builds them
   * there, after the table it loaded left for the packet loop.
   */
  geoOnlyTable(): AddressTable | undefined {
    if (this.geoTable?.key === this.geoKey) return this.geoTable.table;
    let country: CountryTable | undefined;
    let asn: AsnTable | undefined;
    for (const p of this.parsed.values()) {
      if (p.kind === 'country') country = p.value as CountryTable;
      else if (p.kind === 'asn') asn = p.value as AsnTable;
    }
    if (country === undefined && asn === undefined) return undefined;
    const table = AddressTable.build({ country, asn, lists: [] });
    this.geoTable = { key: this.geoKey, table };
    return table;
  }

  // The digest of a table input: the known one while the file is unchanged
  // (see the class comment), else the digest of its bytes read now (kept in `read`).
  private digestOf(file: string, reader: (file: string) => Buffer, read: Map<string, Buffer>): string {
    const k = this.known.get(file);
    if (k !== undefined) {
      let st: BigIntStats | undefined;
      try {
        st = statSync(file, { bigint: true });
      } catch {
        st = undefined; // the read below gives the coded error
      }
      if (
        st !== undefined && st.dev === k.dev && st.ino === k.ino && st.size === k.size && st.mtimeNs === k.mtimeNs && st.ctimeNs === k.ctimeNs &&
        k.mtimeNs + this.racyNs < k.readAtNs && k.ctimeNs + this.racyNs < k.readAtNs
      ) {
        return k.digest;
      }
    }
    this.readFresh(file, reader, read);
    return this.known.get(file)!.digest;
  }

  // Reads a file, records what is known of it, and keeps its bytes in `read`.
  private readFresh(file: string, reader: (file: string) => Buffer, read: Map<string, Buffer>): Buffer {
    // The identity before the read: a change during the read makes the next load read again.
    let st: BigIntStats | undefined;
    try {
      st = statSync(file, { bigint: true });
    } catch {
      st = undefined;
    }
    const readAtNs = BigInt(Date.now()) * 1_000_000n;
    const bytes = reader(file);
    this.filesRead++;
    read.set(file, bytes);
    const digest = sha256(bytes);
    if (st === undefined) this.known.delete(file);
    else this.known.set(file, { dev: st.dev, ino: st.ino, size: st.size, mtimeNs: st.mtimeNs, ctimeNs: st.ctimeNs, readAtNs, digest });
    return bytes;
  }
}

/** Loads and compiles a bundle once; throws MoatError or BundleError, never a half-built bundle. */
export function loadBundle(files: BundleFiles): LoadedBundle {
  return new BundleLoader().load(files);
}
