// Opening a MaxMind DB and flattening it into range tables.
//
// Supported layouts (checked from the metadata and the records, anything else
// is GEOIP_BAD_LAYOUT, 4004):
//   country: GeoLite2/GeoIP2 Country and City, DB-IP Country/City Lite —
//            `country.iso_code`, falling back to `registered_country.iso_code`;
//   asn:     GeoLite2/GeoIP2 ASN (and ISP), DB-IP ASN Lite — `autonomous_system_number`.
// A file that cannot be read or is not a MaxMind DB is GEOIP_READ (4003).
//
// The maxmind Reader is used to parse the metadata and to decode records; it
// is never used per packet. The search tree is walked here (tree-walk.ts) and
// each distinct record is decoded once, through `reader.get()` on the first
// address of the first network that uses it.

import { Reader } from 'maxmind';
import { MoatError, readFileCoded, readFileCodedAsync } from '../errors/index.js';
import { formatIpv4, formatIpv6, type CountryRanges, type GeoRangeTable } from '../net/index.js';
import { TreeError, walkTree, type RawRanges } from './tree-walk.js';

/** What a database gives: a country per address, or an AS number. */
export type GeoIpKind = 'country' | 'asn';

/** A flattened country database. */
export interface CountryTable extends CountryRanges {
  readonly kind: 'country';
}

/** A flattened ASN database (values: AS number as int32 bit pattern; see AsnRanges). */
export interface AsnTable extends GeoRangeTable {
  readonly kind: 'asn';
}

/** The metadata fields worth showing. */
export interface GeoIpMetadata {
  readonly databaseType: string;
  readonly ipVersion: number;
  readonly recordSize: number;
  readonly nodeCount: number;
  readonly buildEpoch: Date;
  readonly languages: readonly string[];
  readonly description: string;
}

/** An opened, flattened database. */
export interface GeoIpDatabase<T extends CountryTable | AsnTable = CountryTable | AsnTable> {
  readonly file: string;
  readonly kind: T['kind'];
  readonly metadata: GeoIpMetadata;
  readonly table: T;
  /** The Reader over the same buffer: for cross-checks and tools, never for packets. */
  readonly reader: Reader<Record<string, unknown>>;
  /** Distinct records decoded. */
  readonly records: number;
}

/** Options of {@link openGeoIp}. */
export interface OpenGeoIpOptions {
  /** The layout required; default: told by the metadata's database_type, else by the records. */
  kind?: GeoIpKind;
}

/** Reads, checks and flattens a MaxMind DB file. */
export async function openGeoIp(path: string, options?: OpenGeoIpOptions & { kind: 'country' }): Promise<GeoIpDatabase<CountryTable>>;
export async function openGeoIp(path: string, options?: OpenGeoIpOptions & { kind: 'asn' }): Promise<GeoIpDatabase<AsnTable>>;
export async function openGeoIp(path: string, options?: OpenGeoIpOptions): Promise<GeoIpDatabase>;
export async function openGeoIp(path: string, options: OpenGeoIpOptions = {}): Promise<GeoIpDatabase> {
  return geoIpFromBuffer(await readFileCodedAsync(path, 'GEOIP_READ', 'GeoIP database', 'geoip'), path, options);
}

/** Synchronous form of {@link openGeoIp}. */
export function openGeoIpSync(path: string, options: OpenGeoIpOptions = {}): GeoIpDatabase {
  return geoIpFromBuffer(readGeoIpFileSync(path), path, options);
}

/** The bytes of a database file, for callers that keep them (a digest) before geoIpFromBuffer. Unreadable file: GEOIP_READ. */
export function readGeoIpFileSync(path: string): Buffer {
  return readFileCoded(path, 'GEOIP_READ', 'GeoIP database', 'geoip');
}

const COUNTRY_TYPE = /country|city|enterprise/i;
const ASN_TYPE = /asn|isp/i;

