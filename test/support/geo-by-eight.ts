// A small address table for packet-path tests: GeoIP by /8, 10.x to 19.x, as
// country i-10 of COUNTRIES_BY_EIGHT and AS 64510+i-10; IPv6 2001:db8::/32 is
// "RU" with no AS number; and the lists given.
import type { Ipv4Alias } from '../../src/net/geo-ranges.js';
import { rangeListFromStrings } from '../../src/net/index.js';
import { AddressTable } from '../../src/table/index.js';

export const COUNTRIES_BY_EIGHT = ['CN', 'RU', 'KP', 'IR', 'SY', 'CU', 'VE', 'BY', 'MM', 'SD'];

/**
 * The table, with lists given as entries (`10.0.0.0/8`, `2001:db8::/48`) by
 * name, and optionally IPv6 prefixes the GeoIP data answers with their embedded IPv4 address.
 */
export function geoByEightTable(lists: Readonly<Record<string, readonly string[]>>, v6Aliases: readonly Ipv4Alias[] = []): AddressTable {
  const first: number[] = [];
  const last: number[] = [];
  const values: number[] = [];
  for (let i = 10; i < 20; i++) {
    first.push(i * 2 ** 24);
    last.push(i * 2 ** 24 + 2 ** 24 - 1);
    values.push(i - 10);
  }
  return AddressTable.build({
    country: {
      codes: COUNTRIES_BY_EIGHT,
      v4First: Uint32Array.from(first), v4Last: Uint32Array.from(last), v4Value: Int32Array.from(values),
      v6First: Uint32Array.from([0x20010db8, 0, 0, 0]), v6Last: Uint32Array.from([0x20010db8, 0xffffffff, 0xffffffff, 0xffffffff]), v6Value: Int32Array.from([1]),
      v6Aliases,
    },
    asn: {
      v4First: Uint32Array.from(first), v4Last: Uint32Array.from(last), v4Value: Int32Array.from(values.map((v) => 64510 + v)),
      v6First: new Uint32Array(0), v6Last: new Uint32Array(0), v6Value: new Int32Array(0),
      v6Aliases,
    },
    lists: Object.entries(lists).map(([name, entries]) => ({ name, ranges: rangeListFromStrings([...entries]) })),
  });
}
