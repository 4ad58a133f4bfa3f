// Public face of the address table: GeoIP and IP lists merged into one segment
// table per address family (one lookup gives country, ASN and list bits), and
// the screens that spare the lookup for addresses no rule can match.
export { AddressTable } from './address-table.js';
export { MAX_LISTS, REC_ASN, REC_COUNTRY, REC_HAS_ASN, REC_LISTS, type AddressTableInput, type AddressTableList, type TableParts } from './layout.js';
export { inRanges, screenHas } from './screens.js';
