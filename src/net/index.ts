// Public face of the IP primitives: parsing, formatting, range sets and IP sets.
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
export { AddressTable, inRanges, MAX_LISTS, REC_ASN, REC_COUNTRY, REC_HAS_ASN, REC_LISTS, screenHas, type AddressTableInput, type AddressTableList } from './address-table.js';
export {
  GEO_NONE,
  asnOfValue,
  embeddedIpv4,
  type GeoRangeTable,
  type CountryRanges,
  type AsnRanges,
  type Ipv4Alias,
} from './geo-ranges.js';
