// The README's quick start installs exactly as CI does: its first command and
// .ci/run both call .ci/install, and nothing else installs packages. The
// script's decisions about Node.js are checked with fake node, npm, apt-cache
// and dpkg-query on a PATH of their own (its --plan prints the commands instead
// of running them): Debian 12 with and without its Node 18, Debian 13, a
// NodeSource node (which ships npm: Debian's npm is never added beside it).
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { moat, ROOT } from './support/cli.js';
import { peerTool } from './support/tools.js';

const bash = peerTool('bash');
const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const ciRun = readFileSync(join(ROOT, '.ci/run'), 'utf8');

/** The shell commands of the first ```sh block after a heading, comments dropped. */
function shBlock(heading: string): string {
  const at = readme.indexOf(heading);
  expect(at, `README has "${heading}"`).toBeGreaterThan(0);
  const m = /```sh\n([\s\S]*?)```/.exec(readme.slice(at));
  return m![1]!.split('\n').filter((l) => !/^\s*#/.test(l)).join('\n');
}

/** The commands of a shell script, comments dropped. */
function commands(script: string): string[] {
  return script.split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
}

describe('the quick start and CI install alike', () => {
  it('the README\'s first command and .ci/run both call .ci/install, and nothing else installs', () => {
    const first = shBlock('## Quick start');
    expect(first.trim().split(/\s*&&\s*/)[0]).toBe('.ci/install');
    expect(first).not.toMatch(/apt-get|npm (ci|install)/);
    const ci = commands(ciRun);
    expect(ci).toContain('.ci/install');
    expect(ci.join('\n')).not.toMatch(/apt-get|npm (ci|install)/);
    // .ci/install runs before anything that needs what it installs.
    expect(ci.indexOf('.ci/install')).toBeLessThan(ci.findIndex((c) => c.startsWith('npm ')));
  });

  it('moat-data/ (the default data directory, in the checkout) is ignored by git', () => {
    expect(commands(readFileSync(join(ROOT, '.gitignore'), 'utf8'))).toContain('moat-data/');
    const git = peerTool('git');
    if (git === undefined) return;
    const r = spawnSync(git, ['check-ignore', '-q', '--no-index', 'moat-data/moat.db'], { cwd: ROOT });
    expect(r.status).toBe(0);
  });
});

/** The command names in a commander help text's Commands section. */
function helpCommands(help: string): string[] {
  const at = help.indexOf('Commands:');
  if (at < 0) return [];
  return [...help.slice(at).matchAll(/^ {2}([a-z][a-z-]*)/gm)].map((m) => m[1]!);
}

describe('the README is about what exists', () => {
  it('every `moat COMMAND [SUBCOMMAND]` it names is a command of moat', async () => {
    const top = helpCommands((await moat('--help')).stdout);
    expect(top).toEqual(expect.arrayContaining(['check', 'replay', 'daemon', 'serve', 'users']));
    const named = new Set([...readme.matchAll(/`[^`\n]*?\bmoat ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?/g)].map((m) => [m[1]!, m[2]].join(' ').trim()));
    for (const line of readme.split('\n').filter((l) => /^\s*moat [a-z]/.test(l))) {
      const m = /moat ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?/.exec(line)!;
      named.add([m[1]!, m[2]].join(' ').trim());
    }
    expect(named.size).toBeGreaterThan(5);
    for (const name of named) {
      const [command, sub] = name.split(' ');
      expect(top, `README names moat ${command}`).toContain(command);
      const subs = helpCommands((await moat(command!, '--help')).stdout);
      if (subs.length > 0 && sub !== undefined) expect(subs, `README names moat ${name}`).toContain(sub);
    }
  });

  it('its opening presents pools, monitors, notifications and the migration command as built', () => {
    const opening = readme.slice(0, readme.indexOf('## Quick start'));
    const notYet = opening.indexOf('Not built yet');
    expect(notYet).toBeGreaterThan(0);
    expect(opening.slice(notYet)).not.toMatch(/migrate-notifications/);
    const at = opening.indexOf('`moat migrate-notifications`');
    expect(at).toBeGreaterThan(0);
    expect(at, '"moat migrate-notifications" in the opening before "Not built yet"').toBeLessThan(notYet);
  });
});

