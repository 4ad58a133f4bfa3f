// Flattened GeoIP tables answer exactly what maxmind's Reader answers, on the
// committed fixtures and on synthetic databases of every record size; layouts
// other than Country/City/ASN are rejected with 4004, unreadable files with 4003.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { Reader } from 'maxmind';
import { afterAll, describe, expect, it } from 'vitest';
import { MoatError } from '../../src/errors/index.js';
import {
  geoIpFromBuffer,
  geoValue4,
  geoValue6,
  openGeoIp,
  openGeoIpSync,
  type AsnTable,
  type CountryTable,
  type GeoIpDatabase,
} from '../../src/geoip/index.js';
import { asnOfValue, formatIpv4, formatIpv6, parseIp, type GeoRangeTable } from '../../src/net/index.js';
import { buildFixtureDatabases, geoipFixtureDir } from '../support/make-mmdb.js';
import { asnRecord, countryRecord, MmdbWriter, type MmdbValue } from '../support/mmdb-writer.js';
import { Rng, seedFrom } from '../support/random.js';
import { syntheticAsnDb, syntheticCountryDb } from '../support/synthetic-geoip.js';

const FIXTURES = geoipFixtureDir();
const COUNTRY_DB = join(FIXTURES, 'test-country.mmdb');
const ASN_DB = join(FIXTURES, 'test-asn.mmdb');
const SEED = seedFrom('GEOIP_SEED');

