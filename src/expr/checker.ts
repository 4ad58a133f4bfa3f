// The checker: resolves names against the scheme, checks each operator against
// the field's type, and turns raw literals into compile-time forms (range sets,
// IP sets, byte strings, regexes). It collects every error it can find.

import { MoatError } from '../errors/index.js';
import { IpRangeSet, NumberRangeSet, type IpRange } from '../net/index.js';
import type { CmpOp, Expr, RawLiteral, Rhs, ValueExpr } from './ast.js';
import type { Checked, IntOperand, ListProvider } from './checked.js';
import { checkCall } from './functions.js';
import { literalBytes, parseIntRange, parseIntWord, parseIpSetItem, parseIpWord } from './literals.js';
import type { FieldDef, FieldType, Scheme } from './scheme.js';

/** The managed lists of the spec, by canonical name; `$cf.*` is accepted as an alias of `$svc.*`. */
export const MANAGED_LISTS: readonly string[] = ['svc.anonymizer', 'svc.botnetcc', 'svc.malware'];

/** Options of the checker. */
export interface CheckOptions {
  /** Known lists by canonical name. When omitted, any account list name is accepted. */
  lists?: ListProvider | undefined;
}

/** What checking produced: a tree when there are no errors, and what the expression uses. */
export interface CheckResult {
  readonly tree: Checked | null;
  readonly errors: MoatError[];
  readonly fields: string[];
  readonly lists: string[];
}

/** Canonical list name: `cf.malware` → `svc.malware`. */
export function canonicalListName(name: string): string {
  return name.startsWith('cf.') ? 'svc.' + name.slice(3) : name;
}

const OPS_BY_TYPE: Readonly<Record<FieldType, readonly CmpOp[]>> = {
  int: ['==', '!=', '<', '<=', '>', '>=', 'in', '&'],
  ip: ['==', '!=', '<', '<=', '>', '>=', 'in'],
  bytes: ['==', '!=', '<', '<=', '>', '>=', 'in', 'contains', 'matches'],
  bool: [],
};

// Names users bring from Wireshark or other Cloudflare phases, with what to use instead.
const FIELD_HINTS: Readonly<Record<string, string>> = {
  'ipv6.src': 'ip.src holds IPv4 and IPv6 addresses',
  'ipv6.dst': 'ip.dst holds IPv4 and IPv6 addresses',
  'ip.addr': 'use ip.src or ip.dst',
  'tcp.port': 'use tcp.srcport or tcp.dstport',
  'udp.port': 'use udp.srcport or udp.dstport',
  'ip.src.region': 'network_transit rules have countries (ip.src.country) but no regions',
  'tcp.flags.ece': 'the ECN-Echo flag is tcp.flags.ecn',
  'ip.geoip.asnum': 'use ip.src.asnum or ip.dst.asnum',
  'ipv6.hlim': 'ip.ttl holds the IPv6 hop limit',
  'icmpv6.type': 'icmp.type covers ICMPv6',
  'icmpv6.code': 'icmp.code covers ICMPv6',
};

/** Checks a parsed expression against a scheme. */
export function check(ast: Expr, scheme: Scheme, options: CheckOptions = {}): CheckResult {
  const c = new Checker(scheme, options);
  const tree = c.node(ast);
  const fields = [...c.fields].sort();
  const lists = [...c.lists].sort();
  return { tree: c.errors.length === 0 ? tree : null, errors: c.errors, fields, lists };
}

class Checker {
  readonly errors: MoatError[] = [];
  readonly fields = new Set<string>();
  readonly lists = new Set<string>();

  constructor(
    private readonly scheme: Scheme,
    private readonly options: CheckOptions,
  ) {}

  node(e: Expr): Checked | null {
    switch (e.kind) {
      case 'or':
      case 'and':
      case 'xor': {
        const items = e.items.map((i) => this.node(i));
        return items.every((i) => i !== null) ? { kind: e.kind, items: items as Checked[] } : null;
      }
      case 'not': {
        const operand = this.node(e.operand);
        return operand === null ? null : { kind: 'not', operand };
      }
      case 'group':
        return this.node(e.inner);
      case 'cmp':
        try {
          return this.comparison(e);
        } catch (err) {
          if (err instanceof MoatError) {
            this.errors.push(err);
            return null;
          }
          throw err;
        }
    }
  }

