// Address lookups on demand: the GeoIP/list fields of a packet (countries, AS
// numbers, list bits) are marked pending when the packet is decoded and looked
// up in the address table only when a rule first reads them, unless a screen
// answers without a lookup. Runs per packet: allocates nothing.

import { shortBytesKey, type ExecutionContext, type LazyResolver } from '../expr/index.js';
import * as TABLE from '../table/index.js';
import { inRanges, screenHas, type AddressTable } from '../table/index.js';
import { checkCopies, FIELD_SLOTS as F } from '../packet/index.js';
import type { Evaluator } from './evaluator.js';
import type { ProgramHost } from './packet-program.js';
import * as COUNTERS from './path-counters.js';

// Literal copies of the slots used here (see packet/literal.ts: V8 folds these, not imported bindings).
const IP_DST = 1;
const IP_DST_ASNUM = 5;
const IP_DST_COUNTRY = 2;
const IP_DST_COUNTRY_KEY = 17;
const IP_DST_LISTS = 14;
const IP_SRC = 0;
const IP_SRC_ASNUM = 4;
const IP_SRC_COUNTRY = 1;
const IP_SRC_COUNTRY_KEY = 16;
const IP_SRC_LISTS = 13;
const LAZY_DST_GEO = 1;
const LAZY_DST_LISTS = 3;
const LAZY_SRC_GEO = 0;
const LAZY_SRC_LISTS = 2;
checkCopies('engine/lazy-lookups', F, { IP_DST, IP_DST_ASNUM, IP_DST_COUNTRY, IP_DST_COUNTRY_KEY, IP_DST_LISTS, IP_SRC, IP_SRC_ASNUM, IP_SRC_COUNTRY, IP_SRC_COUNTRY_KEY, IP_SRC_LISTS, LAZY_DST_GEO, LAZY_DST_LISTS, LAZY_SRC_GEO, LAZY_SRC_LISTS });
// The packed record offsets and counter indexes too.
const REC_ASN = 2;
const REC_COUNTRY = 1;
const REC_HAS_ASN = 3;
const REC_LISTS = 0;
checkCopies('engine/lazy-lookups', TABLE, { REC_ASN, REC_COUNTRY, REC_HAS_ASN, REC_LISTS });
const C_LOOKUPS = 11;
const C_SCREENED = 12;
checkCopies('engine/lazy-lookups', COUNTERS, { C_LOOKUPS, C_SCREENED });

const encoder = new TextEncoder();

/** aliasTop16 of each table (see aliasTopsOf): one per table, not per packet path and swap. */
const ALIAS_TOPS = new WeakMap<AddressTable, Uint8Array | null>();

/** 1 for each top-16-bit value an IPv6 GeoIP alias prefix of `table` can start with; null when it has none. */
function aliasTopsOf(table: AddressTable): Uint8Array | null {
  let tops = ALIAS_TOPS.get(table);
  if (tops !== undefined) return tops;
  const aliases = table.aliases6;
  tops = aliases.length === 0 ? null : new Uint8Array(65536);
  for (const al of aliases) {
    // Every top-16-bit value the prefix covers.
    const top = al.prefix[0]! >>> 16;
    const span = al.length >= 16 ? 1 : 2 ** (16 - al.length);
    for (let v = top; v < top + span; v++) tops![v] = 1;
  }
  ALIAS_TOPS.set(table, tops);
  return tops;
}

/** A value screen a packet path asks its table for (AddressTable.valueScreen's arguments). */
export interface ScreenQuestion {
  readonly family: 4 | 6;
  readonly countries: readonly number[];
  readonly asns: readonly number[];
}

/**
 * The value screens the packet paths of `evaluator` ask a table whose
 * countries are `countryCodes` for, at [side * 2 + (IPv6 ? 1 : 0)] (see
 * LazyLookups.geoScreens); null where none. A loader in a worker thread
 * builds them before the swap, so the packet loop does not (~20 ms each).
 */
