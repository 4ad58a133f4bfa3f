// `moat daemon --check` checks what a start checks, without capturing: the
// configuration and its rules (errors name the file and the key or the rule),
// the interfaces, the capture capability, the metrics address and the drop
// capture path; and it warns (or with --strict, fails) on rules that read data
// the configuration does not give.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateDaemonConfig } from '../../src/config/index.js';
import { BundleCache, effectiveCapabilities, preflight } from '../../src/daemon/index.js';
import { BIN, ensureBuilt, moat, ROOT } from '../support/cli.js';
import { createNamespace, destroyAll, exec, ip, requireRoot } from '../support/netns.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-daemon-cli-'));
const RUN_NS = requireRoot();
const COUNTRY_DB = join(ROOT, 'native-fixtures/geoip/test-country.mmdb');

// A configuration on the loopback interface (present everywhere), no metrics: the host checks pass.
function config(extra: Record<string, unknown> = {}, rules: unknown[] = [{ action: 'block', expression: 'tcp.dstport == 22' }]): string {
  writeFileSync(join(dir, 'rules.json'), JSON.stringify({ rules }));
  const f = join(dir, `c${Math.random().toString(36).slice(2)}.jsonc`);
  writeFileSync(f, JSON.stringify({ mode: 'monitor', interfaces: ['lo'], rules: { account: 'rules.json' }, metrics: { enabled: false }, ...extra }));
  return f;
}

