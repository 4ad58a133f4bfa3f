// Throwaway PostgreSQL clusters for the tests and the benchmarks: initdb into a temporary
// directory, pg_ctl start on a free loopback port (and a Unix socket in that
// directory), databases created on demand, and everything stopped and deleted
// after. One cluster per test file (usePostgres() registers the hooks): start-up
// is initdb --no-sync plus pg_ctl start, about 0.7 s on the shared development
// machine; each test that needs a clean slate takes a new database in it.
// kill() and restart() crash the server with SIGKILL and start it again on the
// same port and data, for the tests of what survives a crash.
//
// PostgreSQL refuses to run as root. As root (CI runs as root), initdb and the
// server run as the `postgres` user that Debian's postgresql-common package
// creates (nobody when it is missing), with `runuser`; as another user, as
// that user. The server listens on 127.0.0.1 only, with scram-sha-256 for TCP
// (the URL carries a random password, so the code under test meets a real
// login) and trust on the Unix socket in the cluster's directory.
//
// Speed over durability where a test cannot tell: fsync=off and
// full_page_writes=off. A killed server (SIGKILL) loses nothing with them (the
// kernel still has every write); only an OS crash would, and tests do not
// crash the OS. synchronous_commit stays on, so a commit is acknowledged only
// once its WAL was written: pass { durable: true } for a test that needs fsync.
//
// Cleanup, whatever happens:
// * directories are named moat-pg-<pid>-<random> in the temporary directory,
//   with the pid of the test process that owns them;
// * stop() (from afterAll) stops the server and deletes the directory;
// * on process exit and SIGINT/SIGTERM/SIGHUP the same runs synchronously;
// * a detached reaper shell does it when the process dies without its exit
//   handlers (SIGKILL) or its parent, the test runner, goes away;
// * sweepStaleClusters() (run before the first start in each process) stops
//   and deletes the clusters whose owner process is gone.
//
// Where PostgreSQL is missing: under CI=true requirePostgres() throws (a CI run
// must not skip these tests silently); otherwise it warns and the tests skip.

import { execFile, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import pg from 'pg';

// vitest only under vitest (it sets VITEST): the benchmarks (plain node, from
// dist/) start their clusters with startCluster() too, and importing vitest
// outside its runner throws.
const vitest = process.env.VITEST === undefined ? undefined : await import('vitest');

/** Prefix of every cluster directory the harness creates (in the temporary directory). */
export const CLUSTER_PREFIX = 'moat-pg-';

const SUPERUSER = 'moat';

// ---------------------------------------------------------------------------------
// Finding PostgreSQL

/** The directory holding initdb, pg_ctl and postgres, or why there is none. */
export function findBinDir(): { dir: string } | { problem: string } {
  const fromEnv = process.env.MOAT_PG_BIN;
  if (fromEnv) return existsSync(join(fromEnv, 'pg_ctl')) ? { dir: fromEnv } : { problem: `MOAT_PG_BIN=${fromEnv} has no pg_ctl` };
  // Debian's server binaries live in /usr/lib/postgresql/<version>/bin (only
  // psql and friends are on the PATH, through wrappers); the newest wins.
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    const versions = readdirSync(base)
      .filter((v) => /^\d+$/.test(v) && existsSync(join(base, v, 'bin', 'pg_ctl')) && existsSync(join(base, v, 'bin', 'initdb')))
      .sort((a, b) => Number(b) - Number(a));
    if (versions.length > 0) return { dir: join(base, versions[0]!, 'bin') };
  }
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, 'pg_ctl')) && existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres'))) return { dir };
  }
  return { problem: 'PostgreSQL server binaries (initdb, pg_ctl) are not installed (apt-get install -y postgresql, or .ci/install)' };
}

