// What to decode: the compiled rulesets report the fields they read, and the
// decoder skips the layers and fields no rule needs.

import { TRANSIT_SCHEME } from './fields.js';

/** Which optional parts the decoder fills. IP addresses and the IP header are always decoded. */
export interface DecodePlan {
  readonly tcp: boolean;
  readonly udp: boolean;
  readonly icmp: boolean;
  /** The raw byte fields `ip`, `tcp`, `udp`, `icmp` (views, no copy). */
  readonly raw: boolean;
  readonly sip: boolean;
  /**
   * The bytes of `ip.proto` (a view of its name). Its key, the protocol number
   * (hidden field ip.proto.number), is always written; rules compiled to code
   * compare that, so they need the bytes only for the tests codegen leaves to
   * closures (ordering, contains, matches, names that are no protocol's).
   */
  readonly protoBytes: boolean;
  /** None of raw, sip and protoBytes: the fast path (fast.ts) may decode. */
  readonly fast: boolean;
}

/** Decode everything. */
export const FULL_PLAN: DecodePlan = Object.freeze({ tcp: true, udp: true, icmp: true, raw: true, sip: true, protoBytes: true, fast: false });

/**
 * The plan for a set of field names (as `Filter.fields` reports them).
 * `bytesRead`: the bytes fields whose bytes (not only their keys) are read;
 * by default every field of `fields`.
 */
export function planFor(fields: Iterable<string>, bytesRead?: Iterable<string>): DecodePlan {
  const used = new Set(fields);
  for (const f of used) if (TRANSIT_SCHEME.lookup(f) === undefined) throw new Error(`unknown field ${f}`);
  const any = (prefix: string) => [...used].some((f) => f === prefix || f.startsWith(prefix + '.'));
  const raw = ['ip', 'tcp', 'udp', 'icmp'].some((f) => used.has(f));
  const sip = used.has('sip');
  const protoBytes = (bytesRead === undefined ? used : new Set(bytesRead)).has('ip.proto');
  return Object.freeze({
    tcp: any('tcp'),
    udp: any('udp') || sip,
    icmp: any('icmp'),
    raw,
    sip,
    protoBytes,
    fast: !raw && !sip && !protoBytes,
  });
}
