// README "Running the control plane highly available" works as written: its
// shell blocks run one after another in one bash (the PostgreSQL block as the
// server's user when run as root), with only free ports, a temporary
// directory and the PostgreSQL binaries' folder put in. Real processes
// throughout: a PostgreSQL cluster, two `moat serve --database` replicas, a
// `moat daemon` in monitor mode on lo knowing both. Between the blocks the
// test checks what the README says happens: the daemon on replica B swaps in
// a version written through replica A; B killed with SIGKILL, it keeps
// judging connections to the blocked port as drops, reconnects to A, resumes
// from its digest (told "up to date", nothing sent again), and the next write
// through A reaches it.
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt, ROOT } from '../support/cli.js';
import { findBinDir, requirePostgres, serverUser } from '../support/postgres.js';
import { peerTool } from '../support/tools.js';

const curl = peerTool('curl');
const bash = peerTool('bash');
const root = process.getuid?.() === 0;
const problem = !root ? 'the daemon captures on lo: run as root' : curl === undefined ? 'curl is missing' : bash === undefined ? 'bash is missing' : undefined;
if (problem !== undefined && process.env['CI'] === 'true') throw new Error(`README HA walkthrough cannot run: ${problem}`);
const run = problem === undefined && requirePostgres();

/** The ```sh blocks of the README section under `heading` (up to the next heading of its level or above). */
function blocks(heading: string): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const at = readme.indexOf(`\n${heading}\n`);
  expect(at, `README has "${heading}"`).toBeGreaterThan(0);
  const rest = readme.slice(at + heading.length + 2);
  const section = rest.slice(0, rest.search(/\n#{1,3} /));
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.runIf(run)('the README\'s highly available control plane, followed step by step', () => {
  let dir: string;
  let ha: string;
  let sh: ChildProcessWithoutNullStreams;
  let out = '';
  let steps: string[];
  const ports = { pg: 0, a: 0, b: 0, metrics: 0 };
  let prober: NodeJS.Timeout | undefined;

  /** Runs the next README block in the shell; resolves when it is done. */
  let step = 0;
  async function next(ms = 60_000): Promise<void> {
    const n = step++;
    const marker = `@@done ${n}@@`;
    sh.stdin.write(`${steps[n]}\necho '${marker}'\n`);
    const end = Date.now() + ms;
    while (!out.includes(marker)) {
      if (sh.exitCode !== null) throw new Error(`the shell exited (${sh.exitCode}) in block ${n}:\n${out}\n${log('daemon')}`);
      if (Date.now() > end) throw new Error(`block ${n} did not finish in ${ms} ms:\n${out}\n${log('daemon')}\n${log('a')}\n${log('b')}`);
      await sleep(50);
    }
  }

  const log = (name: string): string => (existsSync(join(ha, `${name}.log`)) ? readFileSync(join(ha, `${name}.log`), 'utf8') : '');
  type Line = { msg: string; time: number; url?: string; reason?: string; digest?: string };
  const daemonLines = (): Line[] => log('daemon').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
  const health = async () => (await (await fetch(`http://127.0.0.1:${ports.metrics}/health`)).json()) as { controlPlane: { connected: boolean; bundle: string; digest: string; url: string } };
  const drops = async (): Promise<number> => {
    const text = await (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text();
    return Number(/^moat_packets_total\{interface="lo",verdict="drop"\} (\d+)/m.exec(text)?.[1] ?? 0);
  };
  const pid = (name: string): number => Number(readFileSync(join(ha, `${name}.pid`), 'utf8').trim());

  beforeAll(async () => {
    ensureBuilt();
    const pgBin = findBinDir();
    if ('problem' in pgBin) throw new Error(pgBin.problem);
    dir = mkdtempSync(join(tmpdir(), 'moat-readme-ha-'));
    chmodSync(dir, 0o755);
    ha = join(dir, 'moat-ha');
    mkdirSync(ha);
    const user = serverUser();
    if (user !== null) chownSync(ha, user.uid, user.gid);
    // `moat` on the PATH, as `npm link` puts it.
    const bin = join(dir, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'moat'), `#!/bin/sh\nexec ${process.execPath} ${BIN} "$@"\n`, { mode: 0o755 });
    for (const k of Object.keys(ports) as Array<keyof typeof ports>) ports[k] = await freePort();
    steps = blocks('### Running the control plane highly available').map((b) =>
      b
        .replaceAll('/usr/lib/postgresql/15/bin', pgBin.dir)
        .replaceAll('$HOME/moat-ha', ha)
        .replaceAll('5433', String(ports.pg))
        .replaceAll('8081', String(ports.a))
        .replaceAll('8082', String(ports.b))
        .replaceAll('9491', String(ports.metrics))
        // The test runs as root already.
        .replace(/^sudo /gm, ''),
    );
    expect(steps).toHaveLength(4);
    // PostgreSQL refuses root: its block runs as the server's user; its variables are set in the shell too.
    if (user !== null) {
      const r = spawnSync('runuser', ['-u', user.name, '--', bash!, '-euo', 'pipefail', '-c', steps[0]!], { cwd: ha, encoding: 'utf8', timeout: 60_000 });
      expect(r.status, `${r.stderr}${r.stdout}`).toBe(0);
      steps[0] = steps[0]!.split('\n').filter((l) => l.startsWith('export ')).join('\n');
    }
    sh = spawn(bash!, ['--noprofile', '--norc', '-eo', 'pipefail'], { cwd: dir, env: { ...process.env, PATH: `${bin}:${process.env['PATH']}` } });
    sh.stdout.on('data', (d: Buffer) => (out += d.toString()));
    sh.stderr.on('data', (d: Buffer) => (out += d.toString()));
  }, 120_000);

  afterAll(async () => {
    if (prober !== undefined) clearInterval(prober);
    if (ha === undefined) return;
    for (const name of ['daemon', 'a', 'b']) {
      try {
        process.kill(pid(name), 'SIGKILL');
      } catch {
        // gone already, or never started
      }
    }
    sh?.stdin.end();
    const pgBin = findBinDir();
    const user = serverUser();
    if ('dir' in pgBin && existsSync(join(ha, 'pg', 'postmaster.pid'))) {
      const args = [join(pgBin.dir, 'pg_ctl'), 'stop', '-D', join(ha, 'pg'), '-m', 'immediate', '-w'];
      spawnSync(user === null ? args[0]! : 'runuser', user === null ? args.slice(1) : ['-u', user.name, '--', ...args], { timeout: 30_000 });
    }
    await sleep(200);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it('starts PostgreSQL, two replicas and a daemon on replica B', async () => {
    await next();
    await next();
    const h = await health();
    expect(h.controlPlane).toMatchObject({ connected: true, url: `ws://127.0.0.1:${ports.b}/moat/channel` });
    // Connections to the port the README blocks next: SYNs the daemon judges (nothing listens; lo carries them).
    prober = setInterval(() => connect(2323, '127.0.0.1').on('error', () => undefined), 25);
  }, 120_000);

  it('swaps in a version written through replica A, on replica B, and judges port 2323 as blocked', async () => {
    await next();
    const swapped = daemonLines().filter((l) => l.msg === 'ruleset swapped' && l.reason?.includes('account version 1'));
    expect(swapped).toHaveLength(1);
    const h = await health();
    expect(h.controlPlane).toMatchObject({ connected: true, bundle: 'live', url: `ws://127.0.0.1:${ports.b}/moat/channel` });
    const before = await drops();
    await sleep(500);
    expect(await drops()).toBeGreaterThan(before);
  }, 60_000);

  it('with replica B killed, keeps judging, reconnects to A with its digest (nothing sent again), and takes the next write through A', async () => {
    const digest = (await health()).controlPlane.digest;
    const swapsBefore = daemonLines().filter((l) => l.msg === 'ruleset swapped').length;
    const killedAt = Date.now();
    // The README block kills B and waits for the reconnection to A: watch the daemon meanwhile.
    const during: number[] = [];
    const watch = setInterval(() => void drops().then((n) => during.push(n), () => undefined), 100);
    const block = next();
    block.catch(() => undefined); // awaited below; a failure before that is the test's
    let reconnected: Line | undefined;
    while (reconnected === undefined) {
      reconnected = daemonLines().find((l) => l.msg === 'connected to the control plane' && l.url === `ws://127.0.0.1:${ports.a}/moat/channel`);
      if (Date.now() - killedAt > 30_000) throw new Error(`no reconnection to A:\n${log('daemon')}`);
      await sleep(20);
    }
    clearInterval(watch);
    // Judged all along: drops kept counting while the daemon had no control plane.
    expect(during.length).toBeGreaterThan(2);
    expect(during.at(-1)!).toBeGreaterThan(during[0]!);
    // The welcome, then "up to date" for the digest it said hello with.
    let upToDate: Line | undefined;
    for (let i = 0; i < 100 && upToDate === undefined; i++) {
      upToDate = daemonLines().find((l) => l.msg === "the bundle in force is the control plane's current one" && l.time >= reconnected.time);
      if (upToDate === undefined) await sleep(50);
    }
    expect(upToDate?.digest).toBe(digest);
    await block;
    const after = daemonLines();
    const swaps = after.filter((l) => l.msg === 'ruleset swapped');
    // One swap more: version 2; none for the reconnection.
    expect(swaps.length).toBe(swapsBefore + 1);
    expect(swaps.at(-1)!.reason).toMatch(/account version 2/);
    const h = await health();
    expect(h.controlPlane).toMatchObject({ connected: true, bundle: 'live', url: `ws://127.0.0.1:${ports.a}/moat/channel` });
    expect(h.controlPlane.digest).not.toBe(digest);
    const closed = after.find((l) => l.msg === 'control plane connection closed; the bundle in force stays');
    console.log(`replica B killed: the daemon noticed after ${closed!.time - killedAt} ms, was connected to A ${reconnected.time - killedAt} ms after the kill, and swapped version 2 in ${swaps.at(-1)!.time - reconnected.time} ms after that (write and wait included)`);
  }, 90_000);
});
