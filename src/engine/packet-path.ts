// The packet path: one frame in, one verdict out. Decode (only the fields the
// rules read), look the addresses up in the merged GeoIP/list table when rules
// need countries, AS numbers or lists, evaluate the bundle, count. Everything
// is preallocated; process() allocates nothing and never throws on bad frames.

import { shortBytesKey, type ExecutionContext, type LazyResolver, type ListProvider } from '../expr/index.js';
import * as NET from '../net/index.js';
import { inRanges, screenHas, type AddressTable } from '../net/index.js';
import {
  clearDecoded, decode, FIELD_SLOTS as F, PacketInfo, TRANSIT_SCHEME,
} from '../packet/index.js';
import * as PACKET from '../packet/index.js';
import { checkCopies } from '../packet/index.js';
import { VERDICT_PASS, type Evaluator } from './bundle.js';
import { FALLBACK, type FusedHost, type PacketProgram } from './fused.js';

// Literal copies of the slots process() uses (see packet/literal.ts: V8 folds these, not imported bindings).
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
checkCopies('engine/packet-path', F, { IP_DST, IP_DST_ASNUM, IP_DST_COUNTRY, IP_DST_COUNTRY_KEY, IP_DST_LISTS, IP_SRC, IP_SRC_ASNUM, IP_SRC_COUNTRY, IP_SRC_COUNTRY_KEY, IP_SRC_LISTS, LAZY_DST_GEO, LAZY_DST_LISTS, LAZY_SRC_GEO, LAZY_SRC_LISTS });
// The packed record offsets and status bits too (measured with the above: see packet/literal.ts).
const REC_ASN = 2;
const REC_COUNTRY = 1;
const REC_HAS_ASN = 3;
const REC_LISTS = 0;
checkCopies('engine/packet-path', NET, { REC_ASN, REC_COUNTRY, REC_HAS_ASN, REC_LISTS });
const ST_FRAGMENT = 8;
const ST_IP = 1;
const ST_MALFORMED = 4;
const ST_TRUNCATED = 2;
checkCopies('engine/packet-path', PACKET, { ST_FRAGMENT, ST_IP, ST_MALFORMED, ST_TRUNCATED });

const LT_ETHERNET = 1;

/**
 * Times warmUp() runs the warm-up frames. Once gives every test its feedback:
 * on the pipeline benchmark, one round (400 frames, ~5 ms) and four (~13 ms)
 * both left one optimisation of the packet program in the first million
 * packets, against 14-18 without warm-up.
 */
const WARM_UP_ROUNDS = 1;
checkCopies('engine/packet-path', { LT_ETHERNET: PACKET.LINKTYPE.ETHERNET }, { LT_ETHERNET });

/** A capture reader that can tell where its next buffered packets are (PcapReader). */
export interface AheadReader {
  readonly data: Uint8Array;
  readonly offset: number;
  readonly caplen: number;
  readonly linkType: number;
  ahead(offsets: Int32Array, caplens: Int32Array, at: number): number;
}

/** Most frames one lookAhead() batch holds. */
export const LOOK_AHEAD = 32;

/** What to do with a frame whose IP header cannot be read (no addresses). */
export type UndecodablePolicy = 'pass' | 'drop';

/** Options of a packet path. */
export interface PacketPathOptions {
  /** GeoIP and lists merged; required when rules read countries, AS numbers or lists. */
  table?: AddressTable | undefined;
  /** The `cf.colo.name` and `cf.colo.region` of this site. */
  colo?: { name?: string | undefined; region?: string | undefined } | undefined;
  undecodable?: UndecodablePolicy | undefined;
  /** Counters to add to (kept across bundle swaps by the daemon); new ones by default. */
  counters?: PathCounters | undefined;
  /**
   * When addresses are looked up in the table. 'lazy' (the default): when a
   * rule first reads a country, an AS number or a list of the address, and
   * list bits through the list screen first (see process()). 'eager': both
   * addresses of every packet, before the rules run (for comparison: tests
   * and the pipeline benchmark).
   */
  lookups?: 'lazy' | 'eager' | undefined;
  /**
   * Whether the bundle's packet program (see engine/fused.ts) judges the
   * frames it takes (with lazy lookups; the default). false: every frame is
   * decoded into the context and evaluated (for comparison: tests and the
   * pipeline benchmark).
   */
  programs?: boolean | undefined;
}

