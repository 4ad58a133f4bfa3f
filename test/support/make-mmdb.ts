// Writes the test GeoIP databases from their text sources:
//   native-fixtures/geoip/country.csv -> test-country.mmdb (GeoLite2-Country layout)
//   native-fixtures/geoip/asn.csv     -> test-asn.mmdb     (GeoLite2-ASN layout)
// Run: npx tsc -p tsconfig.json && node dist/test/support/make-mmdb.js
// Output is deterministic (fixed build epoch), so the committed files can be
// checked against a fresh build (test/geoip/fixtures.test.ts does).

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { asnRecord, countryRecord, MmdbWriter, type MmdbWriterOptions } from './mmdb-writer.js';

/** One row of a fixture CSV. */
export interface CsvRow {
  readonly line: number;
  readonly cells: readonly string[];
}

/** Reads a fixture CSV: a header line, `#` comment lines and blank lines skipped; the last column may contain commas. */
export function readCsv(text: string, columns: number): CsvRow[] {
  const rows: CsvRow[] = [];
  let header = true;
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    if (header) {
      header = false;
      return;
    }
    const parts = line.split(',');
    if (parts.length < columns) throw new Error(`line ${i + 1}: expected ${columns} columns: ${line}`);
    const cells = [...parts.slice(0, columns - 1), parts.slice(columns - 1).join(',')].map((c) => c.trim());
    rows.push({ line: i + 1, cells });
  });
  return rows;
}

/** The GeoLite2-Country-layout database of a `network,iso_code` CSV. */
export function buildCountryMmdb(csv: string, options: Partial<MmdbWriterOptions> = {}): Buffer {
  const w = new MmdbWriter({
    databaseType: 'GeoLite2-Country',
    description: { en: 'Moat test country database (made-up data)' },
    ...options,
  });
  for (const { line, cells } of readCsv(csv, 2)) {
    const [network, iso] = cells as [string, string];
    if (!/^[A-Z]{2}$/.test(iso)) throw new Error(`line ${line}: bad ISO code ${iso}`);
    w.insert(network, countryRecord(iso));
  }
  return w.toBuffer();
}

/** The GeoLite2-ASN-layout database of a `network,asn,organization` CSV. */
export function buildAsnMmdb(csv: string, options: Partial<MmdbWriterOptions> = {}): Buffer {
  const w = new MmdbWriter({
    databaseType: 'GeoLite2-ASN',
    description: { en: 'Moat test ASN database (made-up data)' },
    ...options,
  });
  for (const { line, cells } of readCsv(csv, 3)) {
    const [network, asn, org] = cells as [string, string, string];
    if (!/^\d+$/.test(asn) || Number(asn) > 0xfffffffe) throw new Error(`line ${line}: bad AS number ${asn}`);
    w.insert(network, asnRecord(Number(asn), org));
  }
  return w.toBuffer();
}

/** The repository root: the nearest ancestor of this file holding package.json. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('package.json not found above ' + fileURLToPath(import.meta.url));
    dir = up;
  }
  // From dist/test/support the nearest package.json is the repository's own (dist has none).
  return dir;
}

/** Directory of the GeoIP fixtures. */
export function geoipFixtureDir(): string {
  return join(repoRoot(), 'native-fixtures', 'geoip');
}

/** Builds both databases from the CSVs in `dir` (default: the fixture directory). */
export function buildFixtureDatabases(dir = geoipFixtureDir()): { country: Buffer; asn: Buffer } {
  return {
    country: buildCountryMmdb(readFileSync(join(dir, 'country.csv'), 'utf8')),
    asn: buildAsnMmdb(readFileSync(join(dir, 'asn.csv'), 'utf8')),
  };
}

function main(): void {
  const dir = geoipFixtureDir();
  const { country, asn } = buildFixtureDatabases(dir);
  writeFileSync(join(dir, 'test-country.mmdb'), country);
  writeFileSync(join(dir, 'test-asn.mmdb'), asn);
  console.log(`wrote ${join(dir, 'test-country.mmdb')} (${country.length} bytes) and ${join(dir, 'test-asn.mmdb')} (${asn.length} bytes)`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) main();