  private resolve(v: Extract<ValueExpr, { kind: 'field' }>): FieldDef {
    const f = this.scheme.lookup(v.name);
    if (f !== undefined) {
      this.fields.add(f.name);
      return f;
    }
    if (/^[0-9-]/.test(v.name)) {
      throw new MoatError('EXPR_NOT_BOOLEAN', `"${v.name}" is a value, not a test`, {
        span: v.span,
        hint: 'a rule expression compares a field with a value, for example tcp.dstport == 80',
      });
    }
    let hint = FIELD_HINTS[v.name];
    if (hint === undefined) {
      const lower = this.scheme.lookup(v.name.toLowerCase());
      if (lower !== undefined) hint = `field names are lowercase: ${lower.name}`;
      else {
        const near = this.scheme.fields.filter((d) => !d.hidden && v.name.length >= 4 && editDistance(d.name, v.name) <= 2).map((d) => d.name);
        if (near.length > 0) hint = `did you mean ${near.slice(0, 3).join(' or ')}?`;
      }
    }
    throw new MoatError('EXPR_UNKNOWN_FIELD', `unknown field ${v.name}`, { span: v.span, hint });
  }

  private comparison(e: Extract<Expr, { kind: 'cmp' }>): Checked {
    let type: FieldType;
    let field: FieldDef | null = null;
    let intLhs: IntOperand | null = null;
    if (e.lhs.kind === 'call') {
      intLhs = checkCall(e.lhs, this.scheme);
      this.fields.add(intLhs.field.name);
      type = 'int';
    } else if ((e.lhs.name === 'true' || e.lhs.name === 'false') && this.scheme.lookup(e.lhs.name) === undefined) {
      if (e.op !== null) {
        throw new MoatError('EXPR_BOOL_WITH_OP', `${e.lhs.name} is a constant and is used bare`, {
          span: { start: e.opSpan!.start, end: e.rhs!.span.end },
          hint: `write "${e.lhs.name}" alone, or compare a field`,
        });
      }
      return { kind: 'const', value: e.lhs.name === 'true' };
    } else {
      field = this.resolve(e.lhs);
      type = field.type;
      if (type === 'int') intLhs = { kind: 'field', field };
    }
    const name = e.lhs.kind === 'call' ? `${e.lhs.name}()` : e.lhs.name;
    if (e.op === null || e.rhs === null) {
      if (type === 'bool') return { kind: 'bool', field: field! };
      throw new MoatError('EXPR_MISSING_OP', `${name} is not a boolean field; compare it with a value`, {
        span: e.lhs.span,
        hint: `for example ${name} ${type === 'bytes' ? '== "..."' : type === 'ip' ? 'in {192.0.2.0/24}' : '== 80'}`,
      });
    }
    const opSpan = e.opSpan!;
    if (type === 'bool') {
      throw new MoatError('EXPR_BOOL_WITH_OP', `${name} is a boolean field and is used bare`, {
        span: { start: opSpan.start, end: e.rhs.span.end },
        hint: `write "${name}" or "not ${name}"`,
      });
    }
    if (!OPS_BY_TYPE[type].includes(e.op)) {
      throw new MoatError('EXPR_UNSUPPORTED_OP', `operator ${e.op} does not apply to ${name} (${typeName(type)})`, {
        span: opSpan,
        hint: `${typeName(type)} fields take ${OPS_BY_TYPE[type].join(' ')}`,
      });
    }
    const rhs = e.rhs;
    if (rhs.kind === 'list') return this.list(field, type, rhs, name);
    if (e.op === 'in') {
      if (rhs.kind !== 'set') {
        throw new MoatError('EXPR_TYPE_MISMATCH', '"in" takes a set {...} or a list $name', { span: rhs.span });
      }
    } else if (rhs.kind === 'set') {
      throw new MoatError('EXPR_TYPE_MISMATCH', `a set is used with "in", not "${e.op}"`, { span: rhs.span });
    }
    switch (type) {
      case 'int':
        return this.intCmp(intLhs!, e.op, rhs, name);
      case 'ip':
        return this.ipCmp(field!, e.op, rhs, name);
      default:
        return this.bytesCmp(field!, e.op, rhs, name);
    }
  }

  private list(field: FieldDef | null, type: FieldType, rhs: Extract<Rhs, { kind: 'list' }>, name: string): Checked {
    if (type !== 'ip' || field === null) {
      throw new MoatError('EXPR_LIST_TYPE', `lists hold IP addresses; ${name} is ${typeName(type)}`, { span: rhs.span });
    }
    const canonical = canonicalListName(rhs.name);
    const managed = canonical.startsWith('svc.');
    if (managed && !MANAGED_LISTS.includes(canonical)) {
      throw new MoatError('EXPR_UNKNOWN_LIST', `unknown managed list $${rhs.name}`, {
        span: rhs.span,
        hint: `managed lists are ${MANAGED_LISTS.map((l) => '$' + l).join(' ')}`,
      });
    }
    if (!managed && this.options.lists !== undefined && !this.options.lists.has(canonical)) {
      throw new MoatError('EXPR_UNKNOWN_LIST', `unknown list $${rhs.name}`, {
        span: rhs.span,
        hint: 'create the list first, or check its name',
      });
    }
    this.lists.add(canonical);
    return { kind: 'ip-list', field, list: canonical };
  }