const tmp = mkdtempSync(join(tmpdir(), 'moat-geoip-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function words(text: string): number[] {
  const a = parseIp(text);
  if (a === undefined) throw new Error(`bad address ${text}`);
  return [...a.words];
}

/** What the Reader says for an address, in the table's value terms (country code or AS number). */
function readerAnswer(db: GeoIpDatabase, ip: string): string | number | undefined {
  const rec = db.reader.get(ip) as Record<string, Record<string, unknown> | undefined> | null;
  if (rec === null) return undefined;
  if (db.kind === 'country') return (rec.country?.iso_code ?? rec.registered_country?.iso_code) as string | undefined;
  return rec.autonomous_system_number as unknown as number | undefined;
}

/** What the table says, in the same terms. */
function tableAnswer(db: GeoIpDatabase, value: number): string | number | undefined {
  if (value === -1) return undefined;
  return db.kind === 'country' ? (db.table as CountryTable).codes[value] : asnOfValue(value);
}

function randomWord(rng: Rng): number {
  return rng.int(0x10000) * 0x10000 + rng.int(0x10000);
}

/** IPv4 probes: uniform, inside ranges, and range boundaries ±1. */
function probes4(rng: Rng, t: GeoRangeTable, n: number): number[] {
  const out: number[] = [];
  const ranges = t.v4Value.length;
  while (out.length < n) {
    const r = rng.next();
    if (r < 0.4 || ranges === 0) out.push(randomWord(rng));
    else {
      const i = rng.int(ranges);
      const f = t.v4First[i]!;
      const l = t.v4Last[i]!;
      const pick = rng.int(5);
      const v = pick === 0 ? f : pick === 1 ? l : pick === 2 ? f - 1 : pick === 3 ? l + 1 : f + rng.int(l - f + 1);
      if (v >= 0 && v <= 0xffffffff) out.push(v);
    }
  }
  return out;
}

function add128(w: readonly number[], delta: number): number[] {
  return fromBig((toBig(w) + BigInt(delta)) & ((1n << 128n) - 1n));
}

function toBig(w: readonly number[]): bigint {
  return (BigInt(w[0]!) << 96n) | (BigInt(w[1]!) << 64n) | (BigInt(w[2]!) << 32n) | BigInt(w[3]!);
}

function fromBig(x: bigint): number[] {
  return [Number((x >> 96n) & 0xffffffffn), Number((x >> 64n) & 0xffffffffn), Number((x >> 32n) & 0xffffffffn), Number(x & 0xffffffffn)];
}

/** A random address in [f, l]. */
function between(rng: Rng, f: readonly number[], l: readonly number[]): number[] {
  const span = toBig(l) - toBig(f) + 1n;
  const r = toBig([randomWord(rng), randomWord(rng), randomWord(rng), randomWord(rng)]) % span;
  return fromBig(toBig(f) + r);
}

/** IPv6 probes: uniform, in alias regions (::/96, ::ffff:0:0/96, 2002::/16), inside ranges, boundaries ±1. */
function probes6(rng: Rng, t: GeoRangeTable, n: number): number[][] {
  const out: number[][] = [];
  const ranges = t.v6Value.length;
  while (out.length < n) {
    const r = rng.next();
    if (r < 0.15) out.push([randomWord(rng), randomWord(rng), randomWord(rng), randomWord(rng)]);
    else if (r < 0.22) out.push([0, 0, 0xffff, randomWord(rng)]);
    else if (r < 0.27) out.push([0, 0, 0, randomWord(rng)]);
    else if (r < 0.34) out.push([0x20020000 + rng.int(0x10000), randomWord(rng), randomWord(rng), randomWord(rng)]);
    else if (r < 0.37) out.push([0, 0, rng.int(3), randomWord(rng)]);
    else if (ranges === 0) out.push([0x20010db8, randomWord(rng), randomWord(rng), randomWord(rng)]);
    else {
      const i = rng.int(ranges);
      const f = Array.from(t.v6First.subarray(i * 4, i * 4 + 4));
      const l = Array.from(t.v6Last.subarray(i * 4, i * 4 + 4));
      const pick = rng.int(5);
      if (pick === 0) out.push(f);
      else if (pick === 1) out.push(l);
      else if (pick === 2) out.push(add128(f, -1));
      else if (pick === 3) out.push(add128(l, 1));
      else out.push(between(rng, f, l));
    }
  }
  return out;
}

/** Compares the table with the Reader on n IPv4 and n IPv6 probes; returns the mismatches (at most 10). */
function mismatches(db: GeoIpDatabase, n: number, seed: number): string[] {
  const rng = new Rng(seed);
  const bad: string[] = [];
  for (const a of probes4(rng, db.table, n)) {
    const ip = formatIpv4(a);
    const want = readerAnswer(db, ip);
    const got = tableAnswer(db, geoValue4(db.table, a));
    if (want !== got && bad.length < 10) bad.push(`${ip}: reader ${String(want)}, table ${String(got)}`);
  }
  if (db.metadata.ipVersion === 6) {
    for (const w of probes6(rng, db.table, n)) {
      const ip = formatIpv6(w[0]!, w[1]!, w[2]!, w[3]!);
      const want = readerAnswer(db, ip);
      const got = tableAnswer(db, geoValue6(db.table, w[0]!, w[1]!, w[2]!, w[3]!));
      if (want !== got && bad.length < 10) bad.push(`${ip}: reader ${String(want)}, table ${String(got)}`);
    }
  }
  return bad;
}

function expectMoatError(fn: () => unknown, name: string, pattern: RegExp): MoatError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(MoatError);
    const e = err as MoatError;
    expect(e.errorName).toBe(name);
    expect(e.message).toMatch(pattern);
    return e;
  }
  throw new Error(`expected ${name}`);
}

