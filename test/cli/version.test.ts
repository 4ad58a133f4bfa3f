// `moat --version` and `-V` print package.json's version, in process, from the
// built binary, and through the link `npm link` puts on the PATH (the README's
// way of getting `moat` there), linked here into a scratch npm prefix.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, moat, moatBinary, ROOT } from '../support/cli.js';
import { peerTool } from '../support/tools.js';

const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const dirs: string[] = [];

beforeAll(() => ensureBuilt(), 120_000);
afterAll(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('moat --version', () => {
  it('prints the version with --version and -V, and exits 0', async () => {
    expect(version).toMatch(/^\d+\.\d+\.\d+/);
    for (const flag of ['--version', '-V']) {
      const r = await moat(flag);
      expect(r.code).toBe(0);
      expect(r.stdout).toBe(version);
    }
  });

  it('the built binary prints it too, and --help names the flag', () => {
    const r = moatBinary(['--version']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(version);
    expect(moatBinary(['--help']).stdout).toMatch(/-V, --version\s+print the version/);
  });

  const npm = peerTool('npm');
  it.skipIf(npm === undefined)('npm link puts a working moat on the PATH', () => {
    const prefix = mkdtempSync(join(tmpdir(), 'moat-link-'));
    dirs.push(prefix);
    const env = { ...process.env, npm_config_prefix: prefix, npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' };
    const link = spawnSync(npm!, ['link'], { cwd: ROOT, env, encoding: 'utf8', timeout: 120_000 });
    expect(link.status, link.stderr).toBe(0);
    const bin = join(prefix, 'bin', 'moat');
    expect(existsSync(bin)).toBe(true);
    const r = spawnSync(bin, ['--version'], { env: { ...process.env, PATH: `${join(prefix, 'bin')}:${process.env.PATH ?? ''}` }, encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(version);
  }, 150_000);
});
