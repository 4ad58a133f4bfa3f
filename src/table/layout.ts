// The address table's shapes, shared by its builder and its lookups: what it is
// built from, the packed record layout, and the parts the builder hands to the table.

import type { AsnRanges, CountryRanges, IpRangeList, Ipv4Alias } from '../net/index.js';

/** A named IP list to merge. */
export interface AddressTableList {
  readonly name: string;
  readonly ranges: IpRangeList;
}

/** What to merge. Every source is optional; at most 32 lists. */
export interface AddressTableInput {
  readonly country?: CountryRanges;
  readonly asn?: AsnRanges;
  readonly lists: readonly AddressTableList[];
}

/** The most lists one table can hold (one bit each in a uint32). */
export const MAX_LISTS = 32;

/** Entries of a /16 index (index4, index6): one per /16 and one past the end. */
export const INDEX_SIZE = 65_537;

/** Offsets in a packed record (rec4, rec6). */
export const REC_LISTS = 0;
export const REC_COUNTRY = 1;
export const REC_ASN = 2;
export const REC_HAS_ASN = 3;

/** The arrays of an AddressTable, as the builder makes them (see AddressTable for each). */
export interface TableParts {
  readonly countryCodes: readonly string[];
  readonly listNames: readonly string[];
  readonly seg4: Uint16Array;
  readonly index4: Uint32Array;
  readonly rec4: Int32Array;
  readonly country4: Int16Array;
  readonly asn4: Float64Array;
  readonly lists4: Uint32Array;
  readonly starts6: Uint32Array;
  readonly index6: Uint32Array;
  readonly record6: Uint32Array;
  readonly country6: Int16Array;
  readonly asn6: Float64Array;
  readonly lists6: Uint32Array;
  readonly rec6: Int32Array;
  readonly aliases6: readonly Ipv4Alias[];
  readonly listScreen4: Uint32Array | null;
  readonly listScreen6: Uint32Array | null;
}