/** Checks and flattens a MaxMind DB held in memory; `file` names it in errors. */
export function geoIpFromBuffer(buf: Buffer, file: string, options: OpenGeoIpOptions = {}): GeoIpDatabase {
  if (buf.length >= 2 && buf[0] === 0x1f && buf[1] === 0x8b) {
    throw new MoatError('GEOIP_READ', `cannot read GeoIP database ${file}: it is gzip-compressed; decompress it first`, { file });
  }
  let reader: Reader<Record<string, unknown>>;
  try {
    reader = new Reader<Record<string, unknown>>(buf);
  } catch (err) {
    throw new MoatError('GEOIP_READ', `cannot read GeoIP database ${file}: not a MaxMind DB file (${(err as Error).message})`, { file, cause: err });
  }
  const m = reader.metadata;
  const metadata: GeoIpMetadata = {
    databaseType: String(m.databaseType ?? ''),
    ipVersion: m.ipVersion,
    recordSize: m.recordSize,
    nodeCount: m.nodeCount,
    buildEpoch: m.buildEpoch,
    languages: m.languages ?? [],
    description: typeof m.description === 'string' ? m.description : JSON.stringify(m.description ?? ''),
  };
  const bad = (what: string): MoatError => new MoatError('GEOIP_BAD_LAYOUT', `unsupported GeoIP database ${file}: ${what}`, { file });
  if (m.binaryFormatMajorVersion !== 2) throw bad(`binary format version ${m.binaryFormatMajorVersion} (only MaxMind DB 2.x is supported)`);
  if (m.recordSize !== 24 && m.recordSize !== 28 && m.recordSize !== 32) throw bad(`record size ${m.recordSize} (24, 28 or 32 expected)`);
  if (m.ipVersion !== 4 && m.ipVersion !== 6) throw bad(`ip_version ${m.ipVersion} (4 or 6 expected)`);
  if (!Number.isInteger(m.nodeCount) || m.nodeCount <= 0) throw bad(`node_count ${m.nodeCount}`);
  if (m.searchTreeSize + 16 > buf.length) {
    throw new MoatError('GEOIP_READ', `cannot read GeoIP database ${file}: truncated (the search tree needs ${m.searchTreeSize} bytes)`, { file });
  }

  // The layout the metadata announces, if it names one.
  const typeKind: GeoIpKind | undefined = ASN_TYPE.test(metadata.databaseType) ? 'asn' : COUNTRY_TYPE.test(metadata.databaseType) ? 'country' : undefined;
  if (options.kind !== undefined && typeKind !== undefined && typeKind !== options.kind) {
    throw bad(`it is a ${metadata.databaseType} database (${typeKind} data); a ${options.kind} database is expected`);
  }

  let raw: RawRanges;
  try {
    raw = walkTree(buf, { nodeCount: m.nodeCount, recordSize: m.recordSize, ipVersion: m.ipVersion });
  } catch (err) {
    if (err instanceof TreeError) throw new MoatError('GEOIP_READ', `cannot read GeoIP database ${file}: corrupt search tree (${err.message})`, { file, cause: err });
    throw err;
  }

  // Decode each distinct record once, in order of first use.
  const slotOf = new Map<number, number>();
  const records: unknown[] = [];
  const where: string[] = [];
  const decode = (r: number, ip: string): void => {
    let rec: unknown;
    try {
      rec = reader.get(ip);
    } catch (err) {
      throw new MoatError('GEOIP_READ', `cannot read GeoIP database ${file}: bad record for ${ip} (${(err as Error).message})`, { file, cause: err });
    }
    slotOf.set(r, records.length);
    records.push(rec);
    where.push(ip);
  };
  for (let i = 0; i < raw.v4Count; i++) {
    const r = raw.v4Record[i]!;
    if (!slotOf.has(r)) decode(r, formatIpv4(raw.v4First[i]!));
  }
  for (let i = 0; i < raw.v6Count; i++) {
    const r = raw.v6Record[i]!;
    const o = i * 4;
    if (!slotOf.has(r)) decode(r, formatIpv6(raw.v6First[o]!, raw.v6First[o + 1]!, raw.v6First[o + 2]!, raw.v6First[o + 3]!));
  }

  const kind: GeoIpKind = options.kind ?? typeKind ?? detectKind(records, where, bad);
  const values = new Int32Array(records.length);
  const codes: string[] = [];
  if (kind === 'country') {
    const seen = new Map<string, number>();
    let withKey = 0;
    for (let s = 0; s < records.length; s++) {
      const iso = countryOf(records[s], where[s]!, bad);
      if (iso === undefined) {
        values[s] = -1;
        continue;
      }
      withKey++;
      let idx = seen.get(iso);
      if (idx === undefined) {
        idx = seen.size;
        seen.set(iso, idx);
      }
      values[s] = idx;
    }
    if (withKey === 0 && records.length > 0) throw bad(noKeyMessage(records, 'country.iso_code or registered_country.iso_code', 'the GeoLite2/GeoIP2 Country or City layout'));
    // Codes sorted, so that a table's code indices do not depend on tree order.
    const sorted = [...seen.keys()].sort();
    const remap = new Int32Array(seen.size);
    sorted.forEach((c, i) => {
      codes.push(c);
      remap[seen.get(c)!] = i;
    });
    for (let s = 0; s < values.length; s++) if (values[s]! >= 0) values[s] = remap[values[s]!]!;
  } else {
    let withKey = 0;
    for (let s = 0; s < records.length; s++) {
      const asn = asnOf(records[s], where[s]!, bad);
      values[s] = asn === undefined ? -1 : asn | 0;
      if (asn !== undefined) withKey++;
    }
    if (withKey === 0 && records.length > 0) throw bad(noKeyMessage(records, 'autonomous_system_number', 'the GeoLite2/GeoIP2 ASN layout'));
  }

  const v4 = finish(raw.v4First, raw.v4Last, raw.v4Record, raw.v4Count, 1, slotOf, values);
  const v6 = finish(raw.v6First, raw.v6Last, raw.v6Record, raw.v6Count, 4, slotOf, values);
  const base = {
    v4First: v4.first,
    v4Last: v4.last,
    v4Value: v4.value,
    v6First: v6.first,
    v6Last: v6.last,
    v6Value: v6.value,
    v6Aliases: raw.aliases,
  };
  const table: CountryTable | AsnTable = kind === 'country' ? { kind, ...base, codes } : { kind, ...base };
  return { file, kind, metadata, table, reader, records: records.length };
}

