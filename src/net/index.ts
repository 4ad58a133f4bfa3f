// Public face of the IP primitives: addresses and prefixes (parse, format, mask),
// range sets and IP sets, IP list files, and the flattened GeoIP range tables
// that geoip/ produces and the address table (table/) consumes.
export {
  parseIp,
  parseIpv4,
  parseCidr,
  formatIp,
  formatIpv4,
  formatIpv6,
  maskAddress,
  prefixLast,
  compareWords,
  type IpAddress,
  type IpPrefix,
  type CidrResult,
} from './ip.js';
export { NumberRangeSet, Ip6RangeSet } from './range-set.js';
export { IpRangeSet, parseIpRange, EMPTY_IP_SET, type IpMatcher, type IpRange } from './ip-set.js';
export {
  loadListFile,
  loadListFileSync,
  readListFileSync,
  parseListText,
  rangeListFromStrings,
  emptyRangeList,
  type IpRangeList,
} from './list-file.js';
export {
  GEO_NONE,
  asnOfValue,
  embeddedIpv4,
  type GeoRangeTable,
  type CountryRanges,
  type AsnRanges,
  type Ipv4Alias,
} from './geo-ranges.js';
