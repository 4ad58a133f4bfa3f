// Recursive-descent parser with precedence levels or < xor < and < not.
// It produces a scheme-free tree (see ast.ts) and enforces the length and
// nesting limits, so no input can make it recurse without bound.

import { MoatError } from '../errors/index.js';
import type { CallArg, CmpOp, Expr, RawLiteral, Rhs, ValueExpr } from './ast.js';
import { isNameChar, isWordChar, Scanner } from './lexer.js';
import { DEFAULT_LIMITS, type Limits } from './limits.js';

type LogicalKind = 'or' | 'xor' | 'and';

// Spellings of the logical operators at each level, lowest precedence first.
const LOGICAL: ReadonlyArray<{ kind: LogicalKind; word: string; symbol: string }> = [
  { kind: 'or', word: 'or', symbol: '||' },
  { kind: 'xor', word: 'xor', symbol: '^^' },
  { kind: 'and', word: 'and', symbol: '&&' },
];

const WORD_OPS: Readonly<Record<string, CmpOp>> = {
  eq: '==',
  ne: '!=',
  lt: '<',
  le: '<=',
  gt: '>',
  ge: '>=',
  in: 'in',
  contains: 'contains',
  matches: 'matches',
  bitwise_and: '&',
};

const SYMBOL_OPS: Readonly<Record<string, CmpOp>> = {
  '==': '==',
  '!=': '!=',
  '<': '<',
  '<=': '<=',
  '>': '>',
  '>=': '>=',
  '~': 'matches',
  '&': '&',
};

/** Parses an expression into a syntax tree; throws MoatError with a span on bad input. */
export function parse(source: string, limits: Limits = DEFAULT_LIMITS): Expr {
  if (source.length > limits.maxLength) {
    throw new MoatError(
      'EXPR_TOO_LONG',
      `expression is ${source.length} characters long; the limit is ${limits.maxLength}`,
      { span: { start: limits.maxLength, end: source.length }, hint: 'split the rule into several rules' },
    );
  }
  return new Parser(source, limits).parseFilter();
}

class Parser {
  private readonly s: Scanner;

  constructor(
    private readonly src: string,
    private readonly limits: Limits,
  ) {
    this.s = new Scanner(src);
  }

  parseFilter(): Expr {
    this.s.skipWs();
    if (this.s.atEnd()) {
      throw new MoatError('EXPR_EMPTY', 'the expression is empty', { span: { start: 0, end: this.src.length } });
    }
    const e = this.parseLevel(0, 0);
    this.s.skipWs();
    if (!this.s.atEnd()) {
      const c = this.s.peek();
      if (c === 0x29) {
        throw new MoatError('EXPR_UNEXPECTED_TOKEN', 'unbalanced ")": no "(" to close', {
          span: { start: this.s.pos, end: this.s.pos + 1 },
        });
      }
      throw this.unexpected('expected "and", "or", "xor" or the end of the expression', 'EXPR_TRAILING_INPUT');
    }
    return e;
  }

  // Parses the logical level `level` (0 = or, 1 = xor, 2 = and, 3 = unary).
  private parseLevel(level: number, depth: number): Expr {
    if (level === 3) return this.parseUnary(depth);
    const op = LOGICAL[level]!;
    const first = this.parseLevel(level + 1, depth);
    const items: Expr[] = [first];
    for (;;) {
      this.s.skipWs();
      if (this.s.lookingAt(op.symbol)) this.s.pos += op.symbol.length;
      else if (this.s.lookingAtKeyword(op.word)) this.s.pos += op.word.length;
      else break;
      items.push(this.parseLevel(level + 1, depth));
    }
    if (items.length === 1) return first;
    return { kind: op.kind, items, span: { start: first.span.start, end: items[items.length - 1]!.span.end } };
  }

  private enter(depth: number, start: number): number {
    if (depth + 1 > this.limits.maxDepth) {
      throw new MoatError('EXPR_TOO_DEEP', `expression is nested more than ${this.limits.maxDepth} levels deep`, {
        span: { start, end: start + 1 },
      });
    }
    return depth + 1;
  }

  private parseUnary(depth: number): Expr {
    this.s.skipWs();
    const start = this.s.pos;
    if (this.s.peek() === 0x21 && this.s.peek(1) !== 0x3d) {
      this.s.pos++;
      const operand = this.parseUnary(this.enter(depth, start));
      return { kind: 'not', operand, span: { start, end: operand.span.end } };
    }
    if (this.s.lookingAtKeyword('not')) {
      this.s.pos += 3;
      const operand = this.parseUnary(this.enter(depth, start));
      return { kind: 'not', operand, span: { start, end: operand.span.end } };
    }
    if (this.s.peek() === 0x28) {
      this.s.pos++;
      const inner = this.parseLevel(0, this.enter(depth, start));
      this.s.skipWs();
      if (this.s.peek() !== 0x29) {
        if (this.s.atEnd()) {
          throw new MoatError('EXPR_UNCLOSED_PAREN', 'missing ")" to close this "("', {
            span: { start, end: start + 1 },
          });
        }
        throw this.unexpected('expected ")", "and", "or" or "xor"');
      }
      this.s.pos++;
      return { kind: 'group', inner, span: { start, end: this.s.pos } };
    }
    return this.parseComparison(depth);
  }

