// The execution context: one fixed-size store per value type, indexed by the
// slots the scheme assigned. A packet path fills it, a compiled filter reads it.
// It is reused from packet to packet: reset() marks every field absent without
// allocating. An absent int is NaN, so every ordered comparison on it is false.

import { parseIp } from '../net/index.js';
import type { BytesKey, Scheme } from './scheme.js';

const encoder = new TextEncoder();
// Strings set through setString are encoded once and kept (bounded), so that
// protocol names and country codes cost no allocation per packet.
const interned = new Map<string, Uint8Array>();
const INTERN_MAX = 4096;

/** Returns the UTF-8 bytes of `s`, cached for repeated values. */
export function internBytes(s: string): Uint8Array {
  let b = interned.get(s);
  if (b === undefined) {
    b = encoder.encode(s);
    if (interned.size < INTERN_MAX) interned.set(s, b);
  }
  return b;
}

/**
 * Fills a lazy group of fields on demand (see ExecutionContext.pending): it
 * writes the group's fields and sets `pending[group]` to 0.
 */
export interface LazyResolver {
  resolve(group: number): void;
}

// Nothing is pending unless a producer says so, so the default is never called.
const NO_RESOLVER: LazyResolver = { resolve: () => undefined };

/** Field values of one packet, by slot. */
export class ExecutionContext {
  /** Int values; NaN when absent. */
  readonly ints: Float64Array;
  /** Bool values, 0 or 1; absent reads as 0 (false). */
  readonly bools: Uint8Array;
  /** IP family per slot: 0 absent, 4 or 6. */
  readonly ipFamily: Uint8Array;
  /** IPv4 value per slot. */
  readonly ip4: Uint32Array;
  /** IPv6 value per slot, four words at 4*slot. */
  readonly ip6: Uint32Array;
  /** Bytes values: a view [start, end) of a buffer, or null when absent. */
  readonly bytesBuf: Array<Uint8Array | null>;
  readonly bytesStart: Int32Array;
  readonly bytesEnd: Int32Array;
  /** The string a bytes value was set from, when it was (saves work for `matches`). */
  readonly bytesText: Array<string | null>;
  /** Per bytes slot: the int slot of its key (see FieldKey), or -1. */
  private readonly keySlot: Int32Array;
  private readonly keyOf: Array<BytesKey | null>;

  constructor(readonly scheme: Scheme) {
    const n = scheme.slotCounts;
    this.ints = new Float64Array(n.int).fill(NaN);
    this.bools = new Uint8Array(n.bool);
    this.ipFamily = new Uint8Array(n.ip);
    this.ip4 = new Uint32Array(n.ip);
    this.ip6 = new Uint32Array(n.ip * 4);
    this.bytesBuf = new Array<Uint8Array | null>(n.bytes).fill(null);
    this.bytesStart = new Int32Array(n.bytes);
    this.bytesEnd = new Int32Array(n.bytes);
    this.bytesText = new Array<string | null>(n.bytes).fill(null);
    this.keySlot = new Int32Array(n.bytes).fill(-1);
    this.keyOf = new Array<BytesKey | null>(n.bytes).fill(null);
    this.pending = new Uint8Array(scheme.lazyGroups.length);
    for (const f of scheme.fields) {
      if (f.key === null) continue;
      this.keySlot[f.slot] = f.key.field.slot;
      this.keyOf[f.slot] = f.key.of;
    }
  }

  /**
   * Per lazy group (Scheme.lazyGroups): 1 when the group's fields are not
   * written yet and `resolver` writes them when asked. A producer whose
   * lookups are dear (the packet path's GeoIP and list lookups) sets this
   * instead of filling the fields; code generated for a rule resolves a group
   * just before its first read of one of its fields, so a packet whose rules
   * never get to read a country costs no country lookup. Never set: every
   * field holds its value.
   */
  readonly pending: Uint8Array;
  resolver: LazyResolver = NO_RESOLVER;

  /** Marks every field absent. */
  reset(): void {
    // Plain loops, not fill(): on arrays this short a builtin call per array
    // costs more than the loops (measured: bench/pipeline.bench.ts).
    const ints = this.ints;
    for (let i = 0; i < ints.length; i++) ints[i] = NaN;
    const bools = this.bools;
    for (let i = 0; i < bools.length; i++) bools[i] = 0;
    const fam = this.ipFamily;
    for (let i = 0; i < fam.length; i++) fam[i] = 0;
    const bb = this.bytesBuf;
    const bt = this.bytesText;
    for (let i = 0; i < bb.length; i++) {
      bb[i] = null;
      bt[i] = null;
    }
    const pending = this.pending;
    for (let i = 0; i < pending.length; i++) pending[i] = 0;
  }

  setInt(slot: number, v: number): void {
    this.ints[slot] = v;
  }

  setBool(slot: number, v: boolean): void {
    this.bools[slot] = v ? 1 : 0;
  }

  setIp4(slot: number, v: number): void {
    this.ipFamily[slot] = 4;
    this.ip4[slot] = v;
  }

  setIp6(slot: number, w0: number, w1: number, w2: number, w3: number): void {
    this.ipFamily[slot] = 6;
    const o = slot * 4;
    this.ip6[o] = w0;
    this.ip6[o + 1] = w1;
    this.ip6[o + 2] = w2;
    this.ip6[o + 3] = w3;
  }

  /** Sets an IP field from text (a convenience for tests and tools; it allocates). */
  setIp(slot: number, text: string): void {
    const a = parseIp(text);
    if (a === undefined) throw new Error(`invalid IP address "${text}"`);
    if (a.family === 4) this.setIp4(slot, a.words[0]!);
    else this.setIp6(slot, a.words[0]!, a.words[1]!, a.words[2]!, a.words[3]!);
  }

  /** Sets a bytes field to the view [start, end) of `buf` (no copy). */
  setBytes(slot: number, buf: Uint8Array, start: number, end: number): void {
    this.bytesBuf[slot] = buf;
    this.bytesStart[slot] = start;
    this.bytesEnd[slot] = end;
    this.bytesText[slot] = null;
    const k = this.keySlot[slot]!;
    if (k >= 0) this.ints[k] = this.keyOf[slot]!(buf, start, end);
  }

  /** Sets a bytes field to the UTF-8 encoding of `s`. */
  setString(slot: number, s: string): void {
    const b = internBytes(s);
    this.bytesBuf[slot] = b;
    this.bytesStart[slot] = 0;
    this.bytesEnd[slot] = b.length;
    // Only ASCII text equals the latin1 reading of its bytes that `matches` uses.
    this.bytesText[slot] = b.length === s.length ? s : null;
    const k = this.keySlot[slot]!;
    if (k >= 0) this.ints[k] = this.keyOf[slot]!(b, 0, b.length);
  }

  /** Marks one field absent. */
  clear(type: 'int' | 'ip' | 'bytes' | 'bool', slot: number): void {
    if (type === 'int') this.ints[slot] = NaN;
    else if (type === 'bool') this.bools[slot] = 0;
    else if (type === 'ip') this.ipFamily[slot] = 0;
    else {
      this.bytesBuf[slot] = null;
      this.bytesText[slot] = null;
      const k = this.keySlot[slot]!;
      if (k >= 0) this.ints[k] = NaN;
    }
  }
}