interface Machine {
  /** What `node --version` prints; absent: no node on the PATH. */
  node?: string;
  npm?: boolean;
  /** apt-cache policy nodejs's candidate; absent: (none). */
  candidate?: string;
  /** The Provides of the candidate nodejs (apt-cache show). */
  candidateProvides?: string;
  /** The Provides of the installed nodejs (dpkg-query); absent: not installed. */
  installedProvides?: string;
}

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Runs `.ci/install --plan` (or, with plan false, `.ci/install`) with only fake tools on the PATH. */
function plan(m: Machine, planOnly = true): { code: number; stdout: string; stderr: string; installs: string[] } {
  const dir = mkdtempSync(join(tmpdir(), 'moat-install-'));
  dirs.push(dir);
  const bin = join(dir, 'bin');
  mkdirSync(bin);
  const tool = (name: string, body: string) => {
    writeFileSync(join(bin, name), `#!${bash}\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  };
  if (m.node !== undefined) tool('node', `echo ${m.node}`);
  if (m.npm === true) tool('npm', 'echo 10.9.2');
  tool('apt-cache', [
    'if [ "$1" = policy ]; then',
    '  echo "nodejs:"; echo "  Installed: (none)"',
    `  echo "  Candidate: ${m.candidate ?? '(none)'}"`,
    'elif [ "$1" = show ]; then',
    `  echo "Package: nodejs"; echo "Version: ${m.candidate ?? ''}"; echo "Provides: ${m.candidateProvides ?? ''}"`,
    'fi',
  ].join('\n'));
  tool('dpkg-query', m.installedProvides === undefined
    ? 'echo "dpkg-query: no packages found matching nodejs" >&2; exit 1'
    : `echo "Provides: ${m.installedProvides}"`);
  const r = spawnSync(bash!, [join(ROOT, '.ci/install'), ...(planOnly ? ['--plan'] : [])], { cwd: dir, env: { PATH: bin }, encoding: 'utf8' });
  const line = r.stdout.split('\n').find((l) => l.startsWith('+ apt-get install'));
  const installs = line === undefined ? [] : line.split(' ').slice(2).filter((w) => !w.startsWith('-') && w !== 'install');
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr, installs };
}

const DEBIAN_12 = '18.19.0+dfsg-6~deb12u2';
const DEBIAN_13 = '20.19.2+dfsg-1';
const NODESOURCE = '22.12.0-1nodesource1';

describe.skipIf(bash === undefined)('.ci/install decides what Node.js needs', () => {
  it('on plain Debian 12 (Node 18 candidate, no node) it stops before installing and says what is needed', () => {
    const r = plan({ candidate: DEBIAN_12 });
    expect(r.code).not.toBe(0);
    expect(r.installs).toEqual([]);
    expect(r.stdout).not.toMatch(/npm ci/);
    expect(r.stderr).toMatch(/Node\.js >= 20\.19/);
    expect(r.stderr).toMatch(/no node on the PATH/);
    expect(r.stderr).toContain(DEBIAN_12);
    expect(r.stderr).toMatch(/NodeSource|nodejs\.org/);
  });

  it('on Debian 12 with its node 18 installed it stops too, naming the node it found', () => {
    const r = plan({ node: 'v18.19.0', npm: true, candidate: DEBIAN_12, installedProvides: '' });
    expect(r.code).not.toBe(0);
    expect(r.installs).toEqual([]);
    expect(r.stderr).toMatch(/Found: v18\.19\.0/);
  });

  it('on Debian 13 without node it installs Debian\'s nodejs and npm', () => {
    const r = plan({ candidate: DEBIAN_13, candidateProvides: 'node-types-node (= 20.19.2), nodejs-abi-115' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.installs).toEqual(expect.arrayContaining(['nodejs', 'npm', 'tshark', 'libpcap-dev', 'g++']));
    expect(r.stdout.split('\n')).toEqual(expect.arrayContaining(['+ apt-get update -q', '+ npm ci --no-audit --no-fund']));
  });

  it('with NodeSource\'s node (and its npm) on the PATH it installs neither nodejs nor npm', () => {
    const r = plan({ node: 'v20.19.5', npm: true, candidate: '20.19.5-1nodesource1', installedProvides: 'nodejs-dev, nodejs-legacy, npm' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.installs).toContain('tshark');
    expect(r.installs).not.toContain('nodejs');
    expect(r.installs).not.toContain('npm');
    expect(r.stdout).toMatch(/\+ npm ci/);
  });

  it('with NodeSource\'s repository set up but no node yet it installs nodejs alone (it ships npm)', () => {
    const r = plan({ candidate: NODESOURCE, candidateProvides: 'nodejs-dev, nodejs-legacy, npm' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.installs).toContain('nodejs');
    expect(r.installs).not.toContain('npm');
  });

  it('with Debian 13\'s node installed without npm it adds Debian\'s npm', () => {
    const r = plan({ node: 'v20.19.2', candidate: DEBIAN_13, installedProvides: 'node-types-node (= 20.19.2)' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.installs).toContain('npm');
    expect(r.installs).not.toContain('nodejs');
  });

  it('with a node that should have brought npm but did not, it stops rather than mix in Debian\'s npm', () => {
    const r = plan({ node: 'v20.19.5', candidate: '20.19.5-1nodesource1', installedProvides: 'nodejs-dev, nodejs-legacy, npm' });
    expect(r.code).not.toBe(0);
    expect(r.installs).toEqual([]);
    expect(r.stderr).toMatch(/npm is not/);
  });

  it('an older Node 20 is upgraded from the candidate', () => {
    const r = plan({ node: 'v20.11.0', npm: true, candidate: DEBIAN_13, installedProvides: 'node-types-node (= 20.11.0)' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.installs).toContain('nodejs');
  });

  it('without apt-get (or without root) it stops at once with a plain message', () => {
    const r = plan({ node: 'v20.19.5', npm: true }, false);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^moat install: (apt-get not found|run it as root)/);
  });

  it('installs PostgreSQL\'s server for the store\'s tests, and no system cluster with it', () => {
    const r = plan({ node: 'v20.19.5', npm: true, candidate: DEBIAN_13 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.installs).toContain('postgresql');
    const dropIn = '/etc/postgresql-common/createcluster.d/moat-no-main-cluster.conf';
    const lines = r.stdout.split('\n');
    const install = lines.findIndex((l) => l.startsWith('+ apt-get install'));
    if (existsSync(dropIn)) {
      // Written before (or the operator's own): kept as it is.
      expect(lines.some((l) => l.includes(dropIn))).toBe(false);
    } else {
      const write = lines.indexOf(`+ write ${dropIn}: create_main_cluster = false`);
      expect(write, r.stdout).toBeGreaterThanOrEqual(0);
      expect(write, 'the drop-in is written before the package is installed').toBeLessThan(install);
    }
  });

  it('on this machine, as CI runs it, the plan succeeds with the node on the PATH', () => {
    const r = spawnSync(bash!, [join(ROOT, '.ci/install'), '--plan'], { cwd: ROOT, encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/using node v\d+/);
    expect(r.stdout).toMatch(/\+ npm ci/);
  });
});