describe('the committed test databases', () => {
  it('are exactly what make-mmdb builds from the CSV sources', () => {
    const { country, asn } = buildFixtureDatabases();
    expect(readFileSync(COUNTRY_DB).equals(country), 'test-country.mmdb is stale: run make-mmdb').toBe(true);
    expect(readFileSync(ASN_DB).equals(asn), 'test-asn.mmdb is stale: run make-mmdb').toBe(true);
  });

  it('open as a GeoLite2-Country country database with the fixture countries', async () => {
    const db = await openGeoIp(COUNTRY_DB, { kind: 'country' });
    expect(db.kind).toBe('country');
    expect(db.metadata.databaseType).toBe('GeoLite2-Country');
    expect(db.metadata.ipVersion).toBe(6);
    const t = db.table;
    const c4 = (ip: string): string | undefined => t.codes[geoValue4(t, words(ip)[0]!)];
    const c6 = (ip: string, follow = true): string | undefined => {
      const w = words(ip);
      return t.codes[geoValue6(t, w[0]!, w[1]!, w[2]!, w[3]!, follow)];
    };
    expect(c4('81.2.69.142')).toBe('GB');
    expect(c4('8.8.8.8')).toBe('US');
    expect(c4('203.0.113.63')).toBe('JP');
    expect(c4('203.0.113.64')).toBe('BR'); // the nested /26 wins
    expect(c4('203.0.113.128')).toBe('JP');
    expect(c4('192.0.2.127')).toBe('FR');
    expect(c4('192.0.2.128')).toBe('NL');
    expect(c4('10.0.0.1')).toBeUndefined();
    expect(c6('2a00:1450:4001::1')).toBe('IE');
    expect(c6('2001:db8:1::1')).toBe('NO');
    expect(c6('2001:db8:2::1')).toBeUndefined();
    // IPv4-in-IPv6: the database aliases these prefixes to its IPv4 subtree.
    expect(c6('::ffff:81.2.69.1')).toBe('GB');
    expect(c6('::81.2.69.1')).toBe('GB');
    expect(c6('2002:5102:4501::1')).toBe('GB');
    expect(c6('::ffff:81.2.69.1', false)).toBeUndefined();
  });

  it('open as a GeoLite2-ASN database whose AS numbers read back above 2^31', () => {
    const db = openGeoIpSync(ASN_DB, { kind: 'asn' }) as GeoIpDatabase<AsnTable>;
    expect(db.kind).toBe('asn');
    const as4 = (ip: string): number => asnOfValue(geoValue4(db.table, words(ip)[0]!));
    expect(as4('8.8.8.8')).toBe(15169);
    expect(as4('203.0.113.1')).toBe(65536);
    expect(as4('203.0.113.200')).toBe(65551);
    expect(as4('198.19.255.255')).toBe(4_200_000_001);
    expect(as4('10.0.0.1')).toBeNaN();
    const w = words('2606:4700::1111');
    expect(asnOfValue(geoValue6(db.table, w[0]!, w[1]!, w[2]!, w[3]!))).toBe(13335);
  });

  it('list the IPv4 aliases once and keep aliased ranges out of the IPv6 table', () => {
    const db = openGeoIpSync(COUNTRY_DB);
    const aliases = db.table.v6Aliases.map((a) => `${formatIpv6(a.prefix[0]!, a.prefix[1]!, a.prefix[2]!, a.prefix[3]!)}/${a.length}`);
    expect(aliases.sort()).toEqual(['2002::/16', '::/96', '::ffff:0:0/96']);
    const t = db.table;
    for (let i = 0; i < t.v6Value.length; i++) {
      const w0 = t.v6First[i * 4]!;
      expect(w0 >>> 16 === 0x2002 || w0 === 0).toBe(false);
    }
    // Every fixture IPv6 network, and nothing else: 8 networks, none adjacent with the same country.
    expect(t.v6Value.length).toBe(8);
    expect(t.v4Value.length).toBe(12);
  });

  it('agree with the Reader on 100k random IPv4 and 100k random IPv6 addresses', () => {
    for (const file of [COUNTRY_DB, ASN_DB]) {
      const db = openGeoIpSync(file);
      expect(mismatches(db, 100_000, SEED), `seed ${SEED} (GEOIP_SEED)`).toEqual([]);
    }
  });
});

