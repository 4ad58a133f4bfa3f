// tshark reads the committed test databases (native-fixtures/geoip/*.mmdb)
// through its MaxMind support (mmdbresolve), and for every packet of a pcap
// to and from the fixture networks it shows the country and AS number that
// our flattened tables give. Without tshark the test is skipped, except on CI
// (CI=true) where it fails.

import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildPcap } from '../../src/capture/index.js';
import { geoValue4, geoValue6, openGeoIpSync, type AsnTable, type CountryTable } from '../../src/geoip/index.js';
import { asnOfValue, parseIp } from '../../src/net/index.js';
import { AddressTable } from '../../src/table/index.js';
import { geoipFixtureDir } from '../support/make-mmdb.js';
import { buildFrame } from '../support/packet-builder.js';
import { findTshark } from '../support/tshark.js';

const TSHARK = findTshark();

/** Source and destination of each packet (frame numbers are 1-based indexes into this). */
const PACKETS: Array<[string, string]> = [
  ['81.2.69.142', '192.0.2.1'], // GB -> FR
  ['8.8.8.8', '81.2.69.1'], // US -> GB
  ['10.0.0.1', '8.8.4.4'], // none -> none
  ['203.0.113.70', '203.0.113.200'], // BR (nested) -> JP
  ['192.0.2.200', '198.51.100.7'], // NL -> CA
  ['198.18.0.1', '1.1.1.1'], // AS 4200000001 -> AU
  ['5.9.1.2', '133.1.2.3'], // DE -> JP
  ['2a00:1450:4001::5', '2001:db8::1'], // IE -> SE
  ['2001:db8:1::5', '2606:4700::1111'], // NO -> US
  ['2001:db8:1ff::1', '2001:db8:2::1'], // CH -> none
  ['2a01:4f8::1', '2400:cb00::1'], // DE -> SG
  ['::ffff:81.2.69.142', '2001:200::1'], // IPv4-mapped (aliased to GB) -> JP
  ['2002:5102:458e::1', '2001:db8::1'], // 6to4 of 81.2.69.142 (aliased to GB) -> SE
];

const FIELDS = [
  'frame.number',
  'ip.geoip.src_country_iso',
  'ip.geoip.dst_country_iso',
  'ip.geoip.src_asnum',
  'ip.geoip.dst_asnum',
  'ip.geoip.src_country',
  'ipv6.geoip.src_country_iso',
  'ipv6.geoip.dst_country_iso',
  'ipv6.geoip.src_asnum',
  'ipv6.geoip.dst_asnum',
];

let dir = '';
let pcap = '';

function run(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      TSHARK!,
      ['-o', `uat:maxmind_db_paths:"${join(dir, 'db')}"`, ...args],
      { env: { ...process.env, WIRESHARK_CONFIG_DIR: join(dir, 'config'), LC_ALL: 'C' } },
      (err, stdout, stderr) => (err ? reject(new Error(`tshark ${args.join(' ')}: ${String(err)}\n${stderr}`)) : resolve(stdout)),
    );
  });
}

async function frames(filter: string): Promise<number[]> {
  const out = await run(['-n', '-r', pcap, '-Y', filter, '-T', 'fields', '-e', 'frame.number']);
  return out
    .split('\n')
    .filter((l) => l !== '')
    .map(Number);
}

