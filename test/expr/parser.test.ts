// The parser builds the tree the language's precedence rules say, and keeps
// spans that point at the source.
import { describe, expect, it } from 'vitest';
import { parse, type Expr } from '../../src/expr/index.js';
import { MoatError } from '../../src/errors/index.js';

// A compact rendering of the tree: (or a b), (and ...), (not x), names for comparisons.
function shape(e: Expr): string {
  switch (e.kind) {
    case 'or':
    case 'and':
    case 'xor':
      return `(${e.kind} ${e.items.map(shape).join(' ')})`;
    case 'not':
      return `(not ${shape(e.operand)})`;
    case 'group':
      return shape(e.inner);
    case 'cmp':
      return e.lhs.kind === 'field' ? e.lhs.name : `${e.lhs.name}()`;
  }
}

function codeOf(src: string): number {
  try {
    parse(src);
  } catch (err) {
    expect(err).toBeInstanceOf(MoatError);
    return (err as MoatError).code;
  }
  throw new Error(`expected ${JSON.stringify(src)} to fail`);
}

describe('the parser', () => {
  it('gives not a higher precedence than and, and than xor, and than or', () => {
    expect(shape(parse('a or b && c and d or e ^^ f and g || h'))).toBe('(or a (and b c d) (xor e (and f g)) h)');
  });

  it('binds not to the nearest comparison: not a and b is (not a) and b', () => {
    expect(shape(parse('not a and b'))).toBe('(and (not a) b)');
    expect(shape(parse('!a && !!b'))).toBe('(and (not a) (not (not b)))');
  });

  it('flattens chains of one operator into one node', () => {
    expect(shape(parse('a and b and c and d'))).toBe('(and a b c d)');
    expect(shape(parse('a xor b xor c'))).toBe('(xor a b c)');
  });

  it('lets parentheses override precedence', () => {
    expect(shape(parse('(a or b) and c'))).toBe('(and (or a b) c)');
    expect(shape(parse('not (a or b)'))).toBe('(not (or a b))');
  });

  it('accepts CR and LF as whitespace', () => {
    expect(shape(parse('a\r\nand\nb'))).toBe('(and a b)');
  });

  it('keeps the operator spelling apart from its meaning: eq and == are one operator', () => {
    const a = parse('tcp.dstport eq 80');
    const b = parse('tcp.dstport == 80');
    expect(a.kind === 'cmp' && b.kind === 'cmp' && a.op === b.op && a.op === '==').toBe(true);
  });

  it('records spans that cover the comparison in the source', () => {
    const src = '  tcp.dstport in {80 443}  ';
    const e = parse(src);
    expect(src.slice(e.span.start, e.span.end)).toBe('tcp.dstport in {80 443}');
  });

  it('parses function calls with field, string and number arguments', () => {
    const e = parse('bit_slice("udp", 0, 0x10) == 53');
    expect(e.kind).toBe('cmp');
    if (e.kind === 'cmp' && e.lhs.kind === 'call') {
      expect(e.lhs.args.map((a) => a.kind)).toEqual(['string', 'word', 'word']);
    }
  });

  it('requires operators to end at a word boundary (stricter than wirefilter)', () => {
    expect(codeOf('tcp.dstport eq80')).toBe(1019);
    expect(codeOf('tcp.flags.syn andtcp.flags.ack')).toBe(1019);
    try {
      parse('tcp.flags.syn andtcp.flags.ack');
    } catch (err) {
      expect((err as MoatError).hint).toBe('put a space between "and" and "tcp.flags.ack"');
    }
  });

  it('rejects unbalanced parentheses with the position of the open one', () => {
    const src = 'a and (b or c';
    try {
      parse(src);
      expect.unreachable();
    } catch (err) {
      expect((err as MoatError).code).toBe(1013);
      expect((err as MoatError).span).toEqual({ start: 6, end: 7 });
    }
    expect(codeOf('a and b)')).toBe(1012);
  });

  it('stops at the nesting limit instead of recursing without bound', () => {
    expect(codeOf('('.repeat(129) + 'a' + ')'.repeat(129))).toBe(1018);
    expect(shape(parse('('.repeat(128) + 'a' + ')'.repeat(128)))).toBe('a');
    expect(codeOf('not '.repeat(200) + 'a')).toBe(1018);
    expect(() => parse('!'.repeat(100_000) + 'a', { maxLength: 1_000_000, maxDepth: 128 })).toThrow(MoatError);
  });

  it('enforces the length limit, which is configurable', () => {
    const long = 'tcp.dstport == 80 or '.repeat(200) + 'a';
    expect(long.length).toBeGreaterThan(4096);
    expect(codeOf(long)).toBe(1017);
    expect(() => parse(long, { maxLength: 10_000, maxDepth: 128 })).not.toThrow();
  });

  it('reports an empty expression', () => {
    expect(codeOf('')).toBe(1024);
    expect(codeOf(' \n ')).toBe(1024);
  });
});