describe('flattening synthetic databases', () => {
  it('agrees with the Reader on 100k IPv4 and 100k IPv6 addresses of a 40k-network country database', () => {
    const rng = new Rng(SEED);
    const db = geoIpFromBuffer(syntheticCountryDb(rng, { v4: 30_000, v6: 10_000 }), 'synthetic-country.mmdb');
    expect(db.table.v4Value.length).toBeGreaterThan(5_000);
    expect(db.table.v6Value.length).toBeGreaterThan(2_000);
    expect(mismatches(db, 100_000, SEED + 1), `seed ${SEED} (GEOIP_SEED)`).toEqual([]);
  });

  it('agrees with the Reader on an ASN database with 5,000 AS numbers', () => {
    const db = geoIpFromBuffer(syntheticAsnDb(new Rng(SEED + 2), { v4: 20_000, v6: 5_000 }), 'synthetic-asn.mmdb');
    expect(db.kind).toBe('asn');
    expect(db.records).toBeGreaterThan(1000);
    expect(mismatches(db, 30_000, SEED + 3), `seed ${SEED} (GEOIP_SEED)`).toEqual([]);
  });

  for (const recordSize of [24, 28, 32] as const) {
    it(`reads ${recordSize}-bit records`, () => {
      const buf = syntheticCountryDb(new Rng(SEED + recordSize), { v4: 3000, v6: 1000, writer: { recordSize } });
      const db = geoIpFromBuffer(buf, `r${recordSize}.mmdb`);
      expect(db.metadata.recordSize).toBe(recordSize);
      expect(mismatches(db, 20_000, SEED + recordSize), `seed ${SEED} (GEOIP_SEED)`).toEqual([]);
    });
  }

  it('reads 28-bit records whose values pass 2^24 (the shared nibble byte)', () => {
    // 20 records of 1 MB each put the later data offsets past 2^24.
    const w = new MmdbWriter({ databaseType: 'GeoLite2-Country', recordSize: 28 });
    const codes = ['AD', 'AE', 'AF', 'AG', 'AI', 'AL', 'AM', 'AO', 'AQ', 'AR', 'AS', 'AT', 'AU', 'AW', 'AX', 'AZ', 'BA', 'BB', 'BD', 'BE'];
    codes.forEach((c, i) => {
      w.insert(`10.${i}.0.0/16`, { country: { iso_code: c }, padding: c.repeat(500_000) });
      w.insert(`2001:db8:${i}::/48`, { country: { iso_code: c }, padding: c.repeat(500_000) });
    });
    const buf = w.toBuffer();
    expect(buf.length).toBeGreaterThan(2 ** 24);
    const db = geoIpFromBuffer(buf, 'big28.mmdb');
    const t = db.table as CountryTable;
    expect(Array.from(t.v4Value, (v) => t.codes[v])).toEqual(codes);
    expect(Array.from(t.v6Value, (v) => t.codes[v])).toEqual(codes);
    expect(mismatches(db, 200, SEED + 6)).toEqual([]);
  });

  it('reads an ip_version 4 database, whose IPv6 table is empty', () => {
    const buf = syntheticCountryDb(new Rng(SEED + 7), { v4: 3000, writer: { ipVersion: 4 } });
    const db = geoIpFromBuffer(buf, 'v4.mmdb');
    expect(db.metadata.ipVersion).toBe(4);
    expect(db.table.v6Value.length).toBe(0);
    expect(db.table.v6Aliases).toEqual([]);
    expect(mismatches(db, 20_000, SEED + 7)).toEqual([]);
  });

  it('reads an IPv6 database without aliases: only ::/96 holds IPv4', () => {
    const buf = syntheticCountryDb(new Rng(SEED + 8), { v4: 2000, v6: 1000, writer: { aliasIpv6ToIpv4: false } });
    const db = geoIpFromBuffer(buf, 'noalias.mmdb');
    expect(db.table.v6Aliases.map((a) => a.length)).toEqual([96]);
    expect(mismatches(db, 20_000, SEED + 8)).toEqual([]);
  });

  it('merges neighbouring networks of one country into one range', () => {
    const w = new MmdbWriter({ databaseType: 'GeoLite2-Country' });
    w.insert('10.0.0.0/25', countryRecord('FR')).insert('10.0.0.128/25', countryRecord('FR', 'BE')).insert('10.0.1.0/24', countryRecord('DE'));
    const db = geoIpFromBuffer(w.toBuffer(), 'merge.mmdb');
    const t = db.table as CountryTable;
    expect(Array.from(t.v4First, formatIpv4)).toEqual(['10.0.0.0', '10.0.1.0']);
    expect(Array.from(t.v4Last, formatIpv4)).toEqual(['10.0.0.255', '10.0.1.255']);
    expect(Array.from(t.v4Value, (v) => t.codes[v])).toEqual(['FR', 'DE']);
  });
});

