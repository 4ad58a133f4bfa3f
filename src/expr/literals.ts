// Interpretation of raw literals by the type of the field they are compared
// with: integers (decimal, hex, octal, i64 range), IP addresses, CIDRs and
// ranges (sets only), and bytes (quoted strings or hex bytes like 74:63:70).

import { MoatError } from '../errors/index.js';
import { compareWords, parseCidr, parseIp, type IpRange } from '../net/index.js';
import type { RawLiteral } from './ast.js';

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

/** Parses an integer word to a BigInt (i64), or throws a coded error. */
export function parseIntWord(text: string, span: { start: number; end: number }): bigint {
  // As in wirefilter, only decimal numbers take a sign.
  const m = /^(?:(-?)([1-9][0-9]*|0)|()(0[xX][0-9a-fA-F]+|0[0-7]+))$/.exec(text);
  if (m === null) {
    let hint: string | undefined;
    if (/^-?0[0-9]+$/.test(text)) hint = 'a leading 0 makes the number octal (digits 0-7); drop the leading 0';
    else if (/^-0/.test(text)) hint = 'only decimal numbers take a sign';
    else if (text.includes('/') || (text.includes('.') && !text.includes('..'))) hint = 'this field holds a number';
    throw new MoatError('EXPR_BAD_INT', `"${text}" is not a valid integer`, { span, hint });
  }
  const body = m[2] ?? m[4]!;
  let v: bigint;
  if (body.length > 1 && (body[1] === 'x' || body[1] === 'X')) v = BigInt('0x' + body.slice(2));
  else if (body.length > 1 && body[0] === '0') v = BigInt('0o' + body.slice(1));
  else v = BigInt(body);
  if (m[1] === '-') v = -v;
  if (v < I64_MIN || v > I64_MAX) {
    throw new MoatError('EXPR_INT_OVERFLOW', `integer ${text} does not fit in 64 bits`, { span });
  }
  return v;
}

/** Parses an int set item: `n` or `a..b` (a <= b). */
export function parseIntRange(text: string, span: { start: number; end: number }): [bigint, bigint] {
  const dots = text.indexOf('..');
  if (dots < 0) {
    const v = parseIntWord(text, span);
    return [v, v];
  }
  const a = parseIntWord(text.slice(0, dots), { start: span.start, end: span.start + dots });
  const b = parseIntWord(text.slice(dots + 2), { start: span.start + dots + 2, end: span.end });
  if (a > b) {
    throw new MoatError('EXPR_BAD_RANGE', `range ${text} ends before it starts`, { span, hint: 'write the lower bound first' });
  }
  return [a, b];
}

/** Parses a single IP address word (no CIDR, no range: those are for sets). */
export function parseIpWord(text: string, span: { start: number; end: number }): { family: 4 | 6; words: number[] } {
  if (text.includes('/') || text.includes('..')) {
    const what = text.includes('/') ? 'a CIDR' : 'a range';
    throw new MoatError('EXPR_RANGE_OUTSIDE_SET', `${what} can only be used inside a set`, {
      span,
      hint: `write "in {${text}}"`,
    });
  }
  const a = parseIp(text);
  if (a === undefined) throw new MoatError('EXPR_BAD_IP', `"${text}" is not a valid IP address`, { span });
  return { family: a.family, words: a.words.slice() };
}

/** Parses an IP set item: an address, a CIDR with zero host bits, or a range of one family. */
export function parseIpSetItem(text: string, span: { start: number; end: number }): IpRange {
  const dots = text.indexOf('..');
  if (dots >= 0) {
    const a = parseIp(text.slice(0, dots));
    const b = parseIp(text.slice(dots + 2));
    if (a === undefined || b === undefined) {
      throw new MoatError('EXPR_BAD_IP', `"${text}" is not a valid IP range`, { span });
    }
    if (a.family !== b.family) {
      throw new MoatError('EXPR_BAD_RANGE', `range ${text} mixes IPv4 and IPv6`, { span });
    }
    if (compareWords(a.words, b.words) > 0) {
      throw new MoatError('EXPR_BAD_RANGE', `range ${text} ends before it starts`, { span });
    }
    return { family: a.family, first: a.words, last: b.words };
  }
  if (text.includes('/')) {
    const r = parseCidr(text);
    if (!r.ok) {
      if (r.reason === 'host-bits') {
        throw new MoatError('EXPR_CIDR_HOST_BITS', `CIDR ${text} has host bits set`, {
          span,
          hint: `did you mean ${r.network}?`,
        });
      }
      if (r.reason === 'length') {
        throw new MoatError('EXPR_BAD_CIDR', `invalid prefix length in ${text}`, {
          span,
          hint: 'IPv4 prefixes are /0 to /32, IPv6 /0 to /128',
        });
      }
      throw new MoatError('EXPR_BAD_IP', `"${text}" is not a valid CIDR`, { span });
    }
    const first = r.prefix.address.words;
    const last = first.map((w, i) => {
      const keep = Math.max(0, Math.min(32, r.prefix.length - 32 * i));
      return keep === 32 ? w : (w | (0xffffffff >>> keep)) >>> 0;
    });
    return { family: r.prefix.address.family, first, last };
  }
  const a = parseIpWord(text, span);
  return { family: a.family, first: a.words, last: a.words };
}

/** Converts a literal to bytes: a quoted string as is, a word as hex bytes. */
export function literalBytes(lit: RawLiteral, fieldName: string): Uint8Array {
  if (lit.kind === 'string') return lit.bytes;
  const text = lit.text;
  // Hex bytes: pairs of hex digits, each pair after the first preceded by ":", "-" or "."
  // (wirefilter accepts 01:2e:f3-77.12).
  if (/^[0-9a-fA-F]{2}([:.-][0-9a-fA-F]{2})*$/.test(text)) {
    const out = new Uint8Array((text.length + 1) / 3);
    for (let i = 0; i < out.length; i++) out[i] = parseInt(text.slice(i * 3, i * 3 + 2), 16);
    return out;
  }
  if (/[:.-]/.test(text) && /^[0-9a-zA-Z:.-]+$/.test(text) && /^[0-9a-fA-F]{1,2}[:.-]/.test(text)) {
    throw new MoatError('EXPR_BAD_BYTES', `${text} is not a valid byte string`, {
      span: lit.span,
      hint: 'hex bytes are pairs of hex digits separated by ":", "-" or ".", e.g. 74:63:70',
    });
  }
  throw new MoatError('EXPR_TYPE_MISMATCH', `${fieldName} is a string; ${text} is not a quoted string`, {
    span: lit.span,
    hint: `strings are written in double quotes: "${text}"`,
  });
}
