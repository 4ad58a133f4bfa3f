// Issue #16 item 3: device files, FIFOs and oversized files given as a
// configuration, rules, managed ruleset, list or GeoIP path are refused
// before anything is read, with the file's coded read error; none crashes or
// hangs. The built CLI runs as a child with a time limit, so a hang fails the
// test instead of stalling it.
import { spawnSync, execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync, ftruncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, ensureBuilt } from '../support/cli.js';
import { validateDaemonConfig } from '../../src/config/index.js';
import { FILE_LIMITS } from '../../src/errors/index.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-hardening-files-'));
const FIFO = join(dir, 'fifo');
const SPARSE_LIST = join(dir, 'huge.txt');
const SPARSE_RULES = join(dir, 'huge.json');
const RULES = join(dir, 'rules.json');
const PCAP = join(ROOT, 'native-fixtures/loop.pcap');

function sparse(path: string, bytes: number): void {
  const fd = openSync(path, 'w');
  ftruncateSync(fd, bytes);
  closeSync(fd);
}

beforeAll(() => {
  ensureBuilt();
  // mkfifo is coreutils: present wherever the tests run; its absence fails here.
  execFileSync('mkfifo', [FIFO]);
  sparse(SPARSE_LIST, 300 * 1024 * 1024);
  sparse(SPARSE_RULES, 17 * 1024 * 1024);
  writeFileSync(RULES, JSON.stringify({ rules: [{ action: 'block', expression: 'ip.src in $office' }] }));
}, 120_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The built CLI with a 20 s limit: a hang is a failure (status null), not a stalled run. */
function run(...argv: string[]): { code: number | null; signal: string | null; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, ...argv], { cwd: ROOT, encoding: 'utf8', timeout: 20_000 });
  return { code: r.status, signal: r.signal, stderr: r.stderr };
}

function config(extra: Record<string, unknown>): string {
  const f = join(dir, `c${Math.random().toString(36).slice(2)}.jsonc`);
  writeFileSync(f, JSON.stringify({ mode: 'monitor', interfaces: ['lo'], rules: { account: RULES }, metrics: { enabled: false }, ...extra }));
  return f;
}

describe('input files that are not regular files, or too large', () => {
  const daemonCases: [string, Record<string, unknown>, RegExp][] = [
    ['a list that is /dev/zero', { lists: { office: '/dev/zero' } }, /error 4002: cannot read list file \/dev\/zero: it is a character device, not a regular file/],
    ['a list that is a FIFO', { lists: { office: FIFO } }, /error 4002: cannot read list file \S+\/fifo: it is a FIFO \(named pipe\), not a regular file/],
    ['a list over 256 MiB (sparse)', { lists: { office: SPARSE_LIST } }, /error 4002: cannot read list file \S+huge\.txt: it is 300 MiB, over the 256 MiB limit for list files \(raise it with limits\.listMiB/],
    ['rules that are /dev/zero', { rules: { account: '/dev/zero' } }, /error 6001: \/dev\/zero: cannot read: it is a character device, not a regular file/],
    ['rules that are a FIFO', { rules: { account: FIFO } }, /error 6001: \S+\/fifo: cannot read: it is a FIFO/],
    ['rules over 16 MiB (sparse)', { rules: { account: SPARSE_RULES } }, /error 6001: \S+huge\.json: cannot read: it is 17 MiB, over the 16 MiB limit for rules files/],
    ['a managed ruleset that is /dev/urandom', { rules: { account: RULES, managed: ['/dev/urandom'] } }, /error 6001: \/dev\/urandom: cannot read: it is a character device/],
    ['a GeoIP database that is /dev/urandom', { geoip: { country: '/dev/urandom' } }, /error 4003: cannot read GeoIP database \/dev\/urandom: it is a character device/],
    ['a GeoIP database that is a FIFO', { geoip: { asn: FIFO } }, /error 4003: cannot read GeoIP database \S+\/fifo: it is a FIFO/],
  ];
  for (const [what, extra, expected] of daemonCases) {
    it(`moat daemon --check refuses ${what} at once, with a coded line`, () => {
      const r = run('daemon', '--config', config(extra), '--check');
      expect(r.signal, r.stderr).toBeNull();
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toMatch(expected);
    });
  }

  it('a configuration that is /dev/zero or a FIFO: 5001', () => {
    for (const [path, why] of [['/dev/zero', 'it is a character device, not a regular file'], [FIFO, 'it is a FIFO (named pipe), not a regular file']] as const) {
      const r = run('daemon', '--config', path, '--check');
      expect(r.signal, r.stderr).toBeNull();
      expect(r.stderr).toContain(`error 5001: ${path}: cannot read: ${why}`);
    }
  });

  it('limits.listMiB raises the list limit: the sparse 300 MiB list is read (and is empty: all NUL bytes fail as an entry, not as a size)', () => {
    const r = run('daemon', '--config', config({ lists: { office: SPARSE_LIST }, limits: { listMiB: 400 } }), '--check');
    expect(r.signal, r.stderr).toBeNull();
    expect(r.stderr).not.toContain('limit');
    // The 300 MiB line of NUL bytes is quoted cut and escaped (item 10), not echoed whole.
    expect(r.stderr).toMatch(/error 4001: \S+huge\.txt:1: invalid IP address "(\\u0000){80}…" \(314572800 characters\)\n$/);
  });

  it('moat replay refuses rules, lists and GeoIP that are devices or FIFOs; moat check and lists load-managed too', () => {
    const cases: [string[], RegExp][] = [
      [['replay', PCAP, '--rules', '/dev/zero'], /error 6001: \/dev\/zero: cannot read: it is a character device/],
      [['replay', PCAP, '--rules', RULES, '--list', `office=${FIFO}`], /error 4002: cannot read list file \S+fifo: it is a FIFO/],
      [['replay', PCAP, '--rules', RULES, '--geoip', '/dev/zero'], /error 4003: cannot read GeoIP database \/dev\/zero: it is a character device/],
      [['check', '--file', '/dev/zero'], /error 5010: \/dev\/zero: cannot read: it is a character device/],
      [['check', '--file', FIFO], /error 5010: \S+fifo: cannot read: it is a FIFO/],
      [['managed', 'import', '--data-dir', dir, '--file', '/dev/urandom'], /error 6001: \/dev\/urandom: it is a character device/],
      [['lists', 'load-managed', '--data-dir', dir, '--name', 'svc.malware', '--file', '/dev/zero'], /error 4002: \/dev\/zero: cannot read: it is a character device/],
    ];
    for (const [argv, expected] of cases) {
      const r = run(...argv);
      expect(r.signal, `${argv.join(' ')}: ${r.stderr}`).toBeNull();
      expect(r.code, argv.join(' ')).not.toBe(0);
      expect(r.stderr, argv.join(' ')).toMatch(expected);
    }
  });

  it('limits are validated and applied by the configuration', () => {
    expect(() => validateDaemonConfig({ mode: 'monitor', interfaces: ['lo'], rules: { account: RULES }, limits: { listMiB: 4096 } })).toThrow(/limits\.listMiB/);
    validateDaemonConfig({ mode: 'monitor', interfaces: ['lo'], rules: { account: RULES }, limits: { geoipMiB: 1024 } });
    expect(FILE_LIMITS.geoip).toBe(1024 * 1024 * 1024);
    validateDaemonConfig({ mode: 'monitor', interfaces: ['lo'], rules: { account: RULES } });
    expect(FILE_LIMITS).toMatchObject({ list: 256 << 20, geoip: 512 << 20, rules: 16 << 20 });
  });
});