/** The user the server runs as: ourselves, or (as root) postgres, else nobody. */
export function serverUser(): { name: string; uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  for (const name of ['postgres', 'nobody']) {
    const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
    const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
    if (uid.status === 0 && gid.status === 0) return { name, uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  }
  return null;
}

let probed: string | null | undefined;

/** Why the PostgreSQL tests cannot run here, or null when they can (not cached). */
export function postgresProblem(): string | null {
  if (process.platform !== 'linux') return 'the PostgreSQL tests run on Linux';
  const bin = findBinDir();
  if ('problem' in bin) return bin.problem;
  if (process.getuid?.() === 0) {
    if (serverUser() === null) return 'running as root and neither a postgres nor a nobody user exists to run the server as';
    if (spawnSync('runuser', ['--help'], { stdio: 'ignore' }).status !== 0) return 'runuser (util-linux) is missing: as root it runs the server as postgres';
  }
  return null;
}

/**
 * Whether the PostgreSQL tests can run here. When they cannot: throws under
 * CI=true (.ci/install installs PostgreSQL), otherwise warns with the reason
 * and returns false so the tests skip.
 */
export function requirePostgres(problem: string | null = (probed ??= postgresProblem())): boolean {
  if (problem === null) return true;
  if (process.env.CI === 'true') throw new Error(`the PostgreSQL tests cannot run: ${problem}; they are required when CI=true (.ci/install installs PostgreSQL)`);
  console.warn(`${problem}: the PostgreSQL tests are skipped`);
  return false;
}

// ---------------------------------------------------------------------------------
// Running the server's tools

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** argv that runs `tool` of PostgreSQL as the server's user. */
function asServer(binDir: string, tool: string, args: readonly string[]): [string, string[]] {
  const user = serverUser();
  const path = join(binDir, tool);
  return user === null ? [path, [...args]] : ['runuser', ['-u', user.name, '--', path, ...args]];
}

function runTool(binDir: string, cwd: string, tool: string, args: readonly string[], timeoutMs = 60_000): Promise<Run> {
  const [cmd, argv] = asServer(binDir, tool, args);
  return new Promise((resolve) => {
    execFile(cmd, argv, { cwd, timeout: timeoutMs, killSignal: 'SIGKILL', env: { ...process.env, LC_ALL: 'C' } }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : -1;
      resolve({ code, stdout, stderr: stderr || (err?.message ?? '') });
    });
  });
}

function stopSync(binDir: string, dir: string): void {
  const data = join(dir, 'data');
  if (existsSync(join(data, 'postmaster.pid'))) {
    const [cmd, argv] = asServer(binDir, 'pg_ctl', ['stop', '-D', data, '-m', 'immediate', '-w', '-t', '10']);
    spawnSync(cmd, argv, { cwd: tmpdir(), stdio: 'ignore', timeout: 15_000 });
  }
  rmSync(dir, { recursive: true, force: true });
}

// ---------------------------------------------------------------------------------
// Tracking and cleanup

/** The start time of process `pid` (field 22 of /proc/pid/stat), so a reused pid is not taken for its predecessor. */
function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

const OWNER_FILE = 'owner';
const live = new Map<string, string>(); // cluster dir -> its bin dir
let hooksInstalled = false;
let swept = false;

function ownerAlive(dir: string): boolean {
  try {
    const [pid, started] = readFileSync(join(dir, OWNER_FILE), 'utf8').trim().split(' ');
    return startTime(Number(pid)) === started;
  } catch {
    // No owner file: a directory being set up right now (by another process) or
    // one whose set-up crashed. Judge by the pid in its name.
    const m = /^moat-pg-(\d+)-/.exec(dir.slice(dir.lastIndexOf('/') + 1));
    return m !== null && startTime(Number(m[1])) !== undefined;
  }
}

/**
 * Stops and deletes the clusters of the temporary directory whose owner
 * process is gone (a test run that was killed or crashed). Returns the
 * directories it deleted.
 */
export function sweepStaleClusters(): string[] {
  swept = true;
  const bin = findBinDir();
  if ('problem' in bin) return [];
  const deleted: string[] = [];
  for (const entry of readdirSync(tmpdir())) {
    if (!entry.startsWith(CLUSTER_PREFIX)) continue;
    const dir = join(tmpdir(), entry);
    if (live.has(dir) || ownerAlive(dir)) continue;
    stopSync(bin.dir, dir);
    deleted.push(dir);
  }
  return deleted;
}

function cleanupSync(): void {
  for (const [dir, binDir] of live) stopSync(binDir, dir);
  live.clear();
}

// Waits until this process or its parent (the test runner) is gone, then stops
// and deletes the clusters this process may have left. Its own session, so a
// terminal's ^C does not stop it first.
const REAPER = `
while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
for d in "$3"/moat-pg-"$1"-*; do
  [ -f "$d/data/postmaster.pid" ] && $4 "$5/pg_ctl" stop -D "$d/data" -m immediate -w -t 10 >/dev/null 2>&1
  rm -rf "$d"
done
`;

function installHooks(binDir: string): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  const user = serverUser();
  const prefix = user === null ? '' : `runuser -u ${user.name} --`;
  const reaper = spawn('sh', ['-c', REAPER, 'sh', String(process.pid), String(process.ppid), tmpdir(), prefix, binDir], { detached: true, stdio: 'ignore', cwd: tmpdir() });
  reaper.on('error', () => undefined);
  reaper.unref();
  process.on('exit', cleanupSync);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const handler = (): void => {
      cleanupSync();
      process.removeListener(signal, handler);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, handler);
  }
}

