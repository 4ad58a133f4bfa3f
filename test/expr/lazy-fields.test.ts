// Lazy fields (FieldDef.lazy, ExecutionContext.pending): generated code asks
// the context's resolver for a pending group right before it reads one of its
// fields, once, and never when a cheaper test has already decided; the values
// it then reads are the resolver's. Without anything pending, nothing is asked.

import { describe, expect, it } from 'vitest';
import { check, compileGenerated, ConstantPool, DEFAULT_LIMITS, generate, parse, SchemeBuilder, shortBytesKey, type ExecutionContext } from '../../src/expr/index.js';

const S = new SchemeBuilder()
  .field('port', 'int')
  .field('geo.asn', 'int', { lazy: 'geo' })
  .field('geo.cc', 'bytes', { key: { field: 'geo.cc.key', of: shortBytesKey }, lazy: 'geo' })
  .field('other.asn', 'int', { lazy: 'other' })
  .field('geo.cc.key', 'int', { hidden: true, lazy: 'geo' })
  .build();
const GEO = S.lazyGroups.indexOf('geo');
const OTHER = S.lazyGroups.indexOf('other');
const slot = (name: string) => S.field(name).slot;

/** A context whose groups are all pending, and a resolver that counts and fills: ASN 64500, country "CN". */
function pendingContext(port: number): { ctx: ExecutionContext; asked: number[] } {
  const ctx = S.newContext();
  const asked: number[] = [];
  ctx.ints[slot('port')] = port;
  ctx.pending.fill(1);
  ctx.resolver = {
    resolve(group: number) {
      asked.push(group);
      if (group === GEO) {
        ctx.ints[slot('geo.asn')] = 64500;
        ctx.setString(slot('geo.cc'), 'CN');
      } else {
        ctx.ints[slot('other.asn')] = 7;
      }
      ctx.pending[group] = 0;
    },
  };
  return { ctx, asked };
}

function compile(expression: string) {
  const r = check(parse(expression, DEFAULT_LIMITS), S, {});
  expect(r.errors).toEqual([]);
  return compileGenerated(r.tree!, undefined);
}

describe('lazy fields in generated code', () => {
  it('numbers the groups in order of first use', () => {
    expect(S.lazyGroups).toEqual(['geo', 'other']);
    expect(S.field('port').lazy).toBe(-1);
    expect(S.field('geo.cc.key').lazy).toBe(GEO);
  });

  it.each([
    ['geo.asn == 64500', true, [GEO]],
    ['geo.asn != 64500', false, [GEO]],
    ['geo.asn in {1..100 64500}', true, [GEO]],
    ['geo.cc == "CN"', true, [GEO]],
    ['geo.cc in {"RU" "CN"}', true, [GEO]],
    ['geo.cc contains "N"', true, [GEO]],
    ['geo.cc matches "^C"', true, [GEO]],
    ['geo.asn == 64500 and geo.cc == "CN"', true, [GEO]],
    ['geo.asn == 64500 and other.asn == 7', true, [GEO, OTHER]],
  ])('%s resolves its group before reading it, once', (expression, expected, groups) => {
    const f = compile(expression);
    const { ctx, asked } = pendingContext(1);
    expect(f(ctx)).toBe(expected);
    expect(asked).toEqual(groups);
    // Resolved: a second evaluation asks nothing more.
    expect(f(ctx)).toBe(expected);
    expect(asked).toEqual(groups);
  });

  it('tests the other operands first, and asks nothing when they decide', () => {
    for (const e of ['geo.asn == 64500 and port == 22', 'port == 22 and geo.cc == "CN"', 'not (port != 22 or geo.asn == 1)']) {
      const f = compile(e);
      const miss = pendingContext(80);
      expect(f(miss.ctx), e).toBe(false);
      expect(miss.asked, e).toEqual([]);
      const hit = pendingContext(22);
      expect(f(hit.ctx), e).toBe(true);
      expect(hit.asked, e).toEqual([GEO]);
    }
  });

  it('records the literals a lazy group is compared with, or that it is read otherwise', () => {
    const reads = (expression: string) => {
      const r = check(parse(expression, DEFAULT_LIMITS), S, {});
      const pool = new ConstantPool();
      generate(r.tree!, pool, undefined);
      return pool.lazyValues;
    };
    const key = (cc: string) => shortBytesKey(Buffer.from(cc), 0, cc.length);
    expect(reads('geo.asn == 5 or geo.asn in {7..9 20}')).toEqual(new Map([[GEO, new Map([[slot('geo.asn'), [5, 5, 7, 9, 20, 20]]])]]));
    expect(reads('not geo.cc in {"CN" "RU"} and port == 3')).toEqual(new Map([[GEO, new Map([[slot('geo.cc.key'), [key('CN'), key('CN'), key('RU'), key('RU')]]])]]));
    expect(reads('geo.asn == 5 and other.asn == 7').get(OTHER)).toEqual(new Map([[slot('other.asn'), [7, 7]]]));
    for (const other of ['geo.asn != 5', 'geo.asn > 5', 'geo.cc contains "N"', 'geo.cc == "LONGCODE"', 'geo.cc != "CN"', 'geo.cc < "M"']) {
      expect(reads(`geo.asn == 1 or ${other}`).get(GEO), other).toBeNull();
    }
    expect(reads('port == 1').size).toBe(0);
  });

  it('asks nothing when nothing is pending', () => {
    const f = compile('geo.asn == 64500 or other.asn == 7');
    const ctx = S.newContext();
    ctx.ints[slot('geo.asn')] = 64500;
    let asked = 0;
    ctx.resolver = { resolve: () => void asked++ };
    expect(f(ctx)).toBe(true);
    expect(asked).toBe(0);
  });
});