describe('country layouts', () => {
  function countryDb(databaseType: string, records: Array<[string, MmdbValue]>): GeoIpDatabase {
    const w = new MmdbWriter({ databaseType });
    for (const [net, rec] of records) w.insert(net, rec);
    return geoIpFromBuffer(w.toBuffer(), `${databaseType}.mmdb`);
  }

  it('falls back to registered_country when a record has no country', () => {
    const db = countryDb('GeoIP2-Country', [
      ['192.0.2.0/24', { registered_country: { iso_code: 'NL' } }],
      ['198.51.100.0/24', { continent: { code: 'EU' } }],
      ['203.0.113.0/24', { country: { names: { en: 'x' } }, registered_country: { iso_code: 'SE' } }],
      ['2001:db8::/32', { country: { iso_code: 'ie' } }],
    ]);
    const t = db.table as CountryTable;
    expect(t.codes[geoValue4(t, words('192.0.2.1')[0]!)]).toBe('NL');
    expect(geoValue4(t, words('198.51.100.1')[0]!)).toBe(-1);
    expect(t.codes[geoValue4(t, words('203.0.113.1')[0]!)]).toBe('SE');
    const w = words('2001:db8::1');
    expect(t.codes[geoValue6(t, w[0]!, w[1]!, w[2]!, w[3]!)]).toBe('IE');
  });

  it('accepts the City layout and DB-IP lite files', () => {
    const city = countryDb('GeoLite2-City', [['81.2.69.0/24', { city: { names: { en: 'London' } }, country: { iso_code: 'GB' }, location: { latitude: 51.5 } }]]);
    expect(city.kind).toBe('country');
    const dbip = countryDb('DBIP-Country-Lite', [['81.2.69.0/24', { continent: { code: 'EU' }, country: { iso_code: 'GB', is_in_european_union: false } }]]);
    expect(dbip.kind).toBe('country');
    const w = new MmdbWriter({ databaseType: 'DBIP-ASN-Lite (compat=GeoLite2-ASN)' });
    w.insert('8.8.8.0/24', asnRecord(15169, 'Google LLC'));
    expect(geoIpFromBuffer(w.toBuffer(), 'dbip-asn.mmdb').kind).toBe('asn');
  });

  it('tells the layout from the records when database_type names none', () => {
    const w = new MmdbWriter({ databaseType: 'my-geo' });
    w.insert('8.8.8.0/24', countryRecord('US'));
    expect(geoIpFromBuffer(w.toBuffer(), 'my-geo.mmdb').kind).toBe('country');
    const a = new MmdbWriter({ databaseType: 'my-as' });
    a.insert('8.8.8.0/24', asnRecord(15169, 'GOOGLE'));
    expect(geoIpFromBuffer(a.toBuffer(), 'my-as.mmdb').kind).toBe('asn');
  });
});