// ---------------------------------------------------------------------------------
// Clusters

/** A free TCP port on 127.0.0.1 (free now: the server may still lose a race for it, and then start retries). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

export interface ClusterOptions {
  /** Keep fsync and full-page writes on (default off, see the header). */
  durable?: boolean;
  /** Record this pid (and its start time) as the owner instead of this process's: for the sweeper's own test. */
  ownerPid?: number;
}

/** A running throwaway cluster. */
export interface PgCluster {
  /** Its directory (data/ inside, the Unix socket beside it). */
  readonly dir: string;
  readonly port: number;
  /** The superuser's password (it is in every URL). */
  readonly password: string;
  /** The server's pid (the postmaster; a new one after restart()). */
  readonly pid: number;
  /** URL of database `name` (default `postgres`) as the superuser, over TCP on 127.0.0.1. */
  url(name?: string): string;
  /** Creates a new, empty database and returns its URL. */
  createDatabase(prefix?: string): Promise<string>;
  /** Runs one SQL statement as the superuser in database `db` (default postgres). */
  admin<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[], db?: string): Promise<R[]>;
  /** pg_terminate_backend on every session of database `db` whose application_name matches (default: every session but the caller's). */
  terminate(db: string, applicationName?: string): Promise<number>;
  /** Kills the server with SIGKILL (the postmaster; its backends follow), as a crash would. */
  kill(): Promise<void>;
  /** Starts the server again on the same port and data (after kill()). */
  restart(): Promise<void>;
  /** Stops the server (immediate) and deletes its directory. */
  stop(): Promise<void>;
  /** The server's log so far (for failure messages). */
  log(): string;
}

let dbCounter = 0;

/** Starts a new cluster. Call requirePostgres() first. */
export async function startCluster(options: ClusterOptions = {}): Promise<PgCluster> {
  const bin = findBinDir();
  if ('problem' in bin) throw new Error(bin.problem);
  installHooks(bin.dir);
  if (!swept) sweepStaleClusters();
  const ownerPid = options.ownerPid ?? process.pid;
  const dir = mkdtempSync(join(tmpdir(), `${CLUSTER_PREFIX}${ownerPid}-`));
  if (options.ownerPid === undefined) live.set(dir, bin.dir);
  const user = serverUser();
  try {
    chmodSync(dir, 0o700);
    if (user !== null) chownSync(dir, user.uid, user.gid);
    const password = randomBytes(12).toString('hex');
    const pwfile = join(dir, 'pwfile');
    writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
    if (user !== null) chownSync(pwfile, user.uid, user.gid);
    const data = join(dir, 'data');
    const init = await runTool(bin.dir, dir, 'initdb', [
      '-D', data, '-U', SUPERUSER, `--pwfile=${pwfile}`, '--auth-local=trust', '--auth-host=scram-sha-256',
      '-E', 'UTF8', '--locale=C', '--no-sync', '--no-instructions',
    ]);
    rmSync(pwfile, { force: true });
    if (init.code !== 0) throw new Error(`initdb failed (exit ${init.code}): ${init.stderr}${init.stdout}`);
    let port = 0;
    let lastError = '';
    for (let attempt = 0; attempt < 5 && port === 0; attempt++) {
      const candidate = await freePort();
      // Settings go in a file included by postgresql.conf (pg_ctl -o passes its text through a shell).
      const settings = [
        `listen_addresses = '127.0.0.1'`, `port = ${candidate}`, `unix_socket_directories = '${dir}'`,
        'max_connections = 200', "shared_buffers = '32MB'", "log_line_prefix = '%m [%p] '",
        ...(options.durable === true ? [] : ['fsync = off', 'full_page_writes = off']),
      ];
      writeFileSync(join(data, 'moat-test.conf'), settings.join('\n') + '\n');
      if (attempt === 0) appendFileSync(join(data, 'postgresql.conf'), "\ninclude 'moat-test.conf'\n");
      const start = await runTool(bin.dir, dir, 'pg_ctl', ['start', '-D', data, '-w', '-t', '60', '-l', join(dir, 'server.log')]);
      if (start.code === 0) port = candidate;
      else lastError = `${start.stderr}${start.stdout}\n${readLog(dir)}`;
      // Lost the port to another process between freePort() and the bind: try another.
      if (start.code !== 0 && !/could not bind|already in use/i.test(lastError)) break;
    }
    if (port === 0) throw new Error(`pg_ctl start failed: ${lastError}`);
    const pid = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const started = startTime(ownerPid);
    writeFileSync(join(dir, OWNER_FILE), `${ownerPid} ${started ?? 'gone'}\n`);
    return makeCluster(bin.dir, dir, port, password, pid);
  } catch (err) {
    stopSync(bin.dir, dir);
    live.delete(dir);
    throw err;
  }
}