export function geoScreenQuestions(evaluator: Evaluator, countryCodes: readonly string[]): Array<ScreenQuestion | null> {
  const countryKeys = countryCodes.map((c) => {
    const b = encoder.encode(c);
    return shortBytesKey(b, 0, b.length);
  });
  return [LAZY_SRC_GEO, LAZY_DST_GEO].flatMap((group, side): Array<ScreenQuestion | null> => {
    const reads = evaluator.lazyValues.get(group);
    if (reads === undefined || reads === null) return [null, null];
    const asns = reads.get(side === 0 ? IP_SRC_ASNUM : IP_DST_ASNUM) ?? [];
    const key = reads.get(side === 0 ? IP_SRC_COUNTRY_KEY : IP_DST_COUNTRY_KEY) ?? [];
    const countries = [...countryKeys.keys()].filter((c) => inRanges(key, countryKeys[c]!));
    return [{ family: 4, countries, asns }, { family: 6, countries, asns }];
  });
}

/**
 * The lookups of one packet path (its context and counters): the resolver
 * the rules' generated code calls (LazyResolver) and the host of the bundle's
 * packet program (ProgramHost).
 *
 * begin() (or beginAt() from a packet program) marks the address groups
 * pending (ExecutionContext.pending), and the rules' code calls resolve()
 * when it first reads one. A list read asks the table's list screen first,
 * which answers "in no list" for most addresses without a lookup; a country
 * or AS number read asks the value screens, then looks the address up. Most
 * packets then need no lookup at all, where looking both addresses up for
 * every packet was about half of the packet path's time (measured:
 * bench/pipeline.bench.ts, table lookups/packet).
 */
export class LazyLookups implements LazyResolver, ProgramHost {
  private readonly v: Float64Array;
  private readonly table: AddressTable | undefined;
  private readonly lookupSrc: boolean;
  private readonly lookupDst: boolean;
  /** The rules read lists (then begin() asks the list screen). */
  private readonly readsLists: boolean;
  /**
   * Value screens of the GeoIP groups (AddressTable.valueScreen), at
   * [side * 2 + (IPv6 ? 1 : 0)], side 0 for the source, 1 the destination;
   * null where the rules read the group other than by comparing it with
   * literals, or never. A clear bit proves that the address's country and AS
   * number match no literal the rules compare them with, which the rules
   * cannot tell from absent values (see ConstantPool.lazyValues): resolve()
   * then writes absent values without a lookup.
   */
  private readonly geoScreens: ReadonlyArray<Uint32Array | null>;
  private readonly countryBytes: readonly Uint8Array[];
  private readonly countryCodes: readonly string[];
  /** shortBytesKey of each country code: what ip.*.country.key holds (see FieldKey). */
  private readonly countryKeys: Float64Array;
  /** Whether the rules read the bytes of ip.src.country / ip.dst.country, not only their keys. */
  private readonly srcCountryBytes: boolean;
  private readonly dstCountryBytes: boolean;
  /** 1 for each top-16-bit value an IPv6 GeoIP alias prefix can start with. */
  private readonly aliasTop16: Uint8Array | null;
  /** The table's list screens. */
  private readonly listScreen4: Uint32Array | null;
  private readonly listScreen6: Uint32Array | null;

  constructor(
    private readonly ctx: ExecutionContext,
    evaluator: Evaluator,
    table: AddressTable | undefined,
    counters: COUNTERS.PathCounters,
  ) {
    this.v = counters.v;
    const fields = new Set(evaluator.fields);
    const lists = evaluator.lists.length > 0;
    let lookupSrc = lists || ['ip.src.country', 'ip.geoip.country', 'ip.src.asnum'].some((f) => fields.has(f));
    let lookupDst = lists || ['ip.dst.country', 'ip.geoip.country', 'ip.dst.asnum'].some((f) => fields.has(f));
    // Without a table, countries and AS numbers are absent; lists come from the evaluator's own matchers.
    if (table === undefined) lookupSrc = lookupDst = false;
    this.lookupSrc = lookupSrc;
    this.lookupDst = lookupDst;
    this.table = table;
    this.readsLists = lists;
    this.countryCodes = table?.countryCodes ?? [];
    this.countryBytes = this.countryCodes.map((c) => encoder.encode(c));
    this.countryKeys = Float64Array.from(this.countryBytes, (b) => shortBytesKey(b, 0, b.length));
    this.srcCountryBytes = evaluator.bytesFields.includes('ip.src.country');
    this.dstCountryBytes = evaluator.bytesFields.includes('ip.dst.country');
    const aliasTop16 = table === undefined ? null : aliasTopsOf(table);
    this.aliasTop16 = aliasTop16;
    this.geoScreens = table === undefined ? [null, null, null, null] : geoScreenQuestions(evaluator, table.countryCodes).map((q) => (q === null ? null : table.valueScreen(q.family, q.countries, q.asns)));
    this.listScreen4 = table?.listScreen4 ?? null;
    this.listScreen6 = table?.listScreen6 ?? null;
  }

