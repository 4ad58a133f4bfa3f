// `moat serve` as a real process: the first user's credentials printed on an
// empty data directory and working, two server processes on one database
// writing concurrently and still numbering versions linearly, and every write
// acknowledged before a kill -9 present after a restart.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, ensureBuilt, moat } from '../support/cli.js';
import { PHASE, printedCredentials as credentials, sdkClient as client, serveProcess, written, type ServeProcess } from '../support/api.js';
import { MoatError } from '../../src/errors/index.js';
import { secureDataDir } from '../../src/store/index.js';

const children: ChildProcess[] = [];
const dirs: string[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'moat-serve-'));
  dirs.push(d);
  return d;
}

/** Spawns `moat serve` (killed after the test) and waits until it has started. */
async function serve(dataDir: string, extra: readonly string[] = []): Promise<ServeProcess> {
  const s = await serveProcess(dataDir, extra);
  children.push(s.child);
  return s;
}

beforeAll(() => ensureBuilt(), 120_000);

/** Runs the built `moat serve` with `args` and waits for it to exit (it must, within 15 s). */
function serveExit(args: string[], as?: { uid: number; gid: number }): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [BIN, 'serve', '--log-level', 'info', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], ...as });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`moat serve ${args.join(' ')} did not exit: ${stdout} ${stderr}`)), 15_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

afterEach(async () => {
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      const gone = new Promise((r) => c.once('exit', r));
      c.kill('SIGKILL');
      await gone;
    }
  }
});

