// Moves an installation from its SQLite file to a PostgreSQL database (issue
// #20; `moat migrate-store`), and verifies a copy. The tables are found in
// the SQLite file itself, not listed here, so a table added later is either
// copied (its PostgreSQL twin exists, as the schema test demands) or refused
// by name (8031), never dropped silently. The source is read on one snapshot
// (a read transaction on a read-only connection: a `moat serve` still writing
// to it does not make the copy inconsistent, its later writes are simply not
// in it); the target is written in one transaction (all or nothing), then
// counted and digested inside that same transaction before COMMIT, so a copy
// that does not match is never committed.

import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { MoatError } from '../errors/index.js';
import { DB_FILE } from './database.js';
import { MIGRATIONS } from './migrations.js';
import { PG_MIGRATIONS, PG_ONLY_COLUMNS, MOAT_LOCK_CLASS } from './postgres/pg-migrations.js';
import { PgDatabase, type PgClient } from './postgres/pg-database.js';

/** The advisory lock a copy holds (beside pg-migrations' MIGRATION_LOCK = 1): two copies into one database queue. */
const COPY_LOCK = 2;
/** Rows per INSERT statement: few round trips, well under PostgreSQL's 65,535 parameters for any Moat table. */
const BATCH_ROWS = 500;

/** One table as the verification saw it on both sides. */
export interface TableCheck {
  table: string;
  sqliteRows: number;
  postgresRows: number;
  /** SHA-256 (hex) of the table's canonical rows, ordered by primary key. */
  sqliteDigest: string;
  postgresDigest: string;
  ok: boolean;
}

/** What a copy or a verification found. */
export interface StoreReport {
  /** The SQLite file read. */
  from: string;
  /** The PostgreSQL database, as host:port/database (never its password). */
  to: string;
  tables: TableCheck[];
  /** Rows removed from the target first (--replace-target), per table; empty otherwise. */
  replaced: Record<string, number>;
  ok: boolean;
}

export interface MigrateStoreOptions {
  /** The data directory whose moat.db is copied. */
  from: string;
  /** postgres:// URL of the target. */
  to: string;
  /** Empty the target's Moat tables first (same transaction) instead of refusing a non-empty target. */
  replaceTarget?: boolean;
  /** For tests: runs after the copy, before its verification, inside the target's transaction. */
  beforeVerify?: (client: PgClient) => Promise<void>;
  /** For tests: runs after each table was read from the source (on its snapshot). */
  afterTableRead?: (table: string) => void;
}

/** Thrown when a count or digest differs; carries the report, so the caller can print it. */
export class StoreMismatchError extends MoatError {
  readonly report: StoreReport;
  constructor(report: StoreReport) {
    const bad = report.tables.filter((t) => !t.ok).map((t) => `${t.table} (${t.sqliteRows} rows in SQLite, ${t.postgresRows} in PostgreSQL${t.sqliteRows === t.postgresRows ? ', digests differ' : ''})`);
    super('STORE_COPY_MISMATCH', `the PostgreSQL database ${report.to} does not match ${report.from}: ${bad.join('; ')}`);
    this.report = report;
  }
}

interface SourceTable {
  name: string;
  /** Columns as SQLite lists them; `rowid` first for tables whose PostgreSQL twin keeps SQLite's rowid. */
  columns: string[];
  /** Primary key columns (every column for a table without a declared key). */
  key: string[];
  /** Tables this one references (copied before it). */
  parents: string[];
}

/** A SQLite file opened read-only, inside a read transaction: one snapshot for everything read from it. */
class Source {
  readonly file: string;
  readonly db: BetterSqlite3.Database;
  readonly tables: SourceTable[];

  constructor(dataDir: string) {
    this.file = join(dataDir, DB_FILE);
    if (!existsSync(this.file)) {
      throw new MoatError('STORE_NO_DATABASE', `no database at ${this.file}; give --from the data directory \`moat serve --data-dir\` uses`);
    }
    try {
      this.db = new BetterSqlite3(this.file, { readonly: true, fileMustExist: true, timeout: 5000 });
    } catch (err) {
      throw new MoatError('STORE_OPEN', `${this.file}: cannot open the database: ${(err as Error).message}`, { cause: err });
    }
    try {
      // A WAL read transaction: from its first read on, every statement sees
      // the same committed state, whatever other connections commit meanwhile.
      this.db.exec('BEGIN');
      const version = this.db.pragma('user_version', { simple: true }) as number;
      if (version > MIGRATIONS.length) {
        throw new MoatError('STORE_NEWER_SCHEMA', `${this.file}: schema version ${version} is newer than this Moat knows (${MIGRATIONS.length}); use the Moat that wrote it`);
      }
      if (version < MIGRATIONS.length) {
        throw new MoatError('STORE_SCHEMA_MISMATCH', `${this.file}: schema version ${version}, this Moat's is ${MIGRATIONS.length}; start \`moat serve --data-dir\` of this Moat on it once (it migrates at start), then copy it`);
      }
      this.tables = this.readTables();
    } catch (err) {
      this.db.close();
      throw err instanceof MoatError ? err : new MoatError('STORE_OPEN', `${this.file}: cannot read the database: ${(err as Error).message}`, { cause: err });
    }
  }

