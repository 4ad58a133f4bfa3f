// The totals of a packet path: frames, bytes, verdicts, and what the address
// lookups cost. One Float64Array indexed by the C_* constants below, which the
// packet path and its lookups copy as literals (see packet/literal.ts).

/** Index in PathCounters.v of each total. */
export const C_PACKETS = 0;
export const C_BYTES = 1;
export const C_PASSED = 2;
export const C_PASSED_BYTES = 3;
export const C_DROPPED = 4;
export const C_DROPPED_BYTES = 5;
export const C_UNDECODABLE = 6;
export const C_UNDECODABLE_BYTES = 7;
export const C_NOT_IP = 8;
export const C_DAMAGED = 9;
export const C_FRAGMENTS = 10;
export const C_LOOKUPS = 11;
export const C_SCREENED = 12;
/** Length of PathCounters.v. */
export const COUNTER_SLOTS = 13;

/**
 * Totals of a packet path. Bytes are wire lengths. The packet path adds to
 * `v` (indexed stores) rather than to object fields, whose byte totals would
 * be boxed doubles (measured: bench/pipeline.bench.ts); the named accessors
 * read and set `v`.
 */
export class PathCounters {
  readonly v: Float64Array;
  /**
   * `v`: where the totals live, COUNTER_SLOTS long; by default a new array.
   * The packet workers give a view into a SharedArrayBuffer, which the main
   * thread reads for /metrics without messaging (daemon/packet-workers.ts).
   */
  constructor(v: Float64Array = new Float64Array(COUNTER_SLOTS)) {
    if (v.length < COUNTER_SLOTS) throw new RangeError(`path counters need ${COUNTER_SLOTS} slots, got ${v.length}`);
    this.v = v;
  }
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
  /** Reads answered by the list screen or a value screen without a lookup. */
  get screened(): number { return this.v[C_SCREENED]!; }
  set screened(x: number) { this.v[C_SCREENED] = x; }
}