/** The live children of process `pid` (a zombie is not live). */
function backendsOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === pid && fields[0] !== 'Z') out.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

function readLog(dir: string): string {
  try {
    return readFileSync(join(dir, 'server.log'), 'utf8');
  } catch {
    return '';
  }
}

function makeCluster(binDir: string, dir: string, port: number, password: string, pid: number): PgCluster {
  const url = (name = 'postgres') => `postgres://${SUPERUSER}:${password}@127.0.0.1:${port}/${name}`;
  const admin = async <R extends pg.QueryResultRow>(sql: string, params: unknown[] = [], db = 'postgres'): Promise<R[]> => {
    const client = new pg.Client({ connectionString: url(db), application_name: 'moat-test-admin' });
    await client.connect();
    try {
      return (await client.query<R>(sql, params)).rows;
    } finally {
      await client.end();
    }
  };
  let postmaster = pid;
  const data = join(dir, 'data');
  return {
    dir,
    port,
    password,
    get pid() {
      return postmaster;
    },
    url,
    admin,
    async createDatabase(prefix = 'moat_test') {
      const name = `${prefix}_${process.pid}_${++dbCounter}`;
      await admin(`CREATE DATABASE ${name}`);
      return url(name);
    },
    async terminate(db, applicationName) {
      const rows = await admin<{ n: string }>(
        `SELECT count(pg_terminate_backend(pid))::text AS n FROM pg_stat_activity
         WHERE datname = $1 AND pid <> pg_backend_pid() AND ($2::text IS NULL OR application_name = $2)`,
        [db, applicationName ?? null],
      );
      return Number(rows[0]!.n);
    },
    async kill() {
      const children = backendsOf(postmaster);
      try {
        process.kill(postmaster, 'SIGKILL');
      } catch {
        // already gone
      }
      // Its backends notice the postmaster's death and exit on their own (reparented meanwhile, so tracked by pid).
      const running = (p: number): boolean => {
        try {
          const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
          return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
        } catch {
          return false;
        }
      };
      for (let i = 0; i < 500 && children.some(running); i++) await new Promise((r) => setTimeout(r, 10));
    },
    async restart() {
      let last = '';
      // A new postmaster refuses to start while a backend of the old one still holds its shared memory.
      for (let attempt = 0; attempt < 50; attempt++) {
        const r = await runTool(binDir, dir, 'pg_ctl', ['start', '-D', data, '-w', '-t', '60', '-l', join(dir, 'server.log')]);
        if (r.code === 0) {
          postmaster = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
          return;
        }
        last = `${r.stderr}${r.stdout}`;
        await new Promise((res) => setTimeout(res, 100));
      }
      throw new Error(`pg_ctl start (restart) failed: ${last}\n${readLog(dir)}`);
    },
    async stop() {
      if (existsSync(join(data, 'postmaster.pid'))) await runTool(binDir, dir, 'pg_ctl', ['stop', '-D', data, '-m', 'immediate', '-w', '-t', '30']);
      rmSync(dir, { recursive: true, force: true });
      live.delete(dir);
    },
    log: () => readLog(dir),
  };
}

/** The name of the database in a URL made by a cluster. */
export function databaseOf(url: string): string {
  return new URL(url).pathname.slice(1);
}

/**
 * One cluster for the test file that calls it: started in beforeAll, stopped in
 * afterAll. Returns a getter (call it inside tests). `run` false (PostgreSQL
 * missing outside CI): no hooks, and the getter throws.
 */
export function usePostgres(run: boolean, options: ClusterOptions = {}): () => PgCluster {
  let cluster: PgCluster | undefined;
  if (run) {
    if (vitest === undefined) throw new Error('usePostgres() registers vitest hooks: call it from a test file (benchmarks call startCluster())');
    const { afterAll, beforeAll } = vitest;
    beforeAll(async () => {
      cluster = await startCluster(options);
    });
    afterAll(async () => {
      await cluster?.stop();
    });
  }
  return () => {
    if (cluster === undefined) throw new Error('the PostgreSQL cluster is not running (usePostgres outside a test, or it failed to start)');
    return cluster;
  };
}