  private readTables(): SourceTable[] {
    const names = this.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as { name: string }[];
    return names.map(({ name }) => {
      const info = this.db.prepare(`SELECT name, pk FROM pragma_table_info(?) ORDER BY cid`).all(name) as { name: string; pk: number }[];
      const keyCols = info.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
      // The PostgreSQL twins of these tables keep SQLite's implicit rowid as a column (pg-migrations.ts, migration 9).
      const columns = [...(PG_ONLY_COLUMNS.includes(`${name}.rowid`) ? ['rowid'] : []), ...info.map((c) => c.name)];
      const parents = [...new Set((this.db.prepare('SELECT "table" AS t FROM pragma_foreign_key_list(?)').all(name) as { t: string }[]).map((r) => r.t).filter((t) => t !== name))];
      // A table without a declared key (ruleset_rules has a UNIQUE of all its identifying columns) is ordered by whole rows.
      return { name, columns, key: keyCols.length > 0 ? keyCols : columns, parents };
    });
  }

  rows(t: SourceTable): unknown[][] {
    const sql = `SELECT ${t.columns.map(quote).join(', ')} FROM ${quote(t.name)}`;
    // Objects, not raw mode: src/ never switches a statement's mode (test/store/database.test.ts), even on this private connection.
    return (this.db.prepare(sql).all() as Record<string, unknown>[]).map((r) => t.columns.map((c) => r[c]));
  }

  close(): void {
    try {
      this.db.exec('COMMIT');
    } finally {
      this.db.close();
    }
  }
}

function quote(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}

/**
 * The canonical text of one value, the same for a value read from SQLite
 * (better-sqlite3) and from PostgreSQL (pg with int8 as numbers): null,
 * numbers (INTEGER/BIGINT, REAL/DOUBLE PRECISION) by their shortest decimal
 * text, strings as JSON strings (TEXT and CITEXT), blobs (BLOB/BYTEA) in hex.
 */
export function canonicalValue(v: unknown): string {
  if (v === null || v === undefined) return 'n';
  if (typeof v === 'number') return `d${Object.is(v, -0) ? '0' : String(v)}`;
  if (typeof v === 'bigint') return `d${v.toString()}`;
  if (typeof v === 'string') return `s${JSON.stringify(v)}`;
  if (Buffer.isBuffer(v)) return `x${v.toString('hex')}`;
  if (v instanceof Uint8Array) return `x${Buffer.from(v).toString('hex')}`;
  throw new MoatError('STORE_COPY_MISMATCH', `a value of an unexpected type (${Object.prototype.toString.call(v)}) cannot be compared`);
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * A table's digest: each row encoded canonically (its columns in `columns`
 * order), rows ordered by their primary key's encoding (then the whole row),
 * sorted here rather than by either database, since SQLite's NOCASE and
 * PostgreSQL's collations order text differently.
 */
export function tableDigest(columns: readonly string[], key: readonly string[], rows: readonly unknown[][]): string {
  const keyAt = key.map((k) => columns.indexOf(k));
  const encoded = rows.map((r) => ({ key: keyAt.map((i) => canonicalValue(r[i])).join(','), row: r.map(canonicalValue).join(',') }));
  encoded.sort((a, b) => compare(a.key, b.key) || compare(a.row, b.row));
  const h = createHash('sha256');
  for (const e of encoded) h.update(e.row).update('\n');
  return h.digest('hex');
}

/** Tables in an order where each comes after those it references (8031 on a cycle, which Moat's schema has none of). */
function dependencyOrder(tables: readonly SourceTable[]): SourceTable[] {
  const byName = new Map(tables.map((t) => [t.name, t]));
  const done = new Set<string>();
  const visiting = new Set<string>();
  const order: SourceTable[] = [];
  const visit = (t: SourceTable): void => {
    if (done.has(t.name)) return;
    if (visiting.has(t.name)) throw new MoatError('STORE_SCHEMA_MISMATCH', `table ${t.name} is part of a cycle of foreign keys; no copy order exists`);
    visiting.add(t.name);
    for (const p of t.parents) {
      const parent = byName.get(p);
      if (parent !== undefined) visit(parent);
    }
    visiting.delete(t.name);
    done.add(t.name);
    order.push(t);
  };
  for (const t of tables) visit(t);
  return order;
}

