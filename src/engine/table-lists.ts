// The lists of a bundle as an address table holds them: what the compiler
// gets for `ip.src in $name` when lists come with GeoIP in one AddressTable.
// Rules then test list bits that the packet path's lookups write per packet
// (see lazy-lookups.ts) rather than looking addresses up themselves.

import type { ListProvider } from '../expr/index.js';
import type { AddressTable } from '../table/index.js';
import { FIELD_SLOTS as F } from '../packet/index.js';

/** A ListProvider over an AddressTable: membership is precomputed per packet into hidden bit fields. */
export function tableLists(table: AddressTable): ListProvider {
  const slotFor = (field: string): number | undefined =>
    field === 'ip.src' ? F.IP_SRC_LISTS : field === 'ip.dst' ? F.IP_DST_LISTS : undefined;
  const lazyFor = (field: string): number => (field === 'ip.src' ? F.LAZY_SRC_LISTS : field === 'ip.dst' ? F.LAZY_DST_LISTS : -1);
  return {
    has: (name) => table.hasList(name),
    get: (name) => {
      if (!table.hasList(name)) return undefined;
      const bit = table.listBit(name);
      return {
        precomputed: { bit, slotFor, lazyFor },
        contains4: (a: number) => (table.lists4[table.lookup4(a)]! & bit) !== 0,
        contains6: (w0: number, w1: number, w2: number, w3: number) => (table.lists6[table.lookup6(w0, w1, w2, w3)]! & bit) !== 0,
      };
    },
  };
}