  /**
   * Marks the address groups of the packet decoded into the context pending:
   * nothing is looked up yet. The list screen is asked here rather than in
   * resolve(): one bitmap read inline costs less than a call from the rules'
   * code (measured: bench/pipeline.bench.ts). Packet programs call beginAt().
   */
  begin(): void {
    const p = this.ctx.pending;
    // (No list read, nothing to screen: the list groups stay pending, unread.)
    if (this.lookupSrc) {
      p[LAZY_SRC_GEO] = 1;
      p[LAZY_SRC_LISTS] = this.readsLists ? this.listed(IP_SRC, IP_SRC_LISTS) : 1;
    }
    if (this.lookupDst) {
      p[LAZY_DST_GEO] = 1;
      p[LAZY_DST_LISTS] = this.readsLists ? this.listed(IP_DST, IP_DST_LISTS) : 1;
    }
  }

  /**
   * begin() for a packet program (ProgramHost), which knows the family and the
   * addresses' first words: the same marks without reading them back from the
   * context or branching on the family again.
   */
  beginAt(v4: boolean, src: number, dst: number): void {
    const p = this.ctx.pending;
    if (this.lookupSrc) {
      p[LAZY_SRC_GEO] = 1;
      p[LAZY_SRC_LISTS] = this.readsLists ? this.screenedAt(v4, src, IP_SRC_LISTS) : 1;
    }
    if (this.lookupDst) {
      p[LAZY_DST_GEO] = 1;
      p[LAZY_DST_LISTS] = this.readsLists ? this.screenedAt(v4, dst, IP_DST_LISTS) : 1;
    }
  }

  // listed() for an address of the family `v4` says whose first word is `w`.
  private screenedAt(v4: boolean, w: number, listsSlot: number): number {
    const s = v4 ? this.listScreen4 : this.listScreen6;
    if (s !== null && screenHas(s, w)) return 1;
    this.ctx.ints[listsSlot] = 0;
    this.v[C_SCREENED]!++;
    return 0;
  }

  /**
   * Writes a pending group of the current packet (LazyResolver; called by
   * the rules' generated code): looks the address up, which writes both
   * groups of that address (a list group is pending only when the list
   * screen could not tell, see listed()).
   */
  resolve(group: number): void {
    const ctx = this.ctx;
    const p = ctx.pending;
    const src = group === LAZY_SRC_GEO || group === LAZY_SRC_LISTS;
    const ipSlot = src ? IP_SRC : IP_DST;
    const fam = ctx.ipFamily[ipSlot];
    if (fam !== 0 && (group === LAZY_SRC_GEO || group === LAZY_DST_GEO)) {
      const screen = this.geoScreens[(src ? 0 : 2) + (fam === 6 ? 1 : 0)]!;
      const w = fam === 4 ? ctx.ip4[ipSlot]! : ctx.ip6[ipSlot * 4]!;
      if (screen !== null && !screenHas(screen, w)) {
        // No literal the rules compare with: absent values answer every test as the address's would.
        this.absentGeo(src);
        p[group] = 0;
        this.v[C_SCREENED]!++;
        return;
      }
    }
    if (fam === 0) {
      // No address (a header cut before it): every field of both groups is absent.
      this.absent(src);
    } else {
      if (src) this.enrich(IP_SRC, IP_SRC_COUNTRY, IP_SRC_ASNUM, IP_SRC_LISTS);
      else this.enrich(IP_DST, IP_DST_COUNTRY, IP_DST_ASNUM, IP_DST_LISTS);
    }
    p[src ? LAZY_SRC_LISTS : LAZY_DST_LISTS] = 0;
    p[src ? LAZY_SRC_GEO : LAZY_DST_GEO] = 0;
  }

  // The list screen (AddressTable.listScreen4): 1 when the address in `ipSlot`
  // may be in a list (its list group stays pending: a lookup tells); else its
  // list bits are written (0, or absent without an address) and 0 is returned.
  // (The same screen read as a packet program's, screenedAt(), once the family is known.)
  private listed(ipSlot: number, listsSlot: number): number {
    const ctx = this.ctx;
    const fam = ctx.ipFamily[ipSlot];
    if (fam === 4) return this.screenedAt(true, ctx.ip4[ipSlot]!, listsSlot);
    if (fam === 6) return this.screenedAt(false, ctx.ip6[ipSlot * 4]!, listsSlot);
    ctx.ints[listsSlot] = NaN;
    this.v[C_SCREENED]!++;
    return 0;
  }