describe('moat daemon --check', () => {
  beforeAll(() => ensureBuilt(), 120_000);
  afterAll(() => destroyAll());

  it.runIf(RUN_NS)('accepts the example configuration where its interfaces exist, and says what the rules read', async () => {
    const ns = await createNamespace();
    await ip(['-n', ns, 'link', 'add', 'ga', 'type', 'veth', 'peer', 'name', 'gb']);
    const r = await exec(ns, process.execPath, [BIN, 'daemon', '--config', join(ROOT, 'config/daemon.example.jsonc'), '--check'], { check: false });
    // The example's country rule reads ip.src.country and the example gives no database (commented out): said, not silent.
    // So does its botnet rule, whose list file is commented out.
    expect(r.stderr.split('\n').map((l) => l.replace(/ \(.*$/, ''))).toEqual(['moat: warning 5011: account ruleset, rule 2', 'moat: warning 5011: account ruleset, rule 3', '']);
    expect(r.stderr).toContain('reads ip.src.country but no GeoIP country database is given');
    expect(r.stderr).toContain('reads $svc.botnetcc but that list is not given');
    expect(r.code).toBe(0);
    // A veth has one RX queue: one packet worker by default.
    expect(r.stdout).toBe('OK: inline on ga (outside), gb (inside), judging frames from outside; capture engine ring, 1 packet worker; 4 rules, fields: ip.src ip.src.country tcp.dstport\n');
  });

  it('says the capture engine and packet workers a start would use, and refuses a filter with the ring engine (5002 naming the key)', async () => {
    const two = await moat('daemon', '--config', config({ capture: { engine: 'ring', workers: 2 } }), '--check');
    expect([two.code, two.stderr, two.stdout]).toEqual([0, '', 'OK: monitor on lo; capture engine ring, 2 packet workers; 1 rules, fields: tcp.dstport']);
    const filtered = await moat('daemon', '--config', config({ capture: { filter: 'tcp' } }), '--check');
    expect([filtered.code, filtered.stdout]).toEqual([0, 'OK: monitor on lo; capture engine libpcap; 1 rules, fields: tcp.dstport']);
    const bad = await moat('daemon', '--config', config({ capture: { engine: 'ring', filter: 'tcp' } }), '--check');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^moat: error 5002: .*capture\.engine: the ring engine takes no BPF filter/);
  });

  it('fails with code 3009 for an interface that does not exist, naming it', async () => {
    const r = await moat('daemon', '--config', config({ interfaces: ['lo', 'nosuch0'] }), '--check');
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^moat: error 3009: interfaces: no such network interface "nosuch0" in this network namespace \(there are: .*\blo\b/);
    // A start checks the same, before any capture is opened.
    const start = await moat('daemon', '--config', config({ interfaces: ['nosuch0'] }));
    expect([start.code, start.stderr.split('\n')[0]!.slice(0, 23)]).toEqual([1, 'moat: error 3009: inter']);
  });

  it('fails with 5012 for a metrics address in use and an unwritable drop capture path', async () => {
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
    const port = (busy.address() as AddressInfo).port;
    try {
      const r = await moat('daemon', '--config', config({ metrics: { listen: `127.0.0.1:${port}` }, dropCapture: { path: join(dir, 'no/such/dir/drops.pcap') } }), '--check');
      expect(r.code).toBe(1);
      expect(r.stderr.split('\n')).toEqual([
        `moat: error 5012: metrics.listen 127.0.0.1:${port}: cannot listen: address already in use`,
        `moat: error 5012: dropCapture.path ${join(dir, 'no/such/dir/drops.pcap')}: cannot write: no such directory ${join(dir, 'no/such/dir')}`,
      ]);
    } finally {
      busy.close();
    }
  });

  it('fails with 3010 without CAP_NET_RAW (the capability set as /proc/self/status gives it)', async () => {
    expect(typeof effectiveCapabilities()).toBe('bigint');
    const c = validateDaemonConfig({ mode: 'monitor', interfaces: ['lo'], rules: { account: 'x.json' }, metrics: { enabled: false } });
    expect(await preflight(c, { capabilities: 1n << 12n })).toMatchObject([{ code: 3010, message: expect.stringMatching(/lacks CAP_NET_RAW: /) as unknown }]);
    expect(await preflight(c, { capabilities: 0n })).toMatchObject([{ code: 3010, message: expect.stringMatching(/lacks CAP_NET_RAW and CAP_NET_ADMIN/) as unknown }]);
    expect(await preflight(c, { capabilities: (1n << 13n) | (1n << 12n) })).toEqual([]);
  });

  it('refuses a drop capture path that is not a regular file (rotation would rename or remove /dev/null; a FIFO would block the start) with 5012', async () => {
    const fifo = join(dir, 'drops.fifo');
    execFileSync('mkfifo', [fifo]);
    const loop = join(dir, 'drops.loop');
    symlinkSync(loop, loop);
    const cases: [string, string][] = [
      ['/dev/null', 'it is a character device, not a regular file'],
      [fifo, 'it is a FIFO (named pipe), not a regular file'],
      [dir, 'it is a directory'],
      [loop, 'too many levels of symbolic links'],
    ];
    for (const [path, why] of cases) {
      const c = validateDaemonConfig({ mode: 'monitor', interfaces: ['lo'], rules: { account: 'x.json' }, metrics: { enabled: false }, dropCapture: { path } });
      expect(await preflight(c, { capabilities: (1n << 13n) | (1n << 12n) }), path).toMatchObject([{ code: 5012, message: `dropCapture.path ${path}: cannot write: ${why}` }]);
    }
    // A regular file, or none yet in a writable directory, is fine.
    writeFileSync(join(dir, 'drops.pcap'), '');
    for (const path of [join(dir, 'drops.pcap'), join(dir, 'new-drops.pcap')]) {
      const c = validateDaemonConfig({ mode: 'monitor', interfaces: ['lo'], rules: { account: 'x.json' }, metrics: { enabled: false }, dropCapture: { path } });
      expect(await preflight(c, { capabilities: (1n << 13n) | (1n << 12n) }), path).toEqual([]);
    }
  });

  it('names ten missing interfaces a line each and counts the rest in one more line (100,000 missing are 11 lines)', async () => {
    const names = Array.from({ length: 100_000 }, (_, i) => `nosuch${i}`);
    const c = validateDaemonConfig({ mode: 'monitor', interfaces: ['lo', ...names], rules: { account: 'x.json' }, metrics: { enabled: false } });
    const errors = await preflight(c, { capabilities: (1n << 13n) | (1n << 12n) });
    expect(errors).toHaveLength(11);
    expect(errors.every((e) => e.code === 3009)).toBe(true);
    expect(errors[9]!.message).toMatch(/^interfaces: no such network interface "nosuch9" in this network namespace \(there are: .*\blo\b/);
    expect(errors[10]!.message).toBe('interfaces: and 99990 more interfaces that do not exist in this network namespace');
    // A name is quoted escaped: control characters never reach the terminal raw.
    const odd = validateDaemonConfig({ mode: 'monitor', interfaces: ['\u001b[2J\u0007'], rules: { account: 'x.json' }, metrics: { enabled: false } });
    expect((await preflight(odd, { capabilities: (1n << 13n) | (1n << 12n) }))[0]!.message).toMatch(/^interfaces: no such network interface "\\u001b\[2J\\u0007" in this network namespace/);
  });

  it('names the key of a bad configuration value and exits 1', async () => {
    const f = join(dir, 'bad.jsonc');
    writeFileSync(f, '{ "mode": "inline", "interfaces": ["a", "b"], "rules": { "account": "x.json" }, "capture": { "ringBytes": 10 } }');
    const r = await moat('daemon', '--config', f, '--check');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^moat: error 5002: ${f}: capture\\.ringBytes: `));
  });

  it('names the rule of a ruleset that does not compile', async () => {
    const f = config({}, [{ action: 'block', expression: 'tcp.dstport == 22' }, { action: 'block', expression: 'ip.src == 10.0.0.0/8' }]);
    const r = await moat('daemon', '--config', f, '--check');
    expect(r.code).toBe(1);
    // The file, line and column where the error is in the rules file (#16 item 10).
    expect(r.stderr).toBe(`moat: error 1010: ${join(dir, 'rules.json')}:1:105: account ruleset, rule 1: a CIDR can only be used inside a set (hint: write "in {10.0.0.0/8}")`);
  });

  it('warns about a country rule without a GeoIP database and a list that is not given; --strict and "missingData": "error" make them errors', async () => {
    const rules = [
      { id: 'block-cn', action: 'block', expression: 'ip.src.country == "CN"', description: 'no China' },
      { id: 'block-asn', action: 'block', expression: 'ip.dst.asnum == 64496 or ip.src in $svc.malware' },
      { action: 'block', expression: 'tcp.dstport == 22' },
    ];
    const warnings = [
      'moat: warning 5011: account ruleset, rule 0 (block-cn "no China"): reads ip.src.country but no GeoIP country database is given (geoip.country; replay: --geoip): the rule never matches as written',
      'moat: warning 5011: account ruleset, rule 1 (block-asn): reads ip.dst.asnum but no GeoIP ASN database is given (geoip.asn; replay: --asn); and $svc.malware but that list is not given (lists; replay: --list NAME=FILE): the rule never matches as written',
    ];
    const f = config({}, rules);
    const warn = await moat('daemon', '--config', f, '--check');
    expect(warn.code).toBe(0);
    expect(warn.stderr.split('\n')).toEqual(warnings);
    expect(warn.stdout).toMatch(/^OK: monitor on lo; capture engine ring, 1 packet worker; 3 rules/);
    const errors = warnings.map((w) => w.replace('warning 5011', 'error 5011'));
    for (const r of [await moat('daemon', '--config', f, '--check', '--strict'), await moat('daemon', '--config', config({ missingData: 'error' }, rules), '--check')]) {
      expect(r.code).toBe(1);
      expect(r.stderr.split('\n')).toEqual(errors);
      expect(r.stdout).toBe('');
    }
    // Given the database, the country rule is fine; the other still warns.
    const some = await moat('daemon', '--config', config({ geoip: { country: COUNTRY_DB } }, rules), '--check');
    expect(some.stderr.split('\n').map((l) => l.slice(0, 60))).toEqual([warnings[1]!.slice(0, 60)]);
  });
});

describe('moat daemon --check with a control plane', () => {
  beforeAll(() => ensureBuilt(), 120_000);
  const channel = (cp: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
    const f = join(dir, `cp${Math.random().toString(36).slice(2)}.jsonc`);
    writeFileSync(f, JSON.stringify({ mode: 'monitor', interfaces: ['lo'], controlPlane: { url: 'ws://127.0.0.1:9', stateDir: join(dir, 'cp-state'), ...cp }, metrics: { enabled: false }, ...extra }));
    return f;
  };

  it('checks the token file and the state directory, and says that nothing is cached yet', async () => {
    writeFileSync(join(dir, 'gw1.token'), 'moatd_check\n', { mode: 0o600 });
    const r = await moat('daemon', '--config', channel({ tokenFile: join(dir, 'gw1.token') }), '--check');
    expect([r.code, r.stderr, r.stdout]).toEqual([0, '', 'OK: monitor on lo; capture engine ring, 1 packet worker; control plane ws://127.0.0.1:9, no cached bundle yet; 0 rules, fields: (none)']);
  });

  it('names every control plane URL of a list (replicas tried in turn)', async () => {
    const r = await moat('daemon', '--config', channel({ token: 'moatd_x', url: ['ws://127.0.0.1:9', 'ws://127.0.0.2:9'], stateDir: join(dir, 'cp-state-list') }), '--check');
    expect([r.code, r.stderr, r.stdout]).toEqual([0, '', 'OK: monitor on lo; capture engine ring, 1 packet worker; control plane ws://127.0.0.1:9 or ws://127.0.0.2:9, no cached bundle yet; 0 rules, fields: (none)']);
  });

  it('compiles the cached bundle and names it', async () => {
    const state = join(dir, 'cached-state');
    const cache = new BundleCache(state);
    cache.open();
    const digest = 'c'.repeat(64);
    const b = await cache.writeBundle({ type: 'bundle', seq: 1, digest, account: { version: '3', rules: [{ action: 'block', expression: 'tcp.dstport == 22' }, { action: 'block', expression: 'udp.dstport == 53' }] }, zone: null, managed: [], lists: {} });
    await cache.persist(b);
    await cache.makeCurrent(digest);
    const r = await moat('daemon', '--config', channel({ token: 'moatd_x', stateDir: state }), '--check');
    expect([r.code, r.stderr, r.stdout]).toEqual([0, '', `OK: monitor on lo; capture engine ring, 1 packet worker; control plane ws://127.0.0.1:9, cached bundle ${digest}: 2 rules, fields: tcp.dstport udp.dstport`]);
  });

  it('fails with 5001 naming a token file that cannot be read', async () => {
    const r = await moat('daemon', '--config', channel({ tokenFile: join(dir, 'missing.token') }), '--check');
    expect([r.code, r.stderr]).toEqual([1, `moat: error 5001: controlPlane.tokenFile ${join(dir, 'missing.token')}: cannot read: no such file`]);
  });

  it('fails with 5002 naming both keys when rules are given beside controlPlane', async () => {
    const f = channel({ token: 'moatd_x' }, { rules: { account: 'rules.json' } });
    const r = await moat('daemon', '--config', f, '--check');
    expect([r.code, r.stderr]).toEqual([1, `moat: error 5002: ${f}: controlPlane and rules: give one or the other: with controlPlane, rules and lists come from the control plane`]);
  });
});