function detectKind(records: readonly unknown[], where: readonly string[], bad: (what: string) => MoatError): GeoIpKind {
  for (let i = 0; i < records.length; i++) {
    const r = records[i];
    if (!isMap(r)) throw bad(`the record for ${where[i]} is not a map`);
    if ('country' in r || 'registered_country' in r) return 'country';
    if ('autonomous_system_number' in r) return 'asn';
  }
  if (records.length === 0) throw bad('it holds no records, so its layout cannot be told (pass the kind expected)');
  throw bad(noKeyMessage(records, 'country.iso_code or autonomous_system_number', 'a GeoLite2/GeoIP2 Country, City or ASN layout'));
}

function noKeyMessage(records: readonly unknown[], keys: string, layout: string): string {
  const first = records[0];
  const found = isMap(first) ? Object.keys(first).join(', ') || 'none' : typeof first;
  return `no record has ${keys} (the first record has keys: ${found}); expected ${layout}, or DB-IP's equivalent`;
}

function isMap(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const ISO = /^[A-Za-z]{2}$/;

function countryOf(rec: unknown, ip: string, bad: (what: string) => MoatError): string | undefined {
  if (!isMap(rec)) throw bad(`the record for ${ip} is not a map`);
  const pick = (key: 'country' | 'registered_country'): string | undefined => {
    const c = rec[key];
    if (c === undefined) return undefined;
    if (!isMap(c)) throw bad(`${key} of the record for ${ip} is not a map`);
    const iso = c.iso_code;
    if (iso === undefined) return undefined;
    if (typeof iso !== 'string' || !ISO.test(iso)) throw bad(`${key}.iso_code of the record for ${ip} is ${JSON.stringify(iso)}, not a two-letter code`);
    return iso.toUpperCase();
  };
  return pick('country') ?? pick('registered_country');
}

function asnOf(rec: unknown, ip: string, bad: (what: string) => MoatError): number | undefined {
  if (!isMap(rec)) throw bad(`the record for ${ip} is not a map`);
  const n = rec.autonomous_system_number;
  if (n === undefined) return undefined;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n >= 0xffffffff) {
    throw bad(`autonomous_system_number of the record for ${ip} is ${JSON.stringify(n)}, not an AS number`);
  }
  return n;
}

/** Maps record values to table values, drops ranges without data and merges adjacent equal ones. */
function finish(
  first: Uint32Array,
  last: Uint32Array,
  record: Float64Array,
  count: number,
  words: 1 | 4,
  slotOf: ReadonlyMap<number, number>,
  values: Int32Array,
): { first: Uint32Array; last: Uint32Array; value: Int32Array } {
  const f = new Uint32Array(count * words);
  const l = new Uint32Array(count * words);
  const v = new Int32Array(count);
  let n = 0;
  for (let i = 0; i < count; i++) {
    const val = values[slotOf.get(record[i]!)!]!;
    if (val === -1) continue;
    const o = i * words;
    if (n > 0 && v[n - 1] === val && adjacent(l, (n - 1) * words, first, o, words)) {
      for (let k = 0; k < words; k++) l[(n - 1) * words + k] = last[o + k]!;
      continue;
    }
    for (let k = 0; k < words; k++) {
      f[n * words + k] = first[o + k]!;
      l[n * words + k] = last[o + k]!;
    }
    v[n] = val;
    n++;
  }
  return { first: f.slice(0, n * words), last: l.slice(0, n * words), value: v.slice(0, n) };
}

/** True when b[bo..] = a[ao..] + 1 (words-wide big-endian). */
function adjacent(a: Uint32Array, ao: number, b: Uint32Array, bo: number, words: number): boolean {
  let carry = 1;
  for (let i = words - 1; i >= 0; i--) {
    const s = a[ao + i]! + carry;
    carry = s === 0x100000000 ? 1 : 0;
    if ((s >>> 0) !== b[bo + i]) return false;
  }
  return carry === 0;
}
