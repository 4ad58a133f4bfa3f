// Public face of GeoIP: open a MaxMind DB (country or ASN layout), check it,
// and flatten it into range tables for the AddressTable. The maxmind Reader is
// never used per packet.
//
// IPv4-in-IPv6: IPv4 ranges come from the IPv4 subtree only. The IPv6 table
// holds native IPv6 networks; ::/96 and the prefixes the database aliases to
// the IPv4 subtree (GeoLite2: ::ffff:0:0/96 and 2002::/16) are listed in
// `v6Aliases`, not expanded. geoValue6() follows them (so `::ffff:81.2.69.1`
// answers GB, as `reader.get()` and tshark do); the AddressTable does not
// (there an IPv6 address has IPv6 data only) but offers `v4Alias6()` to
// follow them on demand. See AddressTable for the reasoning.
export {
  openGeoIp,
  openGeoIpSync,
  readGeoIpFileSync,
  geoIpFromBuffer,
  type GeoIpKind,
  type GeoIpDatabase,
  type GeoIpMetadata,
  type CountryTable,
  type AsnTable,
  type OpenGeoIpOptions,
} from './database.js';
export { geoValue4, geoValue6 } from './lookup.js';