describe('rejecting databases', () => {
  it('rejects a flat country_code layout (ip-location-db) with 4004 naming the keys found', () => {
    const w = new MmdbWriter({ databaseType: 'ip-location-db-country' });
    w.insert('8.8.8.0/24', { country_code: 'US' });
    const e = expectMoatError(() => geoIpFromBuffer(w.toBuffer(), 'flat.mmdb'), 'GEOIP_BAD_LAYOUT', /flat\.mmdb.*country_code/);
    expect(e.code).toBe(4004);
    expect(e.file).toBe('flat.mmdb');
  });

  it('rejects a GeoLite2-Country file whose records lack country codes', () => {
    const w = new MmdbWriter({ databaseType: 'GeoLite2-Country' });
    w.insert('8.8.8.0/24', { country_code: 'US' });
    expectMoatError(() => geoIpFromBuffer(w.toBuffer(), 'c.mmdb'), 'GEOIP_BAD_LAYOUT', /no record has country\.iso_code/);
  });

  it('rejects an ASN database where a country database is expected, and the reverse', () => {
    expectMoatError(() => openGeoIpSync(ASN_DB, { kind: 'country' }), 'GEOIP_BAD_LAYOUT', /GeoLite2-ASN.*country database is expected/);
    expectMoatError(() => openGeoIpSync(COUNTRY_DB, { kind: 'asn' }), 'GEOIP_BAD_LAYOUT', /GeoLite2-Country.*asn database is expected/);
  });

  it('rejects other MaxMind products such as Connection-Type', () => {
    const w = new MmdbWriter({ databaseType: 'GeoIP2-Connection-Type' });
    w.insert('8.8.8.0/24', { connection_type: 'Corporate' });
    expectMoatError(() => geoIpFromBuffer(w.toBuffer(), 'ct.mmdb'), 'GEOIP_BAD_LAYOUT', /connection_type/);
  });

  it('rejects malformed country codes and AS numbers', () => {
    const w = new MmdbWriter({ databaseType: 'GeoLite2-Country' });
    w.insert('8.8.8.0/24', { country: { iso_code: 'USA' } });
    expectMoatError(() => geoIpFromBuffer(w.toBuffer(), 'iso.mmdb'), 'GEOIP_BAD_LAYOUT', /country\.iso_code of the record for 8\.8\.8\.0 is "USA"/);
    const a = new MmdbWriter({ databaseType: 'GeoLite2-ASN' });
    a.insert('8.8.8.0/24', { autonomous_system_number: 'AS15169' });
    expectMoatError(() => geoIpFromBuffer(a.toBuffer(), 'asn.mmdb'), 'GEOIP_BAD_LAYOUT', /autonomous_system_number .*"AS15169"/);
  });

  it('reports unreadable, non-MaxMind, gzip-compressed and truncated files with 4003', async () => {
    await expect(openGeoIp(join(tmp, 'missing.mmdb'))).rejects.toMatchObject({ code: 4003, message: expect.stringMatching(/missing\.mmdb: no such file/) });
    expectMoatError(() => openGeoIpSync(tmp), 'GEOIP_READ', /it is a directory/);
    const junk = join(tmp, 'junk.mmdb');
    writeFileSync(junk, Buffer.from('this is not a database'));
    expectMoatError(() => openGeoIpSync(junk), 'GEOIP_READ', /junk\.mmdb: not a MaxMind DB file/);
    const gz = join(tmp, 'c.mmdb.gz');
    writeFileSync(gz, gzipSync(readFileSync(COUNTRY_DB)));
    expectMoatError(() => openGeoIpSync(gz), 'GEOIP_READ', /gzip-compressed/);
    // Keep the metadata, drop most of the tree.
    const full = readFileSync(COUNTRY_DB);
    const marker = full.lastIndexOf(Buffer.from([0xab, 0xcd, 0xef, ...Buffer.from('MaxMind.com')]));
    const cut = Buffer.concat([full.subarray(0, 100), full.subarray(marker)]);
    expectMoatError(() => geoIpFromBuffer(cut, 'cut.mmdb'), 'GEOIP_READ', /cut\.mmdb: truncated/);
  });

  it('keeps the Reader for cross-checks on the same buffer', () => {
    const db = openGeoIpSync(COUNTRY_DB);
    expect(db.reader).toBeInstanceOf(Reader);
  });
});