/** The target's tables (public schema) and their columns. */
async function targetColumns(client: PgClient): Promise<Map<string, Set<string>>> {
  const rows = (await client.query<{ t: string; c: string }>(
    `SELECT table_name AS t, column_name AS c FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`,
  )).rows;
  const out = new Map<string, Set<string>>();
  for (const r of rows) {
    let s = out.get(r.t);
    if (s === undefined) out.set(r.t, (s = new Set()));
    s.add(r.c);
  }
  return out;
}

/**
 * Every SQLite table must have a PostgreSQL twin with the same columns (plus
 * the PostgreSQL-only ones the schema allows): otherwise 8031 naming what is
 * missing, before anything is written.
 */
function checkParity(tables: readonly SourceTable[], target: Map<string, Set<string>>): void {
  const problems: string[] = [];
  for (const t of tables) {
    const cols = target.get(t.name);
    if (cols === undefined) {
      problems.push(`table ${t.name} has no PostgreSQL counterpart`);
      continue;
    }
    for (const c of t.columns) if (!cols.has(c)) problems.push(`column ${t.name}.${c} has no PostgreSQL counterpart`);
    for (const c of cols) if (!t.columns.includes(c) && !PG_ONLY_COLUMNS.includes(`${t.name}.${c}`)) problems.push(`PostgreSQL column ${t.name}.${c} has no SQLite counterpart`);
  }
  if (problems.length > 0) {
    throw new MoatError('STORE_SCHEMA_MISMATCH', `the SQLite and PostgreSQL schemas differ, nothing was copied: ${problems.join('; ')}`);
  }
}

