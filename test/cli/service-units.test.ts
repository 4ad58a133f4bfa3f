// The systemd units in config/ (moat-daemon.service, moat-serve.service): they
// pass `systemd-analyze verify` with no warning, their ExecStart runs the built
// CLI directly with node (no npm or npx wrapper, which would not forward
// SIGTERM) with options the command has, and the control plane's unit,
// started as written (with /opt/moat as this checkout and /var/lib/moat as a
// scratch directory), serves and stops cleanly on the SIGTERM systemd sends.
// Also: `moat serve --help` names MOAT_DATA_DIR and shows its value.
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, moatBinary, ROOT } from '../support/cli.js';
import { peerTool } from '../support/tools.js';

const CONFIG = join(ROOT, 'config');
const units = readdirSync(CONFIG).filter((f) => f.endsWith('.service')).sort();
const dirs: string[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'moat-unit-'));
  dirs.push(d);
  return d;
}

/** The [Service] section's keys (the last value of each). */
function serviceKeys(unit: string): Map<string, string> {
  const keys = new Map<string, string>();
  let section = '';
  for (const raw of readFileSync(join(CONFIG, unit), 'utf8').split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const s = /^\[(.+)\]$/.exec(line);
    if (s !== null) section = s[1]!;
    else if (section === 'Service') keys.set(line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1));
  }
  return keys;
}

beforeAll(() => ensureBuilt(), 120_000);
afterAll(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('systemd units', () => {
  it('there is one for the daemon and one for the control plane', () => {
    expect(units).toEqual(['moat-daemon.service', 'moat-serve.service']);
  });

  const analyze = peerTool('systemd-analyze');
  it.skipIf(analyze === undefined).each(units)('%s passes systemd-analyze verify without a warning', (unit) => {
    // A copy: verify reads the unit by its file name, and warnings name it.
    const dir = tempDir();
    copyFileSync(join(CONFIG, unit), join(dir, unit));
    const r = spawnSync(analyze!, ['verify', join(dir, unit)], { encoding: 'utf8', timeout: 60_000 });
    const about = r.stderr.split('\n').filter((l) => l.includes(unit));
    expect(about, r.stderr).toEqual([]);
    expect(r.status, r.stderr).toBe(0);
  });

  it.each(units)('%s runs the built CLI with node, with options the command has', (unit) => {
    const exec = serviceKeys(unit).get('ExecStart')!.split(/\s+/);
    expect(exec[0]).toBe('/usr/bin/node');
    expect(exec[1]).toMatch(/^\/opt\/moat\/dist\/src\/cli\/main\.js$/);
    expect(existsSync(join(ROOT, exec[1]!.slice('/opt/moat/'.length)))).toBe(true);
    const command = exec[2]!;
    const help = moatBinary([command, '--help']);
    expect(help.code, help.stderr).toBe(0);
    for (const opt of exec.slice(3).filter((w) => w.startsWith('--'))) expect(help.stdout).toContain(opt);
  });

  it('moat-serve.service\'s command serves, and stops on SIGTERM with status 0', async () => {
    const keys = serviceKeys('moat-serve.service');
    expect(keys.get('KillSignal')).toBe('SIGTERM');
    const state = tempDir();
    const argv = keys.get('ExecStart')!.split(/\s+/).slice(1)
      .map((w) => w.replace('/opt/moat/', ROOT).replace('/var/lib/moat', state).replace(/^127\.0\.0\.1:\d+$/, '127.0.0.1:0'));
    const child = spawn(process.execPath, argv, { cwd: tempDir(), stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`did not start: ${out}`)), 15_000);
        child.stdout.on('data', () => {
          const m = /listening on (http:\/\/\S+)/.exec(out);
          if (m !== null && out.includes('try: curl')) {
            clearTimeout(timer);
            resolve(m[1]!);
          }
        });
        void exited.then((code) => reject(new Error(`exited with ${code}: ${out}`)));
      });
      expect(out).toContain(join(state, 'moat.db'));
      const res = await fetch(`${url}/accounts`);
      expect(res.headers.get('content-type')).toMatch(/application\/json/);
      child.kill('SIGTERM');
      const timeout = Number(/^(\d+)s$/.exec(keys.get('TimeoutStopSec')!)![1]) * 1000;
      const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), timeout))]);
      expect(code, out).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
});

describe('moat serve --help', () => {
  it('names MOAT_DATA_DIR and shows the directory it gives', () => {
    expect(moatBinary(['serve', '--help']).stdout).toMatch(/MOAT_DATA_DIR/);
    const r = spawnSync(process.execPath, [join(ROOT, 'dist/src/cli/main.js'), 'serve', '--help'], { env: { ...process.env, MOAT_DATA_DIR: '/srv/moat-state' }, encoding: 'utf8' });
    expect(r.stdout.replace(/\s+/g, ' ')).toContain('"/srv/moat-state"');
  });
});