  private intCmp(lhs: IntOperand, op: CmpOp, rhs: Rhs, name: string): Checked {
    if (op === 'in') {
      const set = rhs as Extract<Rhs, { kind: 'set' }>;
      const ranges = set.items.map((item) => {
        const [a, b] = parseIntRange(this.word(item, name, 'a number'), item.span);
        return [Number(a), Number(b)] as const;
      });
      return { kind: 'int-in', lhs, set: new NumberRangeSet(ranges) };
    }
    const lit = rhs as RawLiteral;
    const text = this.word(lit, name, 'a number');
    if (text.includes('..')) {
      throw new MoatError('EXPR_RANGE_OUTSIDE_SET', 'a range can only be used inside a set', {
        span: lit.span,
        hint: `write "in {${text}}"`,
      });
    }
    const v = parseIntWord(text, lit.span);
    // Field values are below 2^32, so only the low 32 bits of a mask can match;
    // JS bitwise operators work on those 32 bits.
    if (op === '&') return { kind: 'int-and', lhs, mask: Number(BigInt.asIntN(32, v)) };
    return { kind: 'int-cmp', lhs, op: op as '==', value: Number(v) };
  }

  private ipCmp(field: FieldDef, op: CmpOp, rhs: Rhs, name: string): Checked {
    if (op === 'in') {
      const set = rhs as Extract<Rhs, { kind: 'set' }>;
      const ranges: IpRange[] = set.items.map((item) => parseIpSetItem(this.word(item, name, 'an IP address'), item.span));
      return { kind: 'ip-in', field, set: new IpRangeSet(ranges) };
    }
    const lit = rhs as RawLiteral;
    const value = parseIpWord(this.word(lit, name, 'an IP address'), lit.span);
    return { kind: 'ip-cmp', field, op: op as '==', value };
  }

  private bytesCmp(field: FieldDef, op: CmpOp, rhs: Rhs, name: string): Checked {
    if (op === 'in') {
      const set = rhs as Extract<Rhs, { kind: 'set' }>;
      return { kind: 'bytes-in', field, values: set.items.map((i) => literalBytes(i, name)) };
    }
    const lit = rhs as RawLiteral;
    if (op === 'matches') {
      if (lit.kind !== 'string') {
        throw new MoatError('EXPR_TYPE_MISMATCH', 'a regular expression is written as a string', {
          span: lit.span,
          hint: `write ${name} matches "..."`,
        });
      }
      return { kind: 'bytes-matches', field, regex: compileRegex(lit) };
    }
    const value = literalBytes(lit, name);
    if (op === 'contains') return { kind: 'bytes-contains', field, value };
    return { kind: 'bytes-cmp', field, op: op as '==', value };
  }

  // The text of a literal that must be a bare word (numbers and addresses are not quoted).
  private word(lit: RawLiteral, name: string, what: string): string {
    if (lit.kind === 'word') return lit.text;
    throw new MoatError('EXPR_TYPE_MISMATCH', `${name} holds ${what}, not a string`, {
      span: lit.span,
      hint: 'numbers and addresses are written without quotes',
    });
  }
}

// Regexes run on the latin1 reading of the field's bytes (one char per byte).
// Rust's regex crate (Cloudflare's engine) has no backreferences or lookaround,
// so those are rejected to keep matching linear in practice.
function compileRegex(lit: Extract<RawLiteral, { kind: 'string' }>): RegExp {
  let pattern = '';
  for (const b of lit.bytes) pattern += String.fromCharCode(b);
  if (/\\[1-9]|\\k<|\(\?<?[=!]/.test(pattern)) {
    throw new MoatError('EXPR_BAD_REGEX', 'backreferences and lookaround are not supported in regular expressions', {
      span: lit.span,
    });
  }
  try {
    return new RegExp(pattern);
  } catch (err) {
    throw new MoatError('EXPR_BAD_REGEX', `invalid regular expression: ${(err as Error).message}`, {
      span: lit.span,
      cause: err,
    });
  }
}

function typeName(t: FieldType): string {
  return t === 'int' ? 'a number' : t === 'ip' ? 'an IP address' : t === 'bytes' ? 'a string' : 'a boolean';
}

function editDistance(a: string, b: string): number {
  const dp = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = dp[0]!;
    dp[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = dp[j]!;
      dp[j] = Math.min(dp[j]! + 1, dp[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return dp[b.length]!;
}