// Counter indexes in PathCounters.v.
const C_PACKETS = 0;
const C_BYTES = 1;
const C_PASSED = 2;
const C_PASSED_BYTES = 3;
const C_DROPPED = 4;
const C_DROPPED_BYTES = 5;
const C_UNDECODABLE = 6;
const C_UNDECODABLE_BYTES = 7;
const C_NOT_IP = 8;
const C_DAMAGED = 9;
const C_FRAGMENTS = 10;
const C_LOOKUPS = 11;
const C_SCREENED = 12;

/**
 * Totals of a packet path. Bytes are wire lengths. The packet path adds to
 * `v` (one Float64Array, indexed stores) rather than to object fields, whose
 * byte totals are boxed doubles (measured on the pipeline benchmark,
 * alternating A/B: ~448 -> ~440 ns/packet); the named accessors read and set `v`.
 */
export class PathCounters {
  readonly v = new Float64Array(13);
  get packets(): number { return this.v[C_PACKETS]!; }
  set packets(x: number) { this.v[C_PACKETS] = x; }
  get bytes(): number { return this.v[C_BYTES]!; }
  set bytes(x: number) { this.v[C_BYTES] = x; }
  get passed(): number { return this.v[C_PASSED]!; }
  set passed(x: number) { this.v[C_PASSED] = x; }
  get passedBytes(): number { return this.v[C_PASSED_BYTES]!; }
  set passedBytes(x: number) { this.v[C_PASSED_BYTES] = x; }
  get dropped(): number { return this.v[C_DROPPED]!; }
  set dropped(x: number) { this.v[C_DROPPED] = x; }
  get droppedBytes(): number { return this.v[C_DROPPED_BYTES]!; }
  set droppedBytes(x: number) { this.v[C_DROPPED_BYTES] = x; }
  /** Frames whose IP header could not be read, or of an unsupported link type. */
  get undecodable(): number { return this.v[C_UNDECODABLE]!; }
  set undecodable(x: number) { this.v[C_UNDECODABLE] = x; }
  get undecodableBytes(): number { return this.v[C_UNDECODABLE_BYTES]!; }
  set undecodableBytes(x: number) { this.v[C_UNDECODABLE_BYTES] = x; }
  /** Frames that are not IP (ARP, LLDP...): passed without evaluation. */
  get notIp(): number { return this.v[C_NOT_IP]!; }
  set notIp(x: number) { this.v[C_NOT_IP] = x; }
  /** IP packets evaluated although damaged (truncated or malformed headers). */
  get damaged(): number { return this.v[C_DAMAGED]!; }
  set damaged(x: number) { this.v[C_DAMAGED] = x; }
  /** Non-first fragments (evaluated without transport fields). */
  get fragments(): number { return this.v[C_FRAGMENTS]!; }
  set fragments(x: number) { this.v[C_FRAGMENTS] = x; }
  /** Addresses looked up in the GeoIP/list table. */
  get lookups(): number { return this.v[C_LOOKUPS]!; }
  set lookups(x: number) { this.v[C_LOOKUPS] = x; }
  /** Reads answered by the list screen or a value screen without a lookup (lazy lookups only). */
  get screened(): number { return this.v[C_SCREENED]!; }
  set screened(x: number) { this.v[C_SCREENED] = x; }
}

