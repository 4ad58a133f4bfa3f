// The sides of the control-plane benchmarks (api, channel; issue #20): SQLite,
// one `moat serve` on a data directory, and PostgreSQL with 1, 2 or 3
// `moat serve --database` replicas sharing one database of a throwaway
// cluster (test/support/postgres.ts, started with fsync on: the figures are
// those of durable commits). Which sides run is an environment variable
// (sqlite,pg1,pg2,pg3; default all). Each side's store is opened once before
// its replicas start, to create what the bench needs (users, tokens) the way
// the operator commands would, and closed again. The CPU of a side is that of
// its `moat serve` processes and, on PostgreSQL, of the database server's
// processes (the same cluster serves every PostgreSQL side, but turns run one
// at a time, so what it spends during a turn is that side's).

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pgNotifyRepos, sqliteNotifyRepos } from '../src/notify/index.js';
import { Database, PgStore, SqliteStore, type Store } from '../src/store/index.js';
import { postgresProblem, startCluster, type PgCluster } from '../test/support/postgres.js';
import { lines } from './harness.js';

// The built binary: beside this file when it runs from dist/bench (npm run
// bench), under dist/ when a test imports it from the sources.
const BIN = new URL(import.meta.url.includes('/dist/bench/') ? '../src/cli/main.js' : '../dist/src/cli/main.js', import.meta.url).pathname;

export const SIDE_NAMES = ['sqlite', 'pg1', 'pg2', 'pg3'] as const;
export type SideName = (typeof SIDE_NAMES)[number];

/**
 * The sides named by environment variable `envName` (comma-separated), all of
 * them when it is unset. Unset and PostgreSQL missing: SQLite alone, with a
 * warning; named explicitly and missing: an error saying what to install.
 */
export function selectedSides(envName: string): SideName[] {
  const raw = process.env[envName];
  const names = raw === undefined || raw.trim() === '' ? [...SIDE_NAMES] : raw.split(',').map((s) => s.trim()).filter((s) => s !== '');
  for (const n of names) if (!(SIDE_NAMES as readonly string[]).includes(n)) throw new Error(`${envName}: unknown side ${JSON.stringify(n)} (choose among ${SIDE_NAMES.join(', ')})`);
  const wanted = names as SideName[];
  if (!wanted.some((n) => n !== 'sqlite')) return wanted;
  const problem = postgresProblem();
  if (problem === null) return wanted;
  if (raw !== undefined && raw.trim() !== '') throw new Error(`${envName}=${raw} asks for PostgreSQL, but ${problem}`);
  console.log(`(PostgreSQL sides skipped: ${problem}; set ${envName}=sqlite to silence this)`);
  return wanted.filter((n) => n === 'sqlite');
}

/** Replicas of a side: 1 for sqlite and pg1, else the digit. */
function replicaCount(name: SideName): number {
  return name === 'sqlite' ? 1 : Number(name.slice(2));
}

/** One `moat serve` process. */
export interface Replica {
  readonly child: ChildProcess;
  /** The API's base URL (…/client/v4). */
  readonly base: string;
  /** The control channel's URL. */
  readonly channel: string;
}

/** A running side. */
export interface Side {
  readonly name: SideName;
  readonly replicas: readonly Replica[];
  /** The PostgreSQL database's name (undefined on SQLite). */
  readonly database: string | undefined;
  /** CPU microseconds used so far by the side's processes (replicas, and the database server on PostgreSQL); undefined off Linux. */
  cpuMicros(): number | undefined;
}

/** CPU time (user + system, microseconds) of process `pid`, from /proc/PID/stat (Linux; undefined elsewhere or when gone). */
export function cpuMicros(pid: number | undefined): number | undefined {
  const file = `/proc/${pid}/stat`;
  if (pid === undefined || !existsSync(file)) return undefined;
  try {
    // Fields after the command name: utime and stime are the 12th and 13th, in clock ticks (100 per second on Linux).
    const stat = readFileSync(file, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10_000;
  } catch {
    return undefined;
  }
}

/** The postmaster and its live children (backends, WAL writer, checkpointer...). */
function clusterPids(postmaster: number): number[] {
  const out = [postmaster];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster) out.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

function startReplica(dataDir: string, database: string | undefined): Promise<Replica> {
  const args = [BIN, 'serve', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-level', 'warn', ...(database === undefined ? [] : ['--database', database])];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let base: string | undefined;
    const timer = setTimeout(() => reject(new Error('moat serve did not start within 60 s')), 60_000);
    lines(child, (l) => {
      base ??= /listening on (http:\/\/\S+)/.exec(l)?.[1];
      const channel = /control channel for daemons on (\S+)/.exec(l)?.[1];
      if (channel !== undefined && base !== undefined) {
        clearTimeout(timer);
        resolve({ child, base, channel });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`moat serve exited with ${code}`));
    });
  });
}

