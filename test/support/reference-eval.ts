// A deliberately naive evaluator of the rules language, written from the
// language's documented semantics with none of the engine's machinery (no
// slots, no range sets, no closures): it walks the parsed tree and compares
// JS values (BigInt for IPs, strings of bytes). The compiled engine must agree
// with it on every expression and packet.

import type { Expr, RawLiteral, Rhs, ValueExpr } from '../../src/expr/index.js';

/** A packet as plain values: ints as numbers, IPs as text, bytes as latin1 strings, bools. */
export type RefPacket = Record<string, number | string | boolean | undefined>;

/** Field types, restated here rather than read from the engine. */
export const REF_TYPES: Record<string, 'int' | 'ip' | 'bytes' | 'bool'> = {
  'ip.src': 'ip', 'ip.dst': 'ip', 'ip.proto': 'bytes', 'ip.len': 'int', 'ip.hdr_len': 'int', 'ip.ttl': 'int',
  'ip.opt.type': 'int', 'ip.src.country': 'bytes', 'ip.dst.country': 'bytes', 'ip.geoip.country': 'bytes',
  'ip.src.asnum': 'int', 'ip.dst.asnum': 'int', 'tcp.srcport': 'int', 'tcp.dstport': 'int', 'tcp.flags': 'int',
  'tcp.flags.fin': 'bool', 'tcp.flags.syn': 'bool', 'tcp.flags.reset': 'bool', 'tcp.flags.push': 'bool',
  'tcp.flags.ack': 'bool', 'tcp.flags.urg': 'bool', 'tcp.flags.ecn': 'bool', 'tcp.flags.cwr': 'bool',
  'udp.srcport': 'int', 'udp.dstport': 'int', 'icmp.type': 'int', 'icmp.code': 'int',
  ip: 'bytes', tcp: 'bytes', udp: 'bytes', icmp: 'bytes', sip: 'bool', 'cf.colo.name': 'bytes', 'cf.colo.region': 'bytes',
};