/** A ListProvider over an AddressTable: membership is precomputed per packet into hidden bit fields. */
export function tableLists(table: AddressTable): ListProvider {
  const slotFor = (field: string): number | undefined =>
    field === 'ip.src' ? IP_SRC_LISTS : field === 'ip.dst' ? IP_DST_LISTS : undefined;
  const lazyFor = (field: string): number => (field === 'ip.src' ? LAZY_SRC_LISTS : field === 'ip.dst' ? LAZY_DST_LISTS : -1);
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

const encoder = new TextEncoder();

/**
 * Decodes, enriches and evaluates frames against one compiled bundle.
 *
 * Lookups are lazy by default: process() marks the address fields pending
 * (ExecutionContext.pending) and the rules' generated code calls resolve()
 * when it first reads one. A list read asks the table's list screen first,
 * which answers "in no list" for most addresses without a lookup; a country
 * or AS number read looks the address up. On the pipeline benchmark most
 * packets then need no lookup at all (the country rules test a port first,
 * the AS number rules the protocol), where eager lookups of both addresses
 * were about half of the packet path's time (measured: see bench/pipeline).
 *
 * Ethernet frames of the decoder fast path's kind (most of them) go through
 * the bundle's packet program (Evaluator.program, see engine/fused.ts):
 * decoding and rules in one generated function, over locals rather than the
 * context. Other frames, and every frame with eager lookups, are decoded into
 * the context and evaluated by the bundle's function. Measured on the
 * pipeline benchmark, interleaved in-process A/B, CPU per packet: 508 -> 464
 * ns with programs (beginAt() since: 449 -> 420); on a one-rule bundle, 203
 * -> 113 ns.
 */
export class PacketPath implements LazyResolver, FusedHost {
  /**
   * The fields of the last frame decoded into a context, and what decoding
   * learnt about it. A frame a packet program judged (see process()) is
   * decoded into the program's locals, not here.
   */
  readonly ctx: ExecutionContext = TRANSIT_SCHEME.newContext();
  readonly info = new PacketInfo();
  readonly counters: PathCounters;
  /** Index in evaluator.rules of the rule that blocked the last packet, or -1. */
  lastRule = VERDICT_PASS;
  private readonly table: AddressTable | undefined;
  private readonly lookupSrc: boolean;
  private readonly lookupDst: boolean;
  /** Lookups on demand (resolve()) rather than in process(). */
  private readonly lazy: boolean;
  /** The rules read lists (then process() asks the list screen). */
  private readonly readsLists: boolean;
  /**
   * Value screens of the GeoIP groups (AddressTable.valueScreen), at
   * [side * 2 + (IPv6 ? 1 : 0)], side 0 for the source, 1 the destination;
   * null where the rules read the group other than by comparing it with
   * literals, or never. A clear bit proves that the address's country and AS
   * number match no literal the rules compare them with, which the rules
   * cannot tell from absent values (see ConstantPool.lazyValues): resolve()
   * then writes absent values without a lookup. On the pipeline benchmark
   * the AS number rules test every UDP packet's destination.
   */
  private readonly geoScreens: ReadonlyArray<Uint32Array | null>;
  /**
   * The bundle's packet program (Evaluator.program), used with lazy lookups
   * for Ethernet frames; null when there is none, or for eager lookups.
   */
  private readonly program: PacketProgram | null;
  /** Both addresses are looked up: what lookAhead() prepares. */
  private readonly lookupPair: boolean;
  private readonly countryBytes: readonly Uint8Array[];
  private readonly countryCodes: readonly string[];
  /** shortBytesKey of each country code: what ip.*.country.key holds (see FieldKey). */
  private readonly countryKeys: Float64Array;
  /** Whether the rules read the bytes of ip.src.country / ip.dst.country, not only their keys. */
  private readonly srcCountryBytes: boolean;
  private readonly dstCountryBytes: boolean;
  private enriched = false;
  /** 1 for each top-16-bit value an IPv6 GeoIP alias prefix can start with. */
  private readonly aliasTop16: Uint8Array | null;
  private readonly dropUndecodable: boolean;
  /** The table's list screens (for beginAt()). */
  private readonly listScreen4: Uint32Array | null;
  private readonly listScreen6: Uint32Array | null;
  /** Records of the source and destination addresses (lookup4Pair's output). */
  private readonly records = new Int32Array(2);
  // Look-ahead (see lookAhead()): for frame k of the batch, its IPv4 addresses
  // as read by the fast path and their records (aheadRec[2k] < 0: none).
  private readonly aheadSrc = new Uint32Array(LOOK_AHEAD);
  private readonly aheadDst = new Uint32Array(LOOK_AHEAD);
  private readonly aheadRec = new Int32Array(LOOK_AHEAD * 2);
  private readonly aheadOffsets = new Int32Array(LOOK_AHEAD);
  private readonly aheadCaplens = new Int32Array(LOOK_AHEAD);
  /** Frames of the look-ahead batch, and the next one process() will see. */
  private aheadN = 0;
  private aheadAt = 0;
  /** Sum of the record words the look-ahead touched (kept so that the reads are not dropped). */
  aheadTouch = 0;

  constructor(
    readonly evaluator: Evaluator,
    options: PacketPathOptions = {},
  ) {
    this.counters = options.counters ?? new PathCounters();
    const fields = new Set(evaluator.fields);
    const lists = evaluator.lists.length > 0;
    this.lookupSrc = lists || ['ip.src.country', 'ip.geoip.country', 'ip.src.asnum'].some((f) => fields.has(f));
    this.lookupDst = lists || ['ip.dst.country', 'ip.geoip.country', 'ip.dst.asnum'].some((f) => fields.has(f));
    this.table = options.table;
    if ((this.lookupSrc || this.lookupDst) && this.table === undefined) {
      // Without a table, countries and AS numbers are absent; lists come from the evaluator's own matchers.
      this.lookupSrc = this.lookupDst = false;
    }
    this.lazy = options.lookups !== 'eager';
    this.readsLists = lists;
    this.lookupPair = !this.lazy && this.lookupSrc && this.lookupDst;
    this.program = this.lazy && options.programs !== false && evaluator.plan.fast ? evaluator.program : null;
    this.ctx.resolver = this;
    this.countryCodes = this.table?.countryCodes ?? [];
    this.countryBytes = this.countryCodes.map((c) => encoder.encode(c));
    this.countryKeys = Float64Array.from(this.countryBytes, (b) => shortBytesKey(b, 0, b.length));
    this.srcCountryBytes = evaluator.bytesFields.includes('ip.src.country');
    this.dstCountryBytes = evaluator.bytesFields.includes('ip.dst.country');
    const aliases = this.table?.aliases6 ?? [];
    this.aliasTop16 = aliases.length === 0 ? null : new Uint8Array(65536);
    for (const al of aliases) {
      // Every top-16-bit value the prefix covers.
      const top = al.prefix[0]! >>> 16;
      const span = al.length >= 16 ? 1 : 2 ** (16 - al.length);
      for (let v = top; v < top + span; v++) this.aliasTop16![v] = 1;
    }
    const colo: Array<readonly [number, Uint8Array, string]> = [];
    if (fields.has('cf.colo.name') && options.colo?.name !== undefined) colo.push([F.COLO_NAME, encoder.encode(options.colo.name), options.colo.name]);
    if (fields.has('cf.colo.region') && options.colo?.region !== undefined) colo.push([F.COLO_REGION, encoder.encode(options.colo.region), options.colo.region]);
    this.geoScreens = [LAZY_SRC_GEO, LAZY_DST_GEO].flatMap((group, side) => {
      const reads = evaluator.lazyValues.get(group);
      if (!this.lazy || this.table === undefined || reads === undefined || reads === null) return [null, null];
      const asn = reads.get(side === 0 ? IP_SRC_ASNUM : IP_DST_ASNUM) ?? [];
      const key = reads.get(side === 0 ? IP_SRC_COUNTRY_KEY : IP_DST_COUNTRY_KEY) ?? [];
      const countries = [...this.countryKeys.keys()].filter((c) => inRanges(key, this.countryKeys[c]!));
      return [this.table.valueScreen(4, countries, asn), this.table.valueScreen(6, countries, asn)];
    });
    this.dropUndecodable = options.undecodable === 'drop';
    this.listScreen4 = this.table?.listScreen4 ?? null;
    this.listScreen6 = this.table?.listScreen6 ?? null;
    // The site's colo fields are constants: set once, never cleared.
    for (const [slot, bytes, text] of colo) {
      this.ctx.bytesBuf[slot] = bytes;
      this.ctx.bytesStart[slot] = 0;
      this.ctx.bytesEnd[slot] = bytes.length;
      this.ctx.bytesText[slot] = text;
    }
  }

  private clearEnriched(): void {
    const ctx = this.ctx;
    if (this.srcCountryBytes || this.dstCountryBytes) {
      ctx.bytesBuf[IP_SRC_COUNTRY] = null;
      ctx.bytesBuf[IP_DST_COUNTRY] = null;
      ctx.bytesText[IP_SRC_COUNTRY] = null;
      ctx.bytesText[IP_DST_COUNTRY] = null;
    }
    const ints = ctx.ints;
    ints[IP_SRC_COUNTRY_KEY] = NaN;
    ints[IP_DST_COUNTRY_KEY] = NaN;
    ints[IP_SRC_ASNUM] = NaN;
    ints[IP_DST_ASNUM] = NaN;
    ints[IP_SRC_LISTS] = NaN;
    ints[IP_DST_LISTS] = NaN;
    this.enriched = false;
  }

  /** Whether process() has consumed every frame of the last lookAhead() batch (then call lookAhead() again). */
  get aheadDone(): boolean {
    return this.aheadAt >= this.aheadN;
  }

  /**
   * Looks up, ahead of process(), the addresses of the next `n` frames (at most
   * LOOK_AHEAD): buf[offsets[k], + caplens[k]) is the frame the k-th next
   * process() call will get. Lookups one after the other, with nothing
   * between them that depends on their results, keep several lookups' cache
   * misses in flight at once, where process() alone waits for each in turn
   * (~30% of the packet path's time on the pipeline benchmark, see the header
   * of net/address-table.ts). Only Ethernet/IPv4 frames are looked up here
   * (the common case); process() uses a result only when the addresses it
   * decoded are those looked up, so a batch that is not what follows, or
   * frames the general decoder reads otherwise, cost a lookup, never a wrong
   * answer. Allocates nothing.
   */
  lookAhead(buf: Uint8Array, offsets: Int32Array, caplens: Int32Array, n: number, linkType: number): void {
    const m = Math.min(n, LOOK_AHEAD);
    this.aheadAt = 0;
    this.aheadN = 0;
    if (!this.lookupPair || linkType !== LT_ETHERNET) return;
    const t = this.table!;
    const src = this.aheadSrc;
    const dst = this.aheadDst;
    const rec = this.aheadRec;
    // First every frame's addresses (reads of frames just read from the file, in cache) ...
    for (let k = 0; k < m; k++) {
      const o = offsets[k]!;
      if (caplens[k]! >= 34 && buf[o + 12] === 8 && buf[o + 13] === 0 && (buf[o + 14]! >>> 4) === 4) {
        src[k] = ((buf[o + 26]! << 24) | (buf[o + 27]! << 16) | (buf[o + 28]! << 8) | buf[o + 29]!) >>> 0;
        dst[k] = ((buf[o + 30]! << 24) | (buf[o + 31]! << 16) | (buf[o + 32]! << 8) | buf[o + 33]!) >>> 0;
        rec[2 * k] = 0;
      } else {
        rec[2 * k] = -1;
      }
    }
    // ... then every lookup, back to back, and a read of each record so that
    // fill() finds it in cache too.
    const r4 = t.rec4;
    let touch = 0;
    for (let k = 0; k < m; k++) {
      if (rec[2 * k]! < 0) continue;
      t.lookup4Pair(src[k]!, dst[k]!, rec, 2 * k);
      touch += r4[rec[2 * k]! * 4]! + r4[rec[2 * k + 1]! * 4]!;
    }
    this.aheadTouch = touch;
    this.aheadN = m;
  }

  /**
   * For a loop over a capture reader (PcapReader): when the last batch is
   * consumed, looks ahead over the reader's current packet and the packets it
   * has buffered after it. Call after reader.next() and before process().
   */
  lookAheadFrom(reader: AheadReader): void {
    // Nothing to look up (rules without countries, AS numbers or lists), or a
    // batch still pending: nothing to do. (Without the first test, a path
    // without lookups walked the reader's next records at every packet: the
    // pipeline benchmark's simple rule: 115 -> 342 ns/packet CPU, 10 alternating passes.)
    if (!this.lookupPair || this.aheadAt < this.aheadN) return;
    const offs = this.aheadOffsets;
    const caps = this.aheadCaplens;
    offs[0] = reader.offset;
    caps[0] = reader.caplen;
    const n = 1 + reader.ahead(offs, caps, 1);
    this.lookAhead(reader.data, offs, caps, n, reader.linkType);
  }

  /**
   * Runs the bundle's warm-up frames (Evaluator.warmUpFrames, built from the
   * rules' literals: see warm-up.ts) through this path `rounds` times, then
   * puts every counter back as it was: nothing is counted, logged or looked
   * ahead. The point is V8's type feedback, which the generated code keeps
   * per function, not per path: once each rule's tests have run, the
   * optimised code does not deoptimise when real traffic first reaches them.
   * Call once per bundle, before the first packet (`moat replay` and the
   * daemon do). Measured on the pipeline benchmark's first million packets:
   * see bench/pipeline.bench.ts, "first pass".
   */
  warmUp(rounds = WARM_UP_ROUNDS): void {
    const frames = this.evaluator.warmUpFrames;
    if (frames.length === 0) return;
    const saved = this.evaluator.saveCounters();
    const counters = Float64Array.from(this.counters.v);
    const lastRule = this.lastRule;
    const aheadN = this.aheadN;
    const aheadAt = this.aheadAt;
    this.aheadN = 0;
    this.aheadAt = 0;
    try {
      for (let r = 0; r < rounds; r++) {
        for (const f of frames) this.process(f, 0, f.length, f.length, LT_ETHERNET);
      }
    } finally {
      this.evaluator.restoreCounters(saved);
      this.counters.v.set(counters);
      this.lastRule = lastRule;
      this.aheadN = aheadN;
      this.aheadAt = aheadAt;
    }
  }

  /** Judges one frame: true when it is dropped. `origLen` is its length on the wire. */
  process(buf: Uint8Array, off: number, caplen: number, origLen: number, linkType: number): boolean {
    const ctx = this.ctx;
    const c = this.counters.v;
    const program = this.program;
    if (program !== null && linkType === LT_ETHERNET) {
      // Frames of the fast path's kind: decoded and judged in one generated
      // function (see engine/fused.ts), which writes no decoded field to the
      // context and leaves `info` as it is.
      const r = program(buf, off, caplen, origLen, ctx, this);
      if (r !== FALLBACK) {
        c[C_PACKETS]++;
        c[C_BYTES] += origLen;
        this.lastRule = r;
        if (r === VERDICT_PASS) return this.pass(origLen);
        // The program leaves a block's hit to its caller (see Evaluator.countBlock).
        this.evaluator.countBlock(r, origLen);
        return this.drop(origLen);
      }
      // A program may have written the addresses of an earlier frame, which
      // clearDecoded() below clears only when the last frame decoded here was IP.
      ctx.ipFamily[IP_SRC] = 0;
      ctx.ipFamily[IP_DST] = 0;
    }
    const info = this.info;
    // Clear only what the previous packet set (the context starts all absent).
    // (The enriched fields are cleared below, where a lookup does not overwrite them all.)
    clearDecoded(ctx, info);
    info.reset();
    c[C_PACKETS]++;
    c[C_BYTES] += origLen;
    decode(buf, off, caplen, linkType, ctx, info, this.evaluator.plan);
    this.lastRule = VERDICT_PASS;
    // This frame's look-ahead entry, if a batch is pending (j === aheadN: none).
    const j = this.aheadAt;
    if (j < this.aheadN) this.aheadAt = j + 1;
    const st = info.status;
    if ((st & ST_IP) === 0 || ctx.ipFamily[IP_SRC] === 0) {
      if (this.enriched) this.clearEnriched();
      if ((st & ST_IP) === 0 && info.etherType !== 0) {
        c[C_NOT_IP]++;
        return this.pass(origLen);
      }
      c[C_UNDECODABLE]++;
      c[C_UNDECODABLE_BYTES] += origLen;
      return this.dropUndecodable ? this.drop(origLen) : this.pass(origLen);
    }
    if ((st & (ST_TRUNCATED | ST_MALFORMED)) !== 0) c[C_DAMAGED]++;
    if ((st & ST_FRAGMENT) !== 0) c[C_FRAGMENTS]++;
    if (this.lazy) {
      this.begin();
    } else if (this.lookupSrc && this.lookupDst && ctx.ipFamily[IP_SRC] === 4 && ctx.ipFamily[IP_DST] === 4) {
      // Both IPv4 addresses at once: their cache misses overlap (see AddressTable.lookup4Pair).
      // The two fill() calls overwrite every enriched field: nothing to clear first.
      const t = this.table!;
      const a = ctx.ip4[IP_SRC]!;
      const b = ctx.ip4[IP_DST]!;
      const ar = this.aheadRec;
      if (j < this.aheadN && ar[2 * j]! >= 0 && this.aheadSrc[j] === a && this.aheadDst[j] === b) {
        // Looked up ahead (lookAhead()), for these very addresses.
        this.fill(t.rec4, ar[2 * j]! * 4, IP_SRC_COUNTRY, IP_SRC_ASNUM, IP_SRC_LISTS);
        this.fill(t.rec4, ar[2 * j + 1]! * 4, IP_DST_COUNTRY, IP_DST_ASNUM, IP_DST_LISTS);
      } else {
        const r = this.records;
        t.lookup4Pair(a, b, r, 0);
        this.fill(t.rec4, r[0]! * 4, IP_SRC_COUNTRY, IP_SRC_ASNUM, IP_SRC_LISTS);
        this.fill(t.rec4, r[1]! * 4, IP_DST_COUNTRY, IP_DST_ASNUM, IP_DST_LISTS);
      }
      c[C_LOOKUPS] += 2;
    } else {
      // An address without a lookup (absent, or one side not looked up) writes nothing: start from absent.
      if (this.enriched) this.clearEnriched();
      if (this.lookupSrc) this.enrich(IP_SRC, IP_SRC_COUNTRY, IP_SRC_ASNUM, IP_SRC_LISTS);
      if (this.lookupDst) this.enrich(IP_DST, IP_DST_COUNTRY, IP_DST_ASNUM, IP_DST_LISTS);
    }
    this.enriched = !this.lazy && (this.lookupSrc || this.lookupDst);
    const r = this.evaluator.evaluate(ctx, origLen);
    if (r === VERDICT_PASS) return this.pass(origLen);
    this.lastRule = r;
    return this.drop(origLen);
  }

  /**
   * Marks the address groups of the packet in the context pending (lazy
   * lookups): nothing is looked up yet, the rules' code asks resolve() (see
   * the class comment). The list screen is asked here rather than in
   * resolve(): one bitmap read inline, where a call from the rules' code cost
   * ~30 ns per address (measured on the pipeline benchmark's first 4,096
   * packets, in cache). Called by process(); packet programs call beginAt().
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
   * begin() for a packet program (FusedHost), which knows the family and the
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
    this.counters.v[C_SCREENED]++;
    return 0;
  }

  /**
   * Writes a pending lazy group of the current packet (LazyResolver; called by
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
        this.counters.v[C_SCREENED]++;
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
    this.counters.v[C_SCREENED]++;
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

  private pass(len: number): boolean {
    const c = this.counters.v;
    c[C_PASSED]++;
    c[C_PASSED_BYTES] += len;
    return false;
  }

  private drop(len: number): boolean {
    const c = this.counters.v;
    c[C_DROPPED]++;
    c[C_DROPPED_BYTES] += len;
    return true;
  }

  // Fills country, AS number and list bits of one address from the table.
  private enrich(ipSlot: number, countrySlot: number, asnSlot: number, listsSlot: number): void {
    const t = this.table!;
    const ctx = this.ctx;
    const fam = ctx.ipFamily[ipSlot];
    if (fam === 4) {
      this.counters.v[C_LOOKUPS]++;
      this.fill(t.rec4, t.lookup4(ctx.ip4[ipSlot]!) * 4, countrySlot, asnSlot, listsSlot);
    } else if (fam === 6) {
      this.counters.v[C_LOOKUPS]++;
      const o = ipSlot * 4;
      const a = ctx.ip6;
      const r = t.lookup6(a[o]!, a[o + 1]!, a[o + 2]!, a[o + 3]!) * 4;
      // GeoIP answers IPv4-mapped and 6to4 addresses with the embedded IPv4 address's record.
      // The top-16-bit screen keeps native IPv6 off that path (measured: the alias
      // check cost ~150 ns per IPv6 packet on the pipeline benchmark without it).
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
