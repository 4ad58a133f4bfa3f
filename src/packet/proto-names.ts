// `ip.proto` values as preencoded bytes, so setting the field per packet is
// three stores and no string work.

import type { ExecutionContext } from '../expr/index.js';
import { PROTO_NAMES } from './constants.js';
import { IP_PROTO } from './slots.js';

const encoder = new TextEncoder();
const PROTO_BYTES: readonly Uint8Array[] = PROTO_NAMES.map((n) => encoder.encode(n));

/** Sets `ip.proto` to the keyword of protocol number `p`. */
export function setProto(ctx: ExecutionContext, p: number): void {
  const b = PROTO_BYTES[p]!;
  ctx.bytesBuf[IP_PROTO] = b;
  ctx.bytesStart[IP_PROTO] = 0;
  ctx.bytesEnd[IP_PROTO] = b.length;
  ctx.bytesText[IP_PROTO] = PROTO_NAMES[p]!;
}