/** An IP as [family, BigInt value]. */
export function refIp(text: string): [4 | 6, bigint] {
  if (!text.includes(':')) {
    const p = text.split('.').map(Number);
    return [4, BigInt(((p[0]! * 256 + p[1]!) * 256 + p[2]!) * 256 + p[3]!)];
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const expand = (s: string | undefined): number[] => {
    if (s === undefined || s === '') return [];
    const out: number[] = [];
    for (const g of s.split(':')) {
      if (g.includes('.')) {
        const [, v] = refIp(g);
        out.push(Number(v >> 16n), Number(v & 0xffffn));
      } else out.push(parseInt(g, 16));
    }
    return out;
  };
  const h = expand(head);
  const t = expand(tail);
  const groups = tail === undefined ? h : [...h, ...new Array(8 - h.length - t.length).fill(0), ...t];
  return [6, groups.reduce((acc, g) => (acc << 16n) | BigInt(g), 0n)];
}

function refInt(text: string): bigint {
  const neg = text.startsWith('-');
  const t = neg ? text.slice(1) : text;
  let v: bigint;
  if (/^0x/i.test(t)) v = BigInt(t);
  else if (t.length > 1 && t.startsWith('0')) v = BigInt('0o' + t.slice(1));
  else v = BigInt(t);
  return neg ? -v : v;
}

function litString(l: RawLiteral): string {
  if (l.kind === 'string') return String.fromCharCode(...l.bytes);
  return l.text.split(/[:.-]/).map((h) => String.fromCharCode(parseInt(h, 16))).join('');
}

function ipItem(text: string): [4 | 6, bigint, bigint] {
  if (text.includes('..')) {
    const [a, b] = text.split('..');
    const x = refIp(a!);
    return [x[0], x[1], refIp(b!)[1]];
  }
  if (text.includes('/')) {
    const [a, len] = text.split('/');
    const [fam, v] = refIp(a!);
    const bits = fam === 4 ? 32n : 128n;
    const host = (1n << (bits - BigInt(len!))) - 1n;
    return [fam, v, v | host];
  }
  const [fam, v] = refIp(text);
  return [fam, v, v];
}

function cmpBig(op: string, a: bigint, b: bigint): boolean {
  switch (op) {
    case '==': return a === b;
    case '!=': return a !== b;
    case '<': return a < b;
    case '<=': return a <= b;
    case '>': return a > b;
    default: return a >= b;
  }
}

function cmpStr(op: string, a: string, b: string): boolean {
  switch (op) {
    case '==': return a === b;
    case '!=': return a !== b;
    case '<': return a < b;
    case '<=': return a <= b;
    case '>': return a > b;
    default: return a >= b;
  }
}

function value(v: ValueExpr, p: RefPacket): bigint | string | boolean | undefined {
  if (v.kind === 'field') {
    const x = p[v.name];
    if (x === undefined) return undefined;
    if (REF_TYPES[v.name] === 'int') return BigInt(x as number);
    return x as string | boolean;
  }
  // bit_slice(field, start, end)
  const a0 = v.args[0]!;
  const name = a0.kind === 'field' ? a0.name : a0.kind === 'string' ? String.fromCharCode(...a0.bytes) : '';
  const bytes = p[name] as string | undefined;
  const start = Number(refInt((v.args[1] as { text: string }).text));
  const end = Number(refInt((v.args[2] as { text: string }).text));
  if (bytes === undefined || Math.ceil(end / 8) > bytes.length) return undefined;
  let bits = 0n;
  for (let i = 0; i < bytes.length; i++) bits = (bits << 8n) | BigInt(bytes.charCodeAt(i));
  const total = BigInt(bytes.length * 8);
  return (bits >> (total - BigInt(end))) & ((1n << BigInt(end - start)) - 1n);
}

/** Evaluates a parsed expression; lists map canonical names to entry strings. */
export function refEval(e: Expr, p: RefPacket, lists: Record<string, string[]> = {}): boolean {
  switch (e.kind) {
    case 'or': return e.items.some((i) => refEval(i, p, lists));
    case 'and': return e.items.every((i) => refEval(i, p, lists));
    case 'xor': return e.items.reduce((acc, i) => acc !== refEval(i, p, lists), false);
    case 'not': return !refEval(e.operand, p, lists);
    case 'group': return refEval(e.inner, p, lists);
    case 'cmp': {
      if (e.lhs.kind === 'field' && e.op === null && (e.lhs.name === 'true' || e.lhs.name === 'false')) return e.lhs.name === 'true';
      if (e.lhs.kind === 'field' && e.lhs.name === 'ip.geoip.country') {
        const vals = [p['ip.src.country'], p['ip.dst.country']].filter((x) => x !== undefined);
        const one = (c: string | boolean | number | undefined) =>
          refCmp({ ...e, lhs: { ...e.lhs, name: 'x' } } as typeof e, { x: c } as RefPacket, 'bytes', lists);
        if (e.op === '!=') return vals.length > 0 && vals.every(one);
        return vals.some(one);
      }
      const type = e.lhs.kind === 'call' ? 'int' : REF_TYPES[e.lhs.name]!;
      return refCmp(e, p, type, lists);
    }
  }
}

function refCmp(e: Extract<Expr, { kind: 'cmp' }>, p: RefPacket, type: string, lists: Record<string, string[]>): boolean {
  const v = value(e.lhs, p);
  if (e.op === null) return v === true;
  if (v === undefined) return false;
  const rhs = e.rhs as Rhs;
  if (type === 'int') {
    const x = v as bigint;
    if (e.op === '&') return (x & refInt((rhs as { text: string }).text)) !== 0n;
    if (e.op === 'in') {
      return (rhs as unknown as { items: RawLiteral[] }).items.some((it) => {
        const t = (it as { text: string }).text;
        const [a, b] = t.includes('..') ? t.split('..').map(refInt) : [refInt(t), refInt(t)];
        return x >= a! && x <= b!;
      });
    }
    return cmpBig(e.op, x, refInt((rhs as { text: string }).text));
  }
  if (type === 'ip') {
    const [fam, x] = refIp(v as string);
    if (e.op === 'in') {
      const entries = rhs.kind === 'list'
        ? (lists[rhs.name.replace(/^cf\./, 'svc.')] ?? [])
        : (rhs as unknown as { items: RawLiteral[] }).items.map((i) => (i as { text: string }).text);
      return entries.some((t) => {
        const [f, a, b] = ipItem(t);
        return f === fam && x >= a && x <= b;
      });
    }
    const [f2, y] = refIp((rhs as { text: string }).text);
    if (f2 !== fam) return e.op === '!=';
    return cmpBig(e.op, x, y);
  }
  const s = v as string;
  if (e.op === 'in') return (rhs as unknown as { items: RawLiteral[] }).items.some((i) => litString(i) === s);
  const k = litString(rhs as RawLiteral);
  if (e.op === 'contains') return s.includes(k);
  if (e.op === 'matches') return new RegExp(k).test(s);
  return cmpStr(e.op, s, k);
}