/** The sides of one benchmark run: the PostgreSQL cluster (when a side needs it), the processes, the directories. */
export class Backends {
  private cluster: PgCluster | undefined;
  private readonly children: ChildProcess[] = [];
  private readonly dir = mkdtempSync(join(tmpdir(), 'moat-bench-sides-'));

  /**
   * Starts side `name`: a fresh database (a new data directory, or a new
   * database in the cluster), `setup` run on its store (then closed), then
   * its replicas, one after another.
   */
  async start(name: SideName, setup: (store: Store) => Promise<void>): Promise<Side> {
    const dataDir = this.dataDir(name);
    let url: string | undefined;
    let store: Store;
    if (name === 'sqlite') {
      store = new SqliteStore(Database.open(dataDir), sqliteNotifyRepos);
    } else {
      if (this.cluster === undefined) {
        this.cluster = await startCluster({ durable: true });
        // The database's name on every log line, so that a side's serialization failures can be counted (transactions()).
        await this.cluster.admin("ALTER SYSTEM SET log_line_prefix = '%m [%p] %d '");
        await this.cluster.admin('SELECT pg_reload_conf()');
      }
      url = await this.cluster.createDatabase(`bench_${name}`);
      store = await PgStore.open(url, pgNotifyRepos);
    }
    try {
      await setup(store);
    } finally {
      await store.close();
    }
    const replicas: Replica[] = [];
    for (let i = 0; i < replicaCount(name); i++) {
      const replicaDir = join(dataDir, `replica-${i}`);
      mkdirSync(replicaDir, { recursive: true, mode: 0o700 });
      const r = await startReplica(name === 'sqlite' ? dataDir : replicaDir, url);
      this.children.push(r.child);
      replicas.push(r);
    }
    const cluster = this.cluster;
    return {
      name,
      replicas,
      database: url === undefined ? undefined : new URL(url).pathname.slice(1),
      cpuMicros() {
        const pids = [...replicas.map((r) => r.child.pid), ...(url === undefined || cluster === undefined ? [] : clusterPids(cluster.pid))];
        let total = 0;
        for (const p of pids) {
          const c = cpuMicros(p);
          if (c === undefined && replicas.some((r) => r.child.pid === p)) return undefined;
          total += c ?? 0;
        }
        return total;
      },
    };
  }

  /** The cluster's durability settings, for the header of a report ('' when no PostgreSQL side ran). */
  async settings(): Promise<string> {
    if (this.cluster === undefined) return '';
    const rows = await this.cluster.admin<{ name: string; setting: string }>(
      "SELECT name, setting FROM pg_settings WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method') ORDER BY name",
    );
    return rows.map((r) => `${r.name}=${r.setting}`).join(' ');
  }

  /**
   * Transactions of a PostgreSQL side's database so far: committed (reads
   * included) from pg_stat_database, which backends update within seconds;
   * serialization failures (each one a transaction the store ran again) from
   * the server's log. Undefined on SQLite.
   */
  async transactions(side: Side): Promise<{ commits: number; serializationFailures: number } | undefined> {
    if (side.database === undefined || this.cluster === undefined) return undefined;
    const [row] = await this.cluster.admin<{ c: string }>('SELECT xact_commit::text AS c FROM pg_stat_database WHERE datname = $1', [side.database]);
    const failure = `] ${side.database} ERROR:  could not serialize access`;
    const serializationFailures = this.cluster.log().split('\n').filter((l) => l.includes(failure)).length;
    return row === undefined ? undefined : { commits: Number(row.c), serializationFailures };
  }

  /** The data directory of side `name` (SQLite's database file is in it). */
  dataDir(name: SideName): string {
    return join(this.dir, name);
  }

  /** The cluster, when a PostgreSQL side started it. */
  get pg(): PgCluster | undefined {
    return this.cluster;
  }

  /** Stops every replica of `side` (and waits for them). */
  async stopSide(side: Side): Promise<void> {
    await Promise.all(side.replicas.map((r) => stopChild(r.child)));
  }

  /** Stops everything and deletes the directories. */
  async close(): Promise<void> {
    await Promise.all(this.children.map(stopChild));
    await this.cluster?.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
