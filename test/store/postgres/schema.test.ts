// The PostgreSQL schema cannot drift from SQLite's silently: both are built
// from their migrations (SQLite's in memory, PostgreSQL's in a fresh database)
// and compared table by table: the same tables (PostgreSQL's own, moat_schema
// and moat_leases, aside), the same columns in the same order with matching
// types, NOT NULL and defaults, the same named indexes, and the same primary
// and unique keys. A SQLite migration that adds a table or a column fails this
// test until PostgreSQL's list has it too (shown below with a planted one).
import BetterSqlite3 from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS } from '../../../src/store/migrations.js';
import { PG_ONLY_COLUMNS, PG_ONLY_TABLES, PgDatabase } from '../../../src/store/index.js';
import { requirePostgres, usePostgres } from '../../support/postgres.js';

const RUN = requirePostgres();
const cluster = usePostgres(RUN);

interface Column {
  name: string;
  /** SQLite's declared type (TEXT, INTEGER, BLOB, REAL), or PostgreSQL's mapped back to it. */
  type: string;
  notNull: boolean;
  default: string | null;
  nocase: boolean;
}
interface Index {
  name: string;
  unique: boolean;
  partial: boolean;
  columns: string[];
}
interface Table {
  columns: Column[];
  /** Indexes made by CREATE INDEX, by name. */
  indexes: Index[];
  /** Primary and unique keys, as column lists. */
  keys: string[];
}
type Schema = Map<string, Table>;

function sqliteSchema(extra: string[] = []): Schema {
  const db = new BetterSqlite3(':memory:');
  for (const m of [...MIGRATIONS, ...extra]) db.exec(m);
  const schema: Schema = new Map();
  const tables = db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as Array<{ name: string; sql: string }>;
  for (const t of tables) {
    const info = db.prepare(`PRAGMA table_info(${t.name})`).all() as Array<{ name: string; type: string; notnull: number; dflt_value: string | null; pk: number }>;
    const columns = info.map((c) => ({
      name: c.name,
      type: c.type,
      notNull: c.notnull === 1 || c.pk > 0,
      default: c.dflt_value,
      nocase: new RegExp(`\\b${c.name} TEXT[^,]*COLLATE NOCASE`).test(t.sql),
    }));
    const keys = new Set<string>();
    const pk = info.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
    if (pk.length > 0) keys.add(pk.join(','));
    const indexes: Index[] = [];
    for (const ix of db.prepare(`PRAGMA index_list(${t.name})`).all() as Array<{ name: string; unique: number; origin: string; partial: number }>) {
      const cols = (db.prepare(`PRAGMA index_info(${JSON.stringify(ix.name)})`).all() as Array<{ name: string | null }>).map((c) => c.name ?? '<expr>');
      if (ix.origin === 'c') indexes.push({ name: ix.name, unique: ix.unique === 1, partial: ix.partial === 1, columns: cols });
      else keys.add(cols.join(','));
    }
    schema.set(t.name, { columns, indexes: indexes.sort((a, b) => a.name.localeCompare(b.name)), keys: [...keys].sort() });
  }
  db.close();
  return schema;
}

const PG_TYPES: Record<string, string> = { text: 'TEXT', citext: 'TEXT', int8: 'INTEGER', bytea: 'BLOB', float8: 'REAL' };

async function postgresSchema(url: string): Promise<Schema> {
  const d = await PgDatabase.connect(url);
  try {
    const cols = await d.query<{ table_name: string; column_name: string; udt_name: string; is_nullable: string; column_default: string | null }>(
      `SELECT table_name, column_name, udt_name, is_nullable, column_default FROM information_schema.columns
       WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`,
    );
    const idx = await d.query<{ table_name: string; index_name: string; unique: boolean; primary: boolean; partial: boolean; constraint: boolean; columns: string[] }>(
      `SELECT c.relname AS table_name, i.relname AS index_name, x.indisunique AS unique, x.indisprimary AS primary,
              x.indpred IS NOT NULL AS partial,
              EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid) AS constraint,
              array(SELECT CASE WHEN u.k = 0 THEN '<expr>' ELSE a.attname::text END
                    FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS u(k, n)
                    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = u.k ORDER BY u.n) AS columns
       FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
       JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = current_schema()`,
    );
    const schema: Schema = new Map();
    for (const c of cols) {
      if (!schema.has(c.table_name)) schema.set(c.table_name, { columns: [], indexes: [], keys: [] });
      schema.get(c.table_name)!.columns.push({
        name: c.column_name,
        type: PG_TYPES[c.udt_name] ?? c.udt_name,
        notNull: c.is_nullable === 'NO',
        // '0', '''[]''::text' -> SQLite's spelling of the same default.
        default: c.column_default === null ? null : c.column_default.replace(/::[a-z ]+$/, ''),
        nocase: c.udt_name === 'citext',
      });
    }
    for (const ix of idx) {
      const t = schema.get(ix.table_name)!;
      if (ix.primary || ix.constraint) t.keys.push(ix.columns.join(','));
      else t.indexes.push({ name: ix.index_name, unique: ix.unique, partial: ix.partial, columns: ix.columns });
    }
    for (const t of schema.values()) {
      t.indexes.sort((a, b) => a.name.localeCompare(b.name));
      t.keys.sort();
    }
    return schema;
  } finally {
    await d.close();
  }
}