  private parseComparison(depth: number): Expr {
    const lhs = this.parseValue(depth);
    const start = lhs.span.start;
    this.s.skipWs();
    const c = this.s.peek();
    // A bare value (a boolean field): the comparison ends here.
    if (c === -1 || c === 0x29 || this.atLogicalOp()) {
      return { kind: 'cmp', lhs, op: null, opSpan: null, rhs: null, span: lhs.span };
    }
    const opStart = this.s.pos;
    const op = this.parseOperator();
    const opSpan = { start: opStart, end: this.s.pos };
    this.s.skipWs();
    const rhs = this.parseRhs();
    return { kind: 'cmp', lhs, op, opSpan, rhs, span: { start, end: rhs.span.end } };
  }

  private atLogicalOp(): boolean {
    const s = this.s;
    return (
      s.lookingAt('&&') || s.lookingAt('||') || s.lookingAt('^^') ||
      s.lookingAtKeyword('and') || s.lookingAtKeyword('or') || s.lookingAtKeyword('xor')
    );
  }

  private parseValue(depth: number): ValueExpr {
    const start = this.s.pos;
    const c = this.s.peek();
    if (c === -1) {
      throw new MoatError('EXPR_UNEXPECTED_END', 'expected a field name, "not" or "(" but the expression ended', {
        span: { start, end: start },
      });
    }
    if (!isNameChar(c)) throw this.unexpected('expected a field name, "not" or "("');
    const name = this.s.scanName();
    if (this.s.peek() === 0x2e) {
      this.s.pos++;
      throw new MoatError('EXPR_UNEXPECTED_TOKEN', `"${name}." is not a valid name`, {
        span: { start, end: this.s.pos },
      });
    }
    const save = this.s.pos;
    this.s.skipWs();
    if (this.s.peek() !== 0x28) {
      this.s.pos = save;
      return { kind: 'field', name, span: { start, end: save } };
    }
    // A function call.
    const inner = this.enter(depth, start);
    this.s.pos++;
    const args: CallArg[] = [];
    this.s.skipWs();
    if (this.s.peek() === 0x29) {
      this.s.pos++;
      return { kind: 'call', name, args, span: { start, end: this.s.pos } };
    }
    for (;;) {
      this.s.skipWs();
      args.push(this.parseArg(inner));
      this.s.skipWs();
      const d = this.s.peek();
      if (d === 0x2c) {
        this.s.pos++;
        continue;
      }
      if (d === 0x29) {
        this.s.pos++;
        return { kind: 'call', name, args, span: { start, end: this.s.pos } };
      }
      if (d === -1) {
        throw new MoatError('EXPR_UNCLOSED_PAREN', `missing ")" to close the call of ${name}(`, {
          span: { start, end: this.s.pos },
        });
      }
      throw this.unexpected('expected "," or ")" in the argument list');
    }
  }

