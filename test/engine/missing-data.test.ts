// missingData names every enabled rule that reads a country, an AS number or a
// list the bundle was not given; BundleLoader warns or, on request, rejects.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BundleError, loadBundle } from '../../src/engine/index.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-missing-'));
const rules = (list: unknown[]) => {
  const f = join(dir, `r${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(f, JSON.stringify({ rules: list }));
  return f;
};

describe('missing data', () => {
  it('names enabled rules only, through aliases and deprecated fields', () => {
    const f = rules([
      { action: 'block', expression: 'ip.geoip.country == "CN"' },
      { action: 'block', expression: 'ip.src.asnum == 1', enabled: false },
      { id: 'bots', action: 'block', expression: 'ip.dst in $cf.botnetcc' },
      { action: 'block', expression: 'tcp.dstport == 22' },
    ]);
    const b = loadBundle({ rules: [f] });
    expect(b.missing.map((e) => [e.code, e.message.replace(/: reads .*/, '')])).toEqual([
      [5011, 'account ruleset, rule 0'],
      [5011, 'account ruleset, rule 2 (bots)'],
    ]);
    expect(b.missing[0]!.message).toContain('reads ip.geoip.country but no GeoIP country database');
    expect(b.missing[1]!.message).toContain('reads $svc.botnetcc but that list is not given');
    // Given the list: only the country rule remains.
    writeFileSync(join(dir, 'bots.txt'), '192.0.2.0/24\n');
    expect(loadBundle({ rules: [f], lists: [{ name: 'cf.botnetcc', file: join(dir, 'bots.txt') }] }).missing.length).toBe(1);
  });

  it('rejects the bundle with missingData: "error", listing every rule', () => {
    const f = rules([{ action: 'block', expression: 'ip.src.country == "CN"' }, { action: 'block', expression: 'ip.src in $svc.malware' }]);
    let err: unknown;
    try {
      loadBundle({ rules: [f], missingData: 'error' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(BundleError);
    expect((err as BundleError).errors.map((e) => e.code)).toEqual([5011, 5011]);
  });
});
