// The packet path: one frame in, one verdict out. Decode (only the fields the
// rules read), evaluate the bundle with the address lookups on demand
// (lazy-lookups.ts), count. Everything is preallocated; process() allocates
// nothing and never throws on bad frames.

import type { ExecutionContext } from '../expr/index.js';
import {
  checkCopies, clearDecoded, decode, FIELD_SLOTS as F, PacketInfo, TRANSIT_SCHEME,
} from '../packet/index.js';
import * as PACKET from '../packet/index.js';
import type { AddressTable } from '../table/index.js';
import { VERDICT_PASS, type Evaluator } from './evaluator.js';
import { FALLBACK, type PacketProgram } from './packet-program.js';
import { LazyLookups } from './lazy-lookups.js';
import * as COUNTERS from './path-counters.js';
import { PathCounters } from './path-counters.js';

// Literal copies of the slots, status bits and counter indexes process() uses
// (see packet/literal.ts: V8 folds these, not imported bindings).
const IP_DST = 1;
const IP_SRC = 0;
checkCopies('engine/packet-path', F, { IP_DST, IP_SRC });
const ST_FRAGMENT = 8;
const ST_IP = 1;
const ST_MALFORMED = 4;
const ST_TRUNCATED = 2;
checkCopies('engine/packet-path', PACKET, { ST_FRAGMENT, ST_IP, ST_MALFORMED, ST_TRUNCATED });
const LT_ETHERNET = 1;
checkCopies('engine/packet-path', { LT_ETHERNET: PACKET.LINKTYPE.ETHERNET }, { LT_ETHERNET });
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
checkCopies('engine/packet-path', COUNTERS, { C_PACKETS, C_BYTES, C_PASSED, C_PASSED_BYTES, C_DROPPED, C_DROPPED_BYTES, C_UNDECODABLE, C_UNDECODABLE_BYTES, C_NOT_IP, C_DAMAGED, C_FRAGMENTS });

/**
 * Times warmUp() runs the warm-up frames. Once gives every test its feedback;
 * more rounds left as many deoptimisations in the first pass (measured:
 * bench/pipeline.bench.ts, "first pass of a new process").
 */
const WARM_UP_ROUNDS = 1;

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
   * Whether the bundle's packet program (see engine/packet-program.ts) judges the
   * frames it takes (the default). false: every frame is decoded into the
   * context and evaluated (for comparison: tests and the pipeline benchmark).
   */
  programs?: boolean | undefined;
}

const encoder = new TextEncoder();

/**
 * Decodes and evaluates frames against one compiled bundle, and counts.
 *
 * Ethernet frames of the decoder fast path's kind (most of them) go through
 * the bundle's packet program (Evaluator.program, see engine/packet-program.ts):
 * decoding and rules in one generated function, over locals rather than the
 * context, which cost less per packet than decoding into the context first
 * (measured: bench/pipeline.bench.ts, "without packet programs"). Other
 * frames are decoded into the context and evaluated by the bundle's function.
 * Either way the addresses' GeoIP and list fields are looked up only when a
 * rule reads them (see LazyLookups).
 */
export class PacketPath {
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
  /** The lookups of this path's packets: the context's resolver and the packet program's host. */
  private readonly lookups: LazyLookups;
  /** The bundle's packet program (Evaluator.program), for Ethernet frames; null when there is none. */
  private readonly program: PacketProgram | null;
  private readonly dropUndecodable: boolean;

  constructor(
    readonly evaluator: Evaluator,
    options: PacketPathOptions = {},
  ) {
    this.counters = options.counters ?? new PathCounters();
    this.lookups = new LazyLookups(this.ctx, evaluator, options.table, this.counters);
    this.ctx.resolver = this.lookups;
    this.program = options.programs !== false && evaluator.plan.fast ? evaluator.program : null;
    this.dropUndecodable = options.undecodable === 'drop';
    // The site's colo fields are constants: set once, never cleared.
    const fields = new Set(evaluator.fields);
    const colo: Array<readonly [number, string | undefined]> = [];
    if (fields.has('cf.colo.name')) colo.push([F.COLO_NAME, options.colo?.name]);
    if (fields.has('cf.colo.region')) colo.push([F.COLO_REGION, options.colo?.region]);
    for (const [slot, text] of colo) {
      if (text === undefined) continue;
      const bytes = encoder.encode(text);
      this.ctx.bytesBuf[slot] = bytes;
      this.ctx.bytesStart[slot] = 0;
      this.ctx.bytesEnd[slot] = bytes.length;
      this.ctx.bytesText[slot] = text;
    }
  }

