// Built-in functions of the network_transit rules language. Magic Firewall has
// one: bit_slice(protocol, start, end) -> Int, which reads bits [start, end) of a
// raw header field (`ip`, `tcp`, `udp`, `icmp`). The first argument may be the
// bare field or its name as a string (Cloudflare's docs show neither form).

import { MoatError } from '../errors/index.js';
import type { CallArg, ValueExpr } from './ast.js';
import type { IntOperand } from './checked.js';
import { parseIntWord } from './literals.js';
import type { Scheme } from './scheme.js';

/** Widest slice, in bits (the result is an unsigned 32-bit number). */
export const BIT_SLICE_MAX_WIDTH = 32;
/** Largest end offset, in bits (Cloudflare's documented limit). */
export const BIT_SLICE_MAX_OFFSET = 2040;

/** Names of the built-in functions. */
export const FUNCTION_NAMES: readonly string[] = ['bit_slice'];

/** Checks a call and returns its int operand; throws a coded error. */
export function checkCall(call: Extract<ValueExpr, { kind: 'call' }>, scheme: Scheme): IntOperand {
  if (call.name !== 'bit_slice') {
    throw new MoatError('EXPR_UNKNOWN_FUNCTION', `unknown function ${call.name}()`, {
      span: call.span,
      hint: 'the network_transit phase has one function: bit_slice(protocol, start, end)',
    });
  }
  const usage = 'bit_slice(protocol, start, end) takes ip, tcp, udp or icmp and two bit offsets';
  if (call.args.length !== 3) {
    throw new MoatError('EXPR_BAD_ARGUMENTS', `bit_slice takes 3 arguments, not ${call.args.length}`, {
      span: call.span,
      hint: usage,
    });
  }
  const [proto, startArg, endArg] = call.args as [CallArg, CallArg, CallArg];
  let fieldName: string | undefined;
  if (proto.kind === 'field') fieldName = proto.name;
  else if (proto.kind === 'string') fieldName = new TextDecoder().decode(proto.bytes);
  const field = fieldName === undefined ? undefined : scheme.lookup(fieldName);
  if (field === undefined || !field.raw) {
    throw new MoatError('EXPR_BAD_ARGUMENTS', 'the first argument of bit_slice must be ip, tcp, udp or icmp', {
      span: proto.span,
      hint: usage,
    });
  }
  const start = offsetArg(startArg, usage);
  const end = offsetArg(endArg, usage);
  if (!(start < end) || end - start > BIT_SLICE_MAX_WIDTH || end > BIT_SLICE_MAX_OFFSET) {
    throw new MoatError(
      'EXPR_BAD_ARGUMENTS',
      `bit_slice(${field.name}, ${start}, ${end}) must read 1 to ${BIT_SLICE_MAX_WIDTH} bits ending at or before bit ${BIT_SLICE_MAX_OFFSET}`,
      { span: { start: startArg.span.start, end: endArg.span.end } },
    );
  }
  return { kind: 'bit_slice', field, start, end };
}

function offsetArg(arg: CallArg, usage: string): number {
  if (arg.kind !== 'word') {
    throw new MoatError('EXPR_BAD_ARGUMENTS', 'bit_slice offsets are integers', { span: arg.span, hint: usage });
  }
  const v = parseIntWord(arg.text, arg.span);
  if (v < 0n || v > 1_000_000n) {
    throw new MoatError('EXPR_BAD_ARGUMENTS', `bit offset ${arg.text} is out of range`, { span: arg.span, hint: usage });
  }
  return Number(v);
}
