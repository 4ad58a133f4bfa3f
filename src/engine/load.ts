// Loading a bundle from files: ruleset JSON (account, then zone), list files and
// GeoIP databases, merged into one address table and one evaluator. Shared by
// `moat replay` and the daemon; every error names its file.

import { readFileSync } from 'node:fs';
import { MoatError } from '../errors/index.js';
import { canonicalListName, type Limits } from '../expr/index.js';
import { openGeoIpSync, type AsnTable, type CountryTable } from '../geoip/index.js';
import { AddressTable, loadListFileSync, MAX_LISTS, type AddressTableList } from '../net/index.js';
import { compileBundle, type Evaluator } from './bundle.js';
import { tableLists } from './packet-path.js';
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
}

/** A loaded bundle. */
export interface LoadedBundle {
  readonly evaluator: Evaluator;
  readonly table: AddressTable;
  readonly rulesets: readonly Ruleset[];
}

/** Reads a file as UTF-8 text, with the coded error the caller names. */
function readText(file: string, what: 'RULESET_BAD_JSON'): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new MoatError(what, `${file}: cannot read: ${code === 'ENOENT' ? 'no such file' : (code ?? String(err))}`, { file, cause: err });
  }
}

/** Loads and compiles a bundle; throws MoatError or BundleError, never a half-built bundle. */
export function loadBundle(files: BundleFiles): LoadedBundle {
  if (files.rules.length < 1 || files.rules.length > 2) throw new Error('give one or two ruleset files (account, then zone)');
  const rulesets = files.rules.map((f) => parseRuleset(readText(f, 'RULESET_BAD_JSON'), f));
  const lists: AddressTableList[] = [];
  for (const { name, file } of files.lists ?? []) {
    const canonical = canonicalListName(name.replace(/^\$/, ''));
    if (!/^[a-z0-9_]+(\.[a-z0-9_]+)*$/.test(canonical)) {
      throw new MoatError('LIST_BAD_ENTRY', `${file}: "${name}" is not a valid list name`, { file });
    }
    if (lists.some((l) => l.name === canonical)) throw new MoatError('LIST_BAD_ENTRY', `list ${canonical} is given twice`, { file });
    lists.push({ name: canonical, ranges: loadListFileSync(file) });
  }
  if (lists.length > MAX_LISTS) {
    throw new MoatError('RULESET_TOO_MANY_LISTS', `${lists.length} lists given; at most ${MAX_LISTS} are supported`);
  }
  const country = files.geoip === undefined ? undefined : (openGeoIpSync(files.geoip, { kind: 'country' }).table as CountryTable);
  const asn = files.asn === undefined ? undefined : (openGeoIpSync(files.asn, { kind: 'asn' }).table as AsnTable);
  const table = AddressTable.build({ country, asn, lists });
  const managed = new Map<string, Ruleset>();
  for (const f of files.managed ?? []) {
    const m = parseRuleset(readText(f, 'RULESET_BAD_JSON'), f);
    if (m.id === undefined) throw new MoatError('RULESET_BAD_SHAPE', `${f}: a managed ruleset needs its "id" (execute rules name it)`, { file: f, pointer: '/id' });
    if (managed.has(m.id)) throw new MoatError('RULESET_BAD_SHAPE', `${f}: managed ruleset ${m.id} is given twice`, { file: f });
    managed.set(m.id, m);
  }
  const evaluator = compileBundle({ account: rulesets[0], zone: rulesets[1], lists: tableLists(table), limits: files.limits, managed });
  return { evaluator, table, rulesets };
}