describe.runIf(TSHARK)('tshark with the test GeoIP databases', () => {
  const fixtures = geoipFixtureDir();
  const country = openGeoIpSync(join(fixtures, 'test-country.mmdb'), { kind: 'country' }).table as CountryTable;
  const asn = openGeoIpSync(join(fixtures, 'test-asn.mmdb'), { kind: 'asn' }).table as AsnTable;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'moat-tshark-geoip-'));
    mkdirSync(join(dir, 'db'));
    mkdirSync(join(dir, 'config'));
    for (const f of ['test-country.mmdb', 'test-asn.mmdb']) copyFileSync(join(fixtures, f), join(dir, 'db', f));
    pcap = join(dir, 'geoip.pcap');
    const packets = PACKETS.map(([src, dst], i) => ({
      data: buildFrame({
        ip: src.includes(':') ? { version: 6, src, dst, hopLimit: 64 } : { version: 4, src, dst, ttl: 64 },
        l4: { kind: 'udp', srcPort: 40000 + i, dstPort: 53 },
      }),
      seconds: 1_700_000_000 + i,
    }));
    writeFileSync(pcap, buildPcap(packets));
  });

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Our answer for an address: [country code or '', AS number or ''] as tshark prints them. */
  function ours(ip: string): [string, string] {
    const w = parseIp(ip)!.words;
    const c = w.length === 1 ? geoValue4(country, w[0]!) : geoValue6(country, w[0]!, w[1]!, w[2]!, w[3]!);
    const a = w.length === 1 ? geoValue4(asn, w[0]!) : geoValue6(asn, w[0]!, w[1]!, w[2]!, w[3]!);
    return [c === -1 ? '' : country.codes[c]!, a === -1 ? '' : String(asnOfValue(a))];
  }

  it('shows for every packet the countries and AS numbers of our flattened tables', async () => {
    const args = ['-n', '-r', pcap, '-T', 'fields', '-E', 'separator=,', '-E', 'occurrence=f'];
    for (const f of FIELDS) args.push('-e', f);
    const rows = (await run(args)).split('\n').filter((l) => l !== '');
    expect(rows.length).toBe(PACKETS.length);
    rows.forEach((row, i) => {
      const v = row.split(',');
      const [src, dst] = PACKETS[i]!;
      const v6 = src.includes(':');
      const got = v6 ? { src: [v[6], v[8]], dst: [v[7], v[9]] } : { src: [v[1], v[3]], dst: [v[2], v[4]] };
      expect(got, `frame ${i + 1}: ${src} -> ${dst}`).toEqual({ src: ours(src), dst: ours(dst) });
      // names.en is the ISO code, so tshark's country name reads like Cloudflare's ip.src.country.
      if (!v6) expect(v[5]).toBe(v[1]);
    });
  });

  it('filters by source country and AS number', async () => {
    const cases: Array<[string, number[]]> = [
      ['ip.geoip.src_country_iso == "GB"', [1]],
      ['ip.geoip.dst_country_iso == "GB"', [2]],
      ['ip.geoip.src_asnum == 15169', [2]],
      ['ip.geoip.src_asnum == 4200000001', [6]],
      ['ipv6.geoip.src_country_iso == "IE"', [8]],
      ['ipv6.geoip.src_asnum == 15169', [8]],
      // Aliased IPv6 sources answer with the embedded IPv4 address's record, as geoValue6 does.
      ['ipv6.geoip.src_country_iso == "GB"', [12, 13]],
    ];
    const got = await Promise.all(cases.map(([f]) => frames(f)));
    expect(got).toEqual(cases.map(([, want]) => want));
  });

  it('agrees with the AddressTable, whose IPv6 lookups follow aliases only through v4Alias6', () => {
    const t = AddressTable.build({ country, asn, lists: [] });
    for (const [src] of PACKETS) {
      const w = parseIp(src)!.words;
      let code: number;
      if (w.length === 1) code = t.country4[t.lookup4(w[0]!)]!;
      else {
        code = t.country6[t.lookup6(w[0]!, w[1]!, w[2]!, w[3]!)]!;
        const v4 = t.v4Alias6(w[0]!, w[1]!, w[2]!, w[3]!);
        if (v4 >= 0) {
          expect(code, `${src} has no IPv6 data of its own`).toBe(-1);
          code = t.country4[t.lookup4(v4)]!;
        }
      }
      expect(code === -1 ? '' : t.countryCodes[code], src).toBe(ours(src)[0]);
    }
  });
});