/** Moat's tables in the target other than the schema's own record, with their row counts (those above 0). */
async function targetRows(client: PgClient, target: Map<string, Set<string>>): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of [...target.keys()].sort()) {
    if (t === 'moat_schema') continue;
    const n = Number((await client.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${quote(t)}`)).rows[0]!.n);
    if (n > 0) out[t] = n;
  }
  return out;
}

async function insertRows(client: PgClient, t: SourceTable, rows: readonly unknown[][]): Promise<void> {
  const cols = t.columns.map(quote).join(', ');
  for (let start = 0; start < rows.length; start += BATCH_ROWS) {
    const batch = rows.slice(start, start + BATCH_ROWS);
    const params: unknown[] = [];
    const tuples = batch.map((r) => `(${r.map((v) => `$${params.push(v)}`).join(', ')})`);
    await client.query(`INSERT INTO ${quote(t.name)} (${cols}) VALUES ${tuples.join(', ')}`, params);
  }
}

/** Sets every identity column of the target past its highest value, so the next row drawn gets max + 1. */
async function bumpIdentities(client: PgClient): Promise<void> {
  const ids = (await client.query<{ t: string; c: string }>(
    `SELECT table_name AS t, column_name AS c FROM information_schema.columns WHERE table_schema = current_schema() AND is_identity = 'YES'`,
  )).rows;
  for (const { t, c } of ids) {
    await client.query(
      `SELECT setval(pg_get_serial_sequence($1, $2), COALESCE((SELECT max(${quote(c)}) FROM ${quote(t)}), 0) + 1, false)`,
      [quote(t), c],
    );
  }
}

async function compareAll(source: Source, sourceDigests: Map<string, { rows: number; digest: string }>, client: PgClient, tables: readonly SourceTable[]): Promise<TableCheck[]> {
  const checks: TableCheck[] = [];
  for (const t of [...tables].sort((a, b) => compare(a.name, b.name))) {
    let s = sourceDigests.get(t.name);
    if (s === undefined) {
      const rows = source.rows(t);
      s = { rows: rows.length, digest: tableDigest(t.columns, t.key, rows) };
    }
    const res = await client.query({ text: `SELECT ${t.columns.map(quote).join(', ')} FROM ${quote(t.name)}`, rowMode: 'array' });
    const pgRows = res.rows as unknown[][];
    const pgDigest = tableDigest(t.columns, t.key, pgRows);
    checks.push({ table: t.name, sqliteRows: s.rows, postgresRows: pgRows.length, sqliteDigest: s.digest, postgresDigest: pgDigest, ok: s.rows === pgRows.length && s.digest === pgDigest });
  }
  return checks;
}

async function connectTarget(url: string, migrate: boolean): Promise<PgDatabase> {
  return PgDatabase.connect(url, { max: 2, applicationName: 'moat-migrate-store', migrate });
}

/**
 * Copies the SQLite database of `from` into the PostgreSQL database at `to`
 * (its schema migrated first): refuses (8030) a target holding any Moat row
 * unless `replaceTarget`, which empties the target's Moat tables in the same
 * transaction, so the target ends an exact copy; copies every table in
 * foreign-key order, ids, hashes, rowids, blobs and timestamps as they are;
 * moves each identity past the copied rowids; then counts and digests every
 * table on both sides before COMMIT. A mismatch (8032, with the report) rolls
 * everything back.
 */
export async function migrateStore(options: MigrateStoreOptions): Promise<StoreReport> {
  const source = new Source(options.from);
  try {
    const db = await connectTarget(options.to, true);
    try {
      return await db.write(
        async (client) => {
          // One copy at a time per target; a second waits, then finds the target not empty.
          await client.query('SELECT pg_advisory_xact_lock($1, $2)', [MOAT_LOCK_CLASS, COPY_LOCK]);
          const target = await targetColumns(client);
          checkParity(source.tables, target);
          const present = await targetRows(client, target);
          if (Object.keys(present).length > 0) {
            if (options.replaceTarget !== true) {
              const list = Object.entries(present).map(([t, n]) => `${t} (${n})`).join(', ');
              throw new MoatError('STORE_TARGET_NOT_EMPTY', `the PostgreSQL database ${db.target.description} already holds Moat data: ${list}; nothing was copied. Give --replace-target to delete it and copy, or use an empty database`);
            }
            const moatTables = [...target.keys()].filter((t) => t !== 'moat_schema');
            await client.query(`TRUNCATE ${moatTables.map(quote).join(', ')} RESTART IDENTITY`);
          }
          const digests = new Map<string, { rows: number; digest: string }>();
          for (const t of dependencyOrder(source.tables)) {
            const rows = source.rows(t);
            options.afterTableRead?.(t.name);
            digests.set(t.name, { rows: rows.length, digest: tableDigest(t.columns, t.key, rows) });
            await insertRows(client, t, rows);
          }
          await bumpIdentities(client);
          await options.beforeVerify?.(client);
          const tables = await compareAll(source, digests, client, source.tables);
          const report: StoreReport = { from: source.file, to: db.target.description, tables, replaced: options.replaceTarget === true ? present : {}, ok: tables.every((t) => t.ok) };
          if (!report.ok) throw new StoreMismatchError(report);
          return report;
        },
        // One attempt: a copy that meets a concurrent writer fails rather than runs twice.
        { isolation: 'serializable', attempts: 1 },
      );
    } finally {
      await db.close();
    }
  } finally {
    source.close();
  }
}

/**
 * Compares the SQLite database of `from` with the PostgreSQL database at
 * `to` (read on one snapshot each), table by table; 8032 with the report
 * when any count or digest differs. Changes nothing on either side.
 */
export async function verifyStore(options: Pick<MigrateStoreOptions, 'from' | 'to'>): Promise<StoreReport> {
  const source = new Source(options.from);
  try {
    const db = await connectTarget(options.to, false);
    try {
      // Planned apart: a query naming moat_schema fails to plan where the table is missing, whatever its CASE says.
      const hasSchema = (await db.query<{ t: string | null }>("SELECT to_regclass('moat_schema')::text AS t"))[0]?.t != null;
      const version = hasSchema ? ((await db.query<{ v: number | null }>('SELECT max(version) AS v FROM moat_schema'))[0]?.v ?? 0) : 0;
      if (version !== PG_MIGRATIONS.length) {
        throw new MoatError('STORE_SCHEMA_MISMATCH', `the PostgreSQL database ${db.target.description} is at schema version ${version}, not ${PG_MIGRATIONS.length}: it is not a copy made by this Moat`);
      }
      return await db.read(async (client) => {
        checkParity(source.tables, await targetColumns(client));
        const tables = await compareAll(source, new Map(), client, source.tables);
        const report: StoreReport = { from: source.file, to: db.target.description, tables, replaced: {}, ok: tables.every((t) => t.ok) };
        if (!report.ok) throw new StoreMismatchError(report);
        return report;
      });
    } finally {
      await db.close();
    }
  } finally {
    source.close();
  }
}
