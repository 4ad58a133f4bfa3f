// Reads an execution context back into a plain object of the fields present,
// for assertions: ints as numbers, IPs as text, bytes as text (raw fields as hex), bools.
import type { ExecutionContext } from '../../src/expr/index.js';
import { formatIpv4, formatIpv6 } from '../../src/net/index.js';
import { TRANSIT_SCHEME } from '../../src/packet/index.js';

export type FieldObject = Record<string, number | string | boolean>;

export function readContext(ctx: ExecutionContext): FieldObject {
  const out: FieldObject = {};
  for (const f of TRANSIT_SCHEME.fields) {
    if (f.anyOf !== null || f.hidden) continue;
    const s = f.slot;
    if (f.type === 'int') {
      if (!Number.isNaN(ctx.ints[s])) out[f.name] = ctx.ints[s]!;
    } else if (f.type === 'bool') {
      if (ctx.bools[s] === 1) out[f.name] = true;
    } else if (f.type === 'ip') {
      const fam = ctx.ipFamily[s];
      if (fam === 4) out[f.name] = formatIpv4(ctx.ip4[s]!);
      else if (fam === 6) out[f.name] = formatIpv6(ctx.ip6[4 * s]!, ctx.ip6[4 * s + 1]!, ctx.ip6[4 * s + 2]!, ctx.ip6[4 * s + 3]!);
    } else {
      const b = ctx.bytesBuf[s];
      if (b !== null && b !== undefined) {
        const view = b.subarray(ctx.bytesStart[s], ctx.bytesEnd[s]);
        out[f.name] = f.raw ? Buffer.from(view).toString('hex') : new TextDecoder().decode(view);
      }
    }
  }
  return out;
}