afterAll(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('moat serve', () => {
  it('prints the first user\'s credentials on an empty data directory, and they work', async () => {
    const dir = tempDir();
    const s = await serve(dir);
    expect(s.url).toMatch(/^http:\/\/127\.0\.0\.1:[1-9]\d*\/client\/v4$/);
    const c = credentials(s);
    expect(c.email).toBe('admin@moat.local');
    expect(c.accountId).toMatch(/^[0-9a-f]{32}$/);
    // The plaintext key is not written to disk unless asked for.
    expect(existsSync(join(dir, 'first-user.json'))).toBe(false);
    expect(s.lines.join('\n')).toContain('the key is shown once; keep it now');
    const cf = client(s.url, c);
    const rs = await written(cf.rulesets.create({ account_id: c.accountId, name: 'first', kind: 'root', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] }));
    expect(rs.version).toBe('1');
    expect((await cf.rulesets.phases.get(PHASE, { account_id: c.accountId })).id).toBe(rs.id);
    // The printed curl line is a working request too.
    const curl = s.lines.find((l) => l.includes('try: curl'))!;
    expect(curl).toContain(`${s.url}/accounts/${c.accountId}/rulesets`);

    // Stopped with SIGTERM it exits 0; started again it creates no second user.
    s.child.kill('SIGTERM');
    expect(await s.exited).toEqual({ code: 0, signal: null });
    const again = await serve(dir);
    expect(again.lines.join('\n')).not.toContain('X-Auth-Key');
    expect(again.lines).toContain(`moat: 1 user(s); manage them with: moat users list --data-dir ${dir}`);
    expect((await client(again.url, c).rulesets.get(rs.id, { account_id: c.accountId })).rules[0]!.expression).toBe('tcp.dstport == 23');
  });

  it('--write-first-user writes the first user\'s key to first-user.json, mode 0600', async () => {
    const dir = tempDir();
    const s = await serve(dir, ['--write-first-user']);
    const c = credentials(s);
    const saved = JSON.parse(readFileSync(join(dir, 'first-user.json'), 'utf8'));
    expect(saved).toEqual({ email: c.email, key: c.key, account_id: c.accountId });
    expect(statSync(join(dir, 'first-user.json')).mode & 0o777).toBe(0o600);
    expect(s.lines.join('\n')).toContain('delete that file once the key is stored elsewhere');
  });

  it('makes an existing data directory owner-only at start: 0700, every file (moat.db, -wal, -shm, first-user.json) 0600, saying so', async () => {
    const dir = tempDir();
    const first = await serve(dir, ['--write-first-user']);
    const c = credentials(first);
    // kill -9 leaves -wal and -shm beside the database.
    first.child.kill('SIGKILL');
    await first.exited;
    const files = ['moat.db', 'moat.db-wal', 'moat.db-shm', 'first-user.json'];
    for (const f of files) expect(existsSync(join(dir, f)), f).toBe(true);
    // Loosened as a copy or an older Moat would leave them.
    chmodSync(dir, 0o755);
    for (const f of files) chmodSync(join(dir, f), 0o644);
    const again = await serve(dir);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    for (const f of readdirSync(dir)) expect(statSync(join(dir, f)).mode & 0o777, f).toBe(0o600);
    const said = again.stderr();
    expect(said).toContain(`moat: tightened ${dir}: mode 0755 -> 0700 (owner-only)`);
    for (const f of files) expect(said).toContain(`moat: tightened ${join(dir, f)}: mode 0644 -> 0600 (owner-only)`);
    expect((await client(again.url, c).rulesets.list({ account_id: c.accountId })).result).toEqual([]);
    // Files SQLite creates while the server runs are owner-only too.
    for (const f of readdirSync(dir)) expect(statSync(join(dir, f)).mode & 0o777, f).toBe(0o600);
  });

  it('refuses with 8006 a data directory open to others that it cannot tighten (owned by another user)', () => {
    // A root-owned 0755 directory seen by another user (uid 65534): the check
    // runs in process with that uid, since a process spawned as nobody could
    // not read a checkout under a private directory (CI's fresh clone).
    const dir = join(tempDir(), 'data');
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    const owner = statSync(dir).uid;
    const other = owner === 65534 ? 65533 : 65534;
    let err: unknown;
    try {
      secureDataDir(dir, other);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(MoatError);
    expect((err as MoatError).code).toBe(8006);
    expect((err as MoatError).message).toMatch(new RegExp(`^${dir} is mode 0755 and owned by uid ${owner}, not by this user \\(uid ${other}\\)`));
    // Nothing was changed.
    expect(statSync(dir).mode & 0o777).toBe(0o755);
  });

  it('starts two servers at once on an empty data directory: both come up, one creates the first user', async () => {
    // Both race to migrate the new file and to create the first user.
    const dir = tempDir();
    const [a, b] = await Promise.all([serve(dir), serve(dir)]);
    const creators = [a, b].filter((s) => s.lines.some((l) => l.includes('X-Auth-Key:')));
    expect(creators).toHaveLength(1);
    const other = creators[0] === a ? b : a;
    expect(other.lines.some((l) => l.includes('moat: 1 user(s)'))).toBe(true);
    const c = credentials(creators[0]!);
    for (const s of [a, b]) expect((await client(s.url, c).rulesets.list({ account_id: c.accountId })).result).toEqual([]);
  });

  it('a second server on a busy port exits 1 with one coded line, starting no work and creating no user', async () => {
    const first = await serve(tempDir());
    const port = new URL(first.url).port;
    // Same database (the runners must not start), and a new directory (no first user may be made).
    const shared = /database (\S+)\/moat\.db\)/.exec(first.lines[0]!)![1]!;
    const fresh = join(tempDir(), 'fresh');
    for (const dir of [shared, fresh]) {
      const r = await serveExit(['--data-dir', dir, '--listen', `127.0.0.1:${port}`]);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(
        `moat: error 7097: cannot listen on 127.0.0.1:${port}: the address is in use (another \`moat serve\` or another program listens there); stop it or choose another --listen\n`,
      );
    }
    expect(existsSync(join(fresh, 'first-user.json'))).toBe(false);
    // The first server is unharmed.
    expect((await fetch(first.url.replace('/client/v4', '/health'))).status).toBe(200);
  });

  it('exits 1 with one coded line for a data directory that is a file, an unreadable database, or an address not of this host', async () => {
    const dir = tempDir();
    const file = join(dir, 'not-a-dir');
    writeFileSync(file, 'x');
    const garbage = join(dir, 'garbage');
    mkdirSync(garbage, { mode: 0o700 });
    writeFileSync(join(garbage, 'moat.db'), 'this is not an SQLite database, not at all, no'.repeat(100), { mode: 0o600 });
    const cases: [string[], RegExp][] = [
      [['--data-dir', file, '--listen', '127.0.0.1:0'], /^moat: error 8001: .*not-a-dir: cannot create the data directory: /],
      [['--data-dir', garbage, '--listen', '127.0.0.1:0'], /^moat: error 8001: .*garbage\/moat\.db: cannot open the database: file is not a database$/],
      [['--data-dir', join(dir, 'ok'), '--listen', '192.0.2.1:8080'], /^moat: error 7097: cannot listen on 192\.0\.2\.1:8080: the address is not one of this host's$/],
    ];
    for (const [args, line] of cases) {
      const r = await serveExit(args);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr.split('\n').filter((l) => l !== ''), args.join(' ')).toHaveLength(1);
      expect(r.stderr.trimEnd(), args.join(' ')).toMatch(line);
    }
  });

  it('exits 2 with a message for a bad --listen or --log-level', async () => {
    const dir = tempDir();
    expect(await moat('serve', '--data-dir', dir, '--listen', 'localhost')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'moat: error 5010: --listen localhost: expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080',
    });
    expect(await moat('serve', '--data-dir', dir, '--listen', '127.0.0.1:70000')).toMatchObject({ code: 2 });
    expect(await moat('serve', '--data-dir', dir, '--listen', '127.0.0.1:0', '--log-level', 'loud')).toEqual({ code: 2, stdout: '', stderr: 'moat: error 5010: --log-level loud: unknown level' });
  });

  it('keeps versions linear when two server processes on one data directory take 40 concurrent rule additions', async () => {
    const dir = tempDir();
    const a = await serve(dir);
    const c = credentials(a);
    const b = await serve(dir);
    const clients = [client(a.url, c), client(b.url, c)];
    const rs = await written(clients[0]!.rulesets.create({ account_id: c.accountId, name: 'shared', kind: 'custom', phase: PHASE, rules: [] }));
    const N = 40;
    const results = await Promise.all(
      Array.from({ length: N }, (_, i) => written(clients[i % 2]!.rulesets.rules.create(rs.id, { account_id: c.accountId, action: 'block', expression: `tcp.dstport == ${2000 + i}` }))),
    );
    expect(results.map((r) => Number(r.version)).sort((x, y) => x - y)).toEqual(Array.from({ length: N }, (_, i) => i + 2));
    for (const cf of clients) {
      const versions: string[] = [];
      for await (const v of cf.rulesets.versions.list(rs.id, { account_id: c.accountId })) versions.push(v.version);
      expect(versions).toEqual(Array.from({ length: N + 1 }, (_, i) => String(i + 1)));
      const last = await cf.rulesets.get(rs.id, { account_id: c.accountId });
      expect(last.version).toBe(String(N + 1));
      expect(last.rules.map((r) => r.expression).sort()).toEqual(Array.from({ length: N }, (_, i) => `tcp.dstport == ${2000 + i}`).sort());
    }
    // Every answer was a consistent snapshot: version n holds n - 1 rules.
    for (const r of results) expect(r.rules).toHaveLength(Number(r.version) - 1);
  });

  it('keeps every write it acknowledged before a kill -9', async () => {
    const dir = tempDir();
    const s = await serve(dir);
    const c = credentials(s);
    const cf = client(s.url, c);
    const rs = await written(cf.rulesets.create({ account_id: c.accountId, name: 'durable', kind: 'custom', phase: PHASE, rules: [] }));
    const acknowledged: string[] = [];
    for (let i = 0; i < 10; i++) {
      const expression = `tcp.dstport == ${3000 + i}`;
      await written(cf.rulesets.rules.create(rs.id, { account_id: c.accountId, action: 'block', expression }));
      acknowledged.push(expression);
    }
    // Then a burst that is killed midway: whatever was answered must survive.
    const burst = Array.from({ length: 30 }, (_, i) => {
      const expression = `udp.dstport == ${4000 + i}`;
      return written(cf.rulesets.rules.create(rs.id, { account_id: c.accountId, action: 'log', expression })).then(() => {
        acknowledged.push(expression);
        if (acknowledged.length === 20) s.child.kill('SIGKILL');
      });
    });
    await Promise.allSettled(burst);
    expect((await s.exited).signal).toBe('SIGKILL');
    expect(acknowledged.length).toBeGreaterThanOrEqual(20);

    const again = await serve(dir);
    const after = await client(again.url, c).rulesets.get(rs.id, { account_id: c.accountId });
    const present = new Set(after.rules.map((r) => r.expression));
    for (const e of acknowledged) expect(present.has(e), e).toBe(true);
    expect(Number(after.version)).toBe(after.rules.length + 1);
    const versions: string[] = [];
    for await (const v of client(again.url, c).rulesets.versions.list(rs.id, { account_id: c.accountId })) versions.push(v.version);
    expect(versions).toEqual(Array.from({ length: Number(after.version) }, (_, i) => String(i + 1)));
  });
});