  /**
   * Runs the bundle's warm-up frames (Evaluator.warmUpFrames, built from the
   * rules' literals; why: see warm-up.ts) through this path `rounds` times,
   * then puts every counter back as it was: nothing is counted or logged.
   * The feedback is kept per generated function, not per path, so once per
   * bundle is enough: call it before the first packet (`moat replay` and the
   * daemon do).
   */
  warmUp(rounds = WARM_UP_ROUNDS): void {
    for (let r = 0; r < rounds; r++) this.warmUpSlice(0, Infinity);
  }

  /**
   * warmUp() a slice at a time: runs the warm-up frames from index `from`
   * until `budgetMs` milliseconds have passed (checked every 8 frames), then
   * puts every counter back as it was; returns the index to go on from
   * (warmUpFrames.length when done). The daemon warms a bundle up so between
   * packets, over turns of the event loop, before it swaps it in: packets
   * handled between two slices are counted, and each slice puts back only
   * what its own frames counted.
   */
  warmUpSlice(from: number, budgetMs: number): number {
    const frames = this.evaluator.warmUpFrames;
    if (from >= frames.length) return frames.length;
    const saved = this.evaluator.saveCounters();
    const counters = Float64Array.from(this.counters.v);
    const lastRule = this.lastRule;
    const until = performance.now() + budgetMs;
    let i = from;
    try {
      while (i < frames.length) {
        const f = frames[i++]!;
        this.process(f, 0, f.length, f.length, LT_ETHERNET);
        if ((i & 7) === 0 && performance.now() >= until) break;
      }
    } finally {
      this.evaluator.restoreCounters(saved);
      this.counters.v.set(counters);
      this.lastRule = lastRule;
    }
    return i;
  }

  /** Judges one frame: true when it is dropped. `origLen` is its length on the wire. */
  process(buf: Uint8Array, off: number, caplen: number, origLen: number, linkType: number): boolean {
    const ctx = this.ctx;
    const c = this.counters.v;
    const program = this.program;
    if (program !== null && linkType === LT_ETHERNET) {
      // Frames of the fast path's kind: decoded and judged in one generated
      // function (see engine/packet-program.ts), which writes no decoded field to the
      // context and leaves `info` as it is.
      const r = program(buf, off, caplen, origLen, ctx, this.lookups);
      if (r !== FALLBACK) {
        c[C_PACKETS]!++;
        c[C_BYTES]! += origLen;
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
    clearDecoded(ctx, info);
    info.reset();
    c[C_PACKETS]!++;
    c[C_BYTES]! += origLen;
    decode(buf, off, caplen, linkType, ctx, info, this.evaluator.plan);
    this.lastRule = VERDICT_PASS;
    const st = info.status;
    if ((st & ST_IP) === 0 || ctx.ipFamily[IP_SRC] === 0) {
      if ((st & ST_IP) === 0 && info.etherType !== 0) {
        c[C_NOT_IP]!++;
        return this.pass(origLen);
      }
      c[C_UNDECODABLE]!++;
      c[C_UNDECODABLE_BYTES]! += origLen;
      return this.dropUndecodable ? this.drop(origLen) : this.pass(origLen);
    }
    if ((st & (ST_TRUNCATED | ST_MALFORMED)) !== 0) c[C_DAMAGED]!++;
    if ((st & ST_FRAGMENT) !== 0) c[C_FRAGMENTS]!++;
    this.lookups.begin();
    const r = this.evaluator.evaluate(ctx, origLen);
    if (r === VERDICT_PASS) return this.pass(origLen);
    this.lastRule = r;
    return this.drop(origLen);
  }

  private pass(len: number): boolean {
    const c = this.counters.v;
    c[C_PASSED]!++;
    c[C_PASSED_BYTES]! += len;
    return false;
  }

  private drop(len: number): boolean {
    const c = this.counters.v;
    c[C_DROPPED]!++;
    c[C_DROPPED_BYTES]! += len;
    return true;
  }
}
