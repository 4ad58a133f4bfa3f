// The error registry is consistent: codes unique and in their domain's range,
// and every code documented in the README's table (and nothing more).
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERRORS, MoatError } from '../src/errors/index.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const table = readme.slice(readme.indexOf('## Error codes'));
const documented = [...table.matchAll(/^\| (\d{4,5}) \|/gm)].map((m) => Number(m[1]));

describe('the error registry', () => {
  const codes = Object.values(ERRORS).map((d) => d.code);

  it('gives every error a distinct code', () => {
    expect(new Set(codes).size).toBe(codes.length);
  });

  it('keeps expression syntax errors in 1xxx and name and type errors in 2xxx', () => {
    for (const [name, d] of Object.entries(ERRORS)) {
      expect(d.code, name).toBeGreaterThanOrEqual(1000);
      if (name.startsWith('EXPR_')) expect([1, 2], name).toContain(Math.floor(d.code / 1000));
    }
  });

  it('documents every code in the README table, and no code that does not exist', () => {
    expect(documented.length).toBeGreaterThan(0);
    expect([...documented].sort()).toEqual([...codes].sort());
  });

  it('carries the registry code, status and location on a MoatError', () => {
    const e = new MoatError('EXPR_COMMA_IN_SET', 'm', { span: { start: 1, end: 2 }, hint: 'h' });
    expect([e.code, e.status, e.span, e.hint, e.message]).toEqual([1011, 400, { start: 1, end: 2 }, 'h', 'm']);
  });
});
