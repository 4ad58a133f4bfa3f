// A rule that reads GeoIP data or a list the daemon's configuration does not
// give is named in a warning log line (code 5011) at start and at every
// reload; with "missingData": "error" such a bundle does not start, and a
// reload to one is rejected while the running bundle stays.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { validateDaemonConfig } from '../../src/config/index.js';
import { Daemon } from '../../src/daemon/index.js';
import { BundleError } from '../../src/engine/index.js';
import { MemorySource } from '../support/memory-source.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-missing-data-'));
const ACCOUNT = join(dir, 'account.json');
const write = (expression: string) => writeFileSync(ACCOUNT, JSON.stringify({ rules: [{ id: 'r0', action: 'block', expression }] }));

function daemon(missingData: 'warn' | 'error') {
  const logs: Array<{ level: number; msg: string; code?: number; reason?: string }> = [];
  const log = pino({ level: 'info' }, { write: (s: string) => logs.push(JSON.parse(s)) });
  const config = validateDaemonConfig({ mode: 'monitor', interfaces: ['x0'], rules: { account: ACCOUNT }, metrics: { enabled: false }, watch: false, missingData }, join(dir, 'd.jsonc'));
  return { d: new Daemon(config, log, (iface) => new MemorySource(iface)), logs };
}

describe('rules that read data the daemon is not given', () => {
  it('are named in a warning at start and at every reload', async () => {
    write('ip.src.country == "CN"');
    const { d, logs } = daemon('warn');
    await d.start();
    const warnings = () => logs.filter((l) => l.level === 40 && l.code === 5011);
    expect(warnings().map((w) => [w.reason, w.msg])).toEqual([
      ['start', 'account ruleset, rule 0 (r0): reads ip.src.country but no GeoIP country database is given (geoip.country; replay: --geoip): the rule never matches as written'],
    ]);
    write('ip.dst.asnum == 64496');
    expect((await d.reload('SIGHUP')).applied).toBe(true);
    expect(warnings().map((w) => w.reason)).toEqual(['start', 'SIGHUP']);
    expect(warnings()[1]!.msg).toMatch(/reads ip\.dst\.asnum but no GeoIP ASN database/);
    write('tcp.dstport == 22');
    expect((await d.reload('SIGHUP')).applied).toBe(true);
    expect(warnings().length).toBe(2);
    await d.stop();
  });

  it('with "missingData": "error", stop the start and are rejected on a reload', async () => {
    write('ip.src in $svc.malware');
    const first = daemon('error');
    await expect(first.d.start()).rejects.toBeInstanceOf(BundleError);
    await first.d.stop();
    write('tcp.dstport == 22');
    const { d, logs } = daemon('error');
    await d.start();
    write('ip.src in $svc.malware');
    expect((await d.reload('SIGHUP')).applied).toBe(false);
    expect(d.reloadFailures).toBe(1);
    const rejected = logs.find((l) => l.msg.startsWith('reload rejected')) as unknown as { errors: Array<{ code: number; message: string }> };
    expect(rejected.errors).toMatchObject([{ code: 5011, message: expect.stringContaining('reads $svc.malware but that list is not given') as unknown }]);
    await d.stop();
  });
});
