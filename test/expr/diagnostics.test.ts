// Errors render as line:column with the source line and a caret underline.
import { describe, expect, it } from 'vitest';
import { checkExpression, renderError } from '../../src/expr/index.js';
import { TRANSIT_SCHEME } from '../../src/packet/index.js';

function render(src: string): string {
  const r = checkExpression(src, { scheme: TRANSIT_SCHEME });
  expect(r.ok).toBe(false);
  return r.errors.map((e) => renderError(src, e)).join('\n');
}

describe('error rendering', () => {
  it('underlines the offending token under its column', () => {
    expect(render('tcp.dstport in {80, 443}')).toBe(
      [
        '1:19: error 1011: set items are separated by spaces, not commas',
        '  tcp.dstport in {80, 443}',
        '                    ^',
        'hint: write {80 443}, not {80, 443}',
      ].join('\n'),
    );
  });

  it('counts lines and columns in a multi-line expression', () => {
    const out = render('tcp.dstport == 80\nand ip.src == 10.0.0.0/8');
    expect(out.split('\n')[0]).toBe('2:15: error 1010: a CIDR can only be used inside a set');
    expect(out.split('\n')[1]).toBe('  and ip.src == 10.0.0.0/8');
    expect(out.split('\n')[2]).toBe('                ^^^^^^^^^^');
  });

  it('reports every checking error of an expression, not only the first', () => {
    const r = checkExpression('foo == 1 and tcp.dstport == "80" and ip.src in {1.2.3.4/24}', { scheme: TRANSIT_SCHEME });
    expect(r.errors.map((e) => e.code)).toEqual([2001, 2003, 1008]);
  });

  it('suggests the field a Wireshark user meant', () => {
    const r = checkExpression('ipv6.src == ::1', { scheme: TRANSIT_SCHEME });
    expect(r.errors[0]!.hint).toContain('ip.src');
    const s = checkExpression('tcp.dstprot == 80', { scheme: TRANSIT_SCHEME });
    expect(s.errors[0]!.hint).toBe('did you mean tcp.dstport?');
  });

  it('keeps the caret in place when the line holds control characters', () => {
    const out = render('tcp.dstport == \u0001');
    expect(out.split('\n')[2]).toBe('                 ^');
  });
});