  private parseArg(depth: number): CallArg {
    const c = this.s.peek();
    if (c === 0x22 || this.atRawString()) return this.parseLiteral();
    if ((c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || c === 0x5f) {
      // A name that is not followed by literal characters is a field (or a nested call).
      const save = this.s.pos;
      this.s.scanName();
      const next = this.s.peek();
      this.s.pos = save;
      if (!isWordChar(next)) return this.parseValue(depth);
    }
    return this.parseLiteral();
  }

  private parseOperator(): CmpOp {
    const start = this.s.pos;
    const c = this.s.peek();
    if (isNameChar(c)) {
      const word = this.s.scanName();
      const op = WORD_OPS[word];
      if (op !== undefined) return op;
      const lower = word.toLowerCase();
      let hint: string | undefined;
      if (WORD_OPS[lower] !== undefined) hint = `operators are lowercase: "${lower}"`;
      else {
        const glued = [...Object.keys(WORD_OPS), 'and', 'xor', 'or'].find((k) => word.startsWith(k) && word.length > k.length);
        if (glued !== undefined) hint = `put a space between "${glued}" and "${word.slice(glued.length)}"`;
        else if (word === 'wildcard' || word === 'strict') hint = 'wildcard matching is not available in network_transit rules';
      }
      throw new MoatError('EXPR_BAD_OPERATOR', `unknown operator "${word}"`, {
        span: { start, end: this.s.pos },
        hint: hint ?? 'operators are == != < <= > >= eq ne lt le gt ge in contains matches ~ & bitwise_and',
      });
    }
    const sym = this.s.scanSymbols();
    const op = SYMBOL_OPS[sym];
    if (op !== undefined) return op;
    if (sym === '') {
      if (this.s.peek() === 0x7b || this.s.peek() === 0x22 || this.s.peek() === 0x24) {
        throw new MoatError('EXPR_UNEXPECTED_TOKEN', 'expected an operator before the value', {
          span: { start, end: start + 1 },
          hint: 'for example "in", "==" or "eq"',
        });
      }
      throw this.unexpected('expected an operator such as "==", "in" or "eq"');
    }
    let hint: string | undefined;
    if (sym === '=' || sym === '===') hint = 'equality is "==" or "eq"';
    else if (sym === '!==' || sym === '=!' || sym === '<>') hint = 'inequality is "!=" or "ne"';
    else if (sym === '&&' || sym === '||' || sym === '^^') hint = 'a logical operator needs a comparison on both sides';
    throw new MoatError('EXPR_BAD_OPERATOR', `unknown operator "${sym}"`, { span: { start, end: this.s.pos }, hint });
  }

  // `r"` or `r#` starts a raw string (the scanner reports a malformed one).
  private atRawString(): boolean {
    return this.s.peek() === 0x72 && (this.s.peek(1) === 0x22 || this.s.peek(1) === 0x23);
  }

  private parseRhs(): Rhs {
    const start = this.s.pos;
    const c = this.s.peek();
    if (c === 0x7b) return this.parseSet();
    if (c === 0x24) {
      const name = this.s.scanListName();
      return { kind: 'list', name, span: { start, end: this.s.pos } };
    }
    if (c === -1) {
      throw new MoatError('EXPR_UNEXPECTED_END', 'expected a value after the operator but the expression ended', {
        span: { start, end: start },
      });
    }
    return this.parseLiteral();
  }

  private parseLiteral(): RawLiteral {
    const start = this.s.pos;
    const c = this.s.peek();
    if (c === 0x22) {
      const bytes = this.s.scanString();
      return { kind: 'string', bytes, raw: false, span: { start, end: this.s.pos } };
    }
    if (this.atRawString()) {
      const bytes = this.s.scanRawString();
      return { kind: 'string', bytes, raw: true, span: { start, end: this.s.pos } };
    }
    if (c === 0x27) {
      throw new MoatError('EXPR_UNEXPECTED_CHAR', "single quotes do not delimit strings", {
        span: { start, end: start + 1 },
        hint: 'use double quotes: "..."',
      });
    }
    const text = this.s.scanWord();
    if (text === '') {
      if (c === -1) {
        throw new MoatError('EXPR_UNEXPECTED_END', 'expected a value but the expression ended', {
          span: { start, end: start },
        });
      }
      throw this.unexpected('expected a value (a number, an address, a "string", a {set} or a $list)');
    }
    return { kind: 'word', text, span: { start, end: this.s.pos } };
  }

  private parseSet(): Rhs {
    const start = this.s.pos;
    this.s.pos++;
    const items: RawLiteral[] = [];
    for (;;) {
      this.s.skipWs();
      const c = this.s.peek();
      if (c === 0x7d) {
        this.s.pos++;
        return { kind: 'set', items, span: { start, end: this.s.pos } };
      }
      if (c === -1) {
        throw new MoatError('EXPR_UNCLOSED_SET', 'missing "}" to close this set', { span: { start, end: start + 1 } });
      }
      if (c === 0x2c) {
        throw new MoatError('EXPR_COMMA_IN_SET', 'set items are separated by spaces, not commas', {
          span: { start: this.s.pos, end: this.s.pos + 1 },
          hint: 'write {80 443}, not {80, 443}',
        });
      }
      const item = this.parseLiteral();
      items.push(item);
      const d = this.s.peek();
      if (d !== 0x7d && d !== 0x20 && d !== 0x0d && d !== 0x0a && d !== 0x09 && d !== 0x2c && d !== -1) {
        throw this.unexpected('expected a space or "}" after a set item');
      }
    }
  }

  private unexpected(what: string, name: 'EXPR_UNEXPECTED_TOKEN' | 'EXPR_TRAILING_INPUT' = 'EXPR_UNEXPECTED_TOKEN'): MoatError {
    const start = this.s.pos;
    const c = this.s.peek();
    if (c === -1) {
      return new MoatError('EXPR_UNEXPECTED_END', `${what}, but the expression ended`, { span: { start, end: start } });
    }
    let end = start + 1;
    if (isWordChar(c)) while (end < this.src.length && isWordChar(this.src.charCodeAt(end))) end++;
    const cp = this.src.codePointAt(start)!;
    if (cp > 0xffff) end = Math.max(end, start + 2);
    const token = this.src.slice(start, end);
    const printable = cp < 0x20 || cp === 0x7f ? `U+${cp.toString(16).toUpperCase().padStart(4, '0')}` : token;
    // Characters that start a token of the language make an unexpected token; others an unexpected character.
    const known = isWordChar(c) || '(){}",$=!<>~&|^'.includes(String.fromCharCode(c));
    let hint: string | undefined;
    if ('=!<>~&'.includes(String.fromCharCode(c)) && name === 'EXPR_TRAILING_INPUT') {
      hint = 'a comparison has one operator; combine comparisons with and/or, e.g. tcp.flags & 0x12 (true when any of these bits is set)';
    }
    return new MoatError(known ? name : 'EXPR_UNEXPECTED_CHAR', `${what}; found "${printable}"`, { span: { start, end }, hint });
  }
}