/** What PostgreSQL lacks or has differently, one line per difference. */
function differences(sqlite: Schema, pg: Schema): string[] {
  const out: string[] = [];
  for (const [name, t] of sqlite) {
    const p = pg.get(name);
    if (p === undefined) {
      out.push(`table ${name}: missing in PostgreSQL`);
      continue;
    }
    const pgCols = new Map(p.columns.map((c) => [c.name, c]));
    for (const c of t.columns) {
      const q = pgCols.get(c.name);
      if (q === undefined) out.push(`column ${name}.${c.name}: missing in PostgreSQL`);
      else {
        for (const k of ['type', 'notNull', 'default', 'nocase'] as const) {
          if (c[k] !== q[k]) out.push(`column ${name}.${c.name}: ${k} ${JSON.stringify(c[k])} in SQLite, ${JSON.stringify(q[k])} in PostgreSQL`);
        }
      }
    }
    for (const q of p.columns) if (!t.columns.some((c) => c.name === q.name) && !PG_ONLY_COLUMNS.includes(`${name}.${q.name}`)) out.push(`column ${name}.${q.name}: only in PostgreSQL`);
    const order = (cols: Column[]) => cols.map((c) => c.name).filter((c) => !PG_ONLY_COLUMNS.includes(`${name}.${c}`)).join(',');
    if (order(t.columns) !== order(p.columns) && t.columns.length === p.columns.filter((c) => !PG_ONLY_COLUMNS.includes(`${name}.${c.name}`)).length) out.push(`table ${name}: columns in another order`);
    if (JSON.stringify(t.indexes) !== JSON.stringify(p.indexes)) out.push(`table ${name}: indexes ${JSON.stringify(t.indexes)} in SQLite, ${JSON.stringify(p.indexes)} in PostgreSQL`);
    if (JSON.stringify(t.keys) !== JSON.stringify(p.keys)) out.push(`table ${name}: keys ${JSON.stringify(t.keys)} in SQLite, ${JSON.stringify(p.keys)} in PostgreSQL`);
  }
  for (const name of pg.keys()) if (!sqlite.has(name) && !PG_ONLY_TABLES.includes(name)) out.push(`table ${name}: only in PostgreSQL`);
  return out;
}

describe.skipIf(!RUN)('the PostgreSQL schema against SQLite\'s', () => {
  it('has every table, column, index and key of SQLite\'s, with matching types', async () => {
    const sqlite = sqliteSchema();
    const pg = await postgresSchema(await cluster().createDatabase());
    // The comparison sees real content on both sides (a schema read as empty would pass).
    expect(sqlite.size).toBeGreaterThanOrEqual(30);
    expect(sqlite.get('users')!.columns.find((c) => c.name === 'email')).toEqual({ name: 'email', type: 'TEXT', notNull: true, default: null, nocase: true });
    expect(pg.get('lb_origin_health')!.columns.find((c) => c.name === 'rtt_ms')!.type).toBe('REAL');
    expect(pg.get('rulesets')!.indexes.find((i) => i.name === 'rulesets_one_entrypoint')).toEqual({ name: 'rulesets_one_entrypoint', unique: true, partial: true, columns: ['<expr>', '<expr>', 'phase'] });
    expect(differences(sqlite, pg)).toEqual([]);
    expect([...pg.keys()].filter((t) => !sqlite.has(t)).sort()).toEqual([...PG_ONLY_TABLES].sort());
  });

  it('fails when a SQLite migration adds a table, a column or an index that PostgreSQL lacks', async () => {
    const planted = sqliteSchema([
      `CREATE TABLE pool_notes (id TEXT PRIMARY KEY, note TEXT NOT NULL) STRICT;
       ALTER TABLE lists ADD COLUMN color TEXT;
       CREATE INDEX daemons_seen ON daemons(last_seen);`,
    ]);
    const pg = await postgresSchema(await cluster().createDatabase());
    const diff = differences(planted, pg);
    expect(diff).toContain('table pool_notes: missing in PostgreSQL');
    expect(diff).toContain('column lists.color: missing in PostgreSQL');
    expect(diff.some((d) => d.startsWith('table daemons: indexes'))).toBe(true);
    expect(diff).toHaveLength(3);
  });
});