  // Marks the enriched fields of one address absent.
  private absent(src: boolean): void {
    this.absentGeo(src);
    this.ctx.ints[src ? IP_SRC_LISTS : IP_DST_LISTS] = NaN;
  }

  // Marks the country and AS number of one address absent.
  private absentGeo(src: boolean): void {
    const ctx = this.ctx;
    ctx.ints[src ? IP_SRC_COUNTRY_KEY : IP_DST_COUNTRY_KEY] = NaN;
    ctx.ints[src ? IP_SRC_ASNUM : IP_DST_ASNUM] = NaN;
    const countrySlot = src ? IP_SRC_COUNTRY : IP_DST_COUNTRY;
    ctx.bytesBuf[countrySlot] = null;
    ctx.bytesText[countrySlot] = null;
  }

  // Fills country, AS number and list bits of one address from the table.
  private enrich(ipSlot: number, countrySlot: number, asnSlot: number, listsSlot: number): void {
    const t = this.table!;
    const ctx = this.ctx;
    const fam = ctx.ipFamily[ipSlot];
    if (fam === 4) {
      this.v[C_LOOKUPS]!++;
      this.fill(t.rec4, t.lookup4(ctx.ip4[ipSlot]!) * 4, countrySlot, asnSlot, listsSlot);
    } else if (fam === 6) {
      this.v[C_LOOKUPS]!++;
      const o = ipSlot * 4;
      const a = ctx.ip6;
      const r = t.lookup6(a[o]!, a[o + 1]!, a[o + 2]!, a[o + 3]!) * 4;
      // GeoIP answers IPv4-mapped and 6to4 addresses with the embedded IPv4 address's record.
      // The top-16-bit screen keeps native IPv6 off that path, whose alias
      // check is costly per IPv6 packet (measured: bench/pipeline.bench.ts).
      if (t.rec6[r + REC_COUNTRY]! < 0 && this.aliasTop16 !== null && this.aliasTop16[a[o]! >>> 16] === 1) {
        const v4 = t.v4Alias6(a[o]!, a[o + 1]!, a[o + 2]!, a[o + 3]!);
        if (v4 >= 0) {
          // Country and ASN from the IPv4 record; list bits stay the IPv6 address's own.
          const r4 = t.lookup4(v4) * 4;
          this.fill(t.rec4, r4, countrySlot, asnSlot, listsSlot);
          ctx.ints[listsSlot] = t.rec6[r + REC_LISTS]! >>> 0;
          return;
        }
      }
      this.fill(t.rec6, r, countrySlot, asnSlot, listsSlot);
    }
  }

  // Writes a packed record (AddressTable.rec4/rec6 at offset r) into the context:
  // integer stores only, unless the rules read the country's bytes (the
  // country's key is what generated rules compare, see FieldKey).
  private fill(rec: Int32Array, r: number, countrySlot: number, asnSlot: number, listsSlot: number): void {
    const ints = this.ctx.ints;
    ints[listsSlot] = rec[r + REC_LISTS]! >>> 0;
    ints[asnSlot] = rec[r + REC_HAS_ASN] === 1 ? rec[r + REC_ASN]! >>> 0 : NaN;
    const country = rec[r + REC_COUNTRY]!;
    const src = countrySlot === IP_SRC_COUNTRY;
    ints[src ? IP_SRC_COUNTRY_KEY : IP_DST_COUNTRY_KEY] = country >= 0 ? this.countryKeys[country]! : NaN;
    if (src ? this.srcCountryBytes : this.dstCountryBytes) {
      const ctx = this.ctx;
      if (country >= 0) {
        const b = this.countryBytes[country]!;
        ctx.bytesBuf[countrySlot] = b;
        ctx.bytesStart[countrySlot] = 0;
        ctx.bytesEnd[countrySlot] = b.length;
        ctx.bytesText[countrySlot] = this.countryCodes[country]!;
      } else {
        ctx.bytesBuf[countrySlot] = null;
        ctx.bytesText[countrySlot] = null;
      }
    }
  }
}
