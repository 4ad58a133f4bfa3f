// The PostgreSQL schema, as its own ordered list of migrations, and the
// migrator several replicas can run at once. Tables and columns are those of
// the SQLite schema (../migrations.ts) with the same names, so the
// repositories' SQL is mostly shared; test/store/postgres/schema.test.ts
// compares the two, table by table, so they cannot drift apart silently.
//
// Types, chosen so a row reads back as better-sqlite3 gives it:
// * TEXT stays TEXT, timestamps included: the API's timestamps are strings
//   Moat formats itself (ISO 8601 with microseconds, "Z"), and TIMESTAMPTZ
//   would store microseconds but give them back reformatted;
// * SQLite's INTEGER (64 bits) is BIGINT, read back as a JS number (int8
//   parser in connection.ts); flags stay 0/1 integers, as the code compares
//   them (`r.connected === 1`);
// * BLOB is BYTEA (a Buffer either way); REAL is DOUBLE PRECISION (SQLite's
//   REAL is 8 bytes; PostgreSQL's REAL is 4);
// * COLLATE NOCASE is CITEXT: in a database of locale C, citext compares
//   ASCII letters without case, as NOCASE does, so `email = $1` finds
//   `Ops@Example.com` on both; it is a trusted extension, which the owner of
//   the database may create;
// * SQLite's triggers (list generations) are PL/pgSQL trigger functions with
//   the same effect (+1 whenever an UPDATE sets modified_on);
// * ifnull is COALESCE; STRICT and WITHOUT ROWID have no counterpart (a
//   PostgreSQL column already has one type, a table no rowid).
//
// Numbering is PostgreSQL's own (moat_schema holds one row per applied
// migration): today 1-7 make the same tables as SQLite's 1-7, without their
// data conversions (no PostgreSQL database existed before version 7), and 8
// onwards exist only here (leases, for work shared by replicas; rowid columns). Never edit a
// migration that shipped; append a new one, and mirror a new SQLite table or
// column here (the schema test fails until it is).

import { MoatError } from '../../errors/index.js';
import { mapPgError } from './connection.js';
import type { PgDatabase } from './pg-database.js';

/** Migrations in order; migration N (1-based) brings the schema to version N. */
export const PG_MIGRATIONS: readonly string[] = [
  // 1: as SQLite's 1.
  `
  CREATE EXTENSION IF NOT EXISTS citext;
  CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    created_on TEXT NOT NULL
  );
  CREATE TABLE zones (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    created_on TEXT NOT NULL
  );
  CREATE TABLE users (
    id TEXT PRIMARY KEY,
    email CITEXT NOT NULL UNIQUE,
    created_on TEXT NOT NULL
  );
  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    salt BYTEA NOT NULL,
    hash BYTEA NOT NULL,
    hint TEXT NOT NULL,
    created_on TEXT NOT NULL,
    revoked_on TEXT
  );
  CREATE INDEX api_keys_user ON api_keys(user_id);
  CREATE TABLE user_accounts (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    PRIMARY KEY (user_id, account_id)
  );
  CREATE TABLE user_zones (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    zone_id TEXT NOT NULL REFERENCES zones(id),
    PRIMARY KEY (user_id, zone_id)
  );
  CREATE TABLE rulesets (
    id TEXT PRIMARY KEY,
    account_id TEXT REFERENCES accounts(id),
    zone_id TEXT REFERENCES zones(id),
    kind TEXT NOT NULL,
    phase TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    latest_version BIGINT NOT NULL,
    last_version BIGINT NOT NULL,
    created_on TEXT NOT NULL
  );
  CREATE INDEX rulesets_account ON rulesets(account_id);
  CREATE INDEX rulesets_zone ON rulesets(zone_id);
  CREATE UNIQUE INDEX rulesets_one_entrypoint ON rulesets(COALESCE(account_id, ''), COALESCE(zone_id, ''), phase)
    WHERE kind IN ('root', 'zone');
  CREATE TABLE ruleset_versions (
    ruleset_id TEXT NOT NULL REFERENCES rulesets(id) ON DELETE CASCADE,
    version BIGINT NOT NULL,
    description TEXT NOT NULL,
    last_updated TEXT NOT NULL,
    rules TEXT NOT NULL,
    PRIMARY KEY (ruleset_id, version)
  );
  CREATE TABLE ruleset_list_refs (
    ruleset_id TEXT NOT NULL REFERENCES rulesets(id) ON DELETE CASCADE,
    list_name TEXT NOT NULL,
    PRIMARY KEY (ruleset_id, list_name)
  );
  CREATE INDEX ruleset_list_refs_name ON ruleset_list_refs(list_name);
  CREATE TABLE ruleset_execute_refs (
    ruleset_id TEXT NOT NULL REFERENCES rulesets(id) ON DELETE CASCADE,
    target_id TEXT NOT NULL,
    target_version BIGINT,
    PRIMARY KEY (ruleset_id, target_id)
  );
  CREATE INDEX ruleset_execute_refs_target ON ruleset_execute_refs(target_id);
  CREATE TABLE lists (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_on TEXT NOT NULL,
    modified_on TEXT NOT NULL,
    UNIQUE (account_id, name)
  );
  CREATE TABLE list_items (
    id TEXT PRIMARY KEY,
    list_id TEXT NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
    ip TEXT NOT NULL,
    sort_key BYTEA NOT NULL,
    comment TEXT,
    created_on TEXT NOT NULL,
    modified_on TEXT NOT NULL,
    UNIQUE (list_id, ip)
  );
  CREATE INDEX list_items_order ON list_items(list_id, sort_key);
  CREATE TABLE bulk_operations (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    list_id TEXT NOT NULL,
    op TEXT NOT NULL,
    payload TEXT,
    status TEXT NOT NULL,
    error TEXT,
    created_on TEXT NOT NULL,
    completed TEXT
  );
  CREATE INDEX bulk_operations_pending ON bulk_operations(status, created_on);
  CREATE TABLE managed_list_entries (
    name TEXT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (name, entry)
  );
  CREATE TABLE managed_lists (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    num_items BIGINT NOT NULL,
    modified_on TEXT NOT NULL
  );
  `,
  // 2: as SQLite's 2 (rules stored once per rule version; a token per version row).
  `
  CREATE TABLE ruleset_rules (
    ruleset_id TEXT NOT NULL REFERENCES rulesets(id) ON DELETE CASCADE,
    rule_id TEXT NOT NULL,
    rule_version BIGINT NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (ruleset_id, rule_id, rule_version)
  );
  ALTER TABLE ruleset_versions ADD COLUMN token BIGINT NOT NULL DEFAULT 0;
  `,
  // 3: as SQLite's 3 (API tokens).
  `
  CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    hash BYTEA NOT NULL UNIQUE,
    read_only BIGINT NOT NULL,
    created_on TEXT NOT NULL,
    revoked_on TEXT
  );
  CREATE INDEX api_tokens_user ON api_tokens(user_id);
  CREATE TABLE api_token_accounts (
    token_id TEXT NOT NULL REFERENCES api_tokens(id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    PRIMARY KEY (token_id, account_id)
  );
  `,
  // 4: as SQLite's 4 (keys under an HMAC; the installation's secret).
  `
  ALTER TABLE api_keys ADD COLUMN scheme TEXT NOT NULL DEFAULT 'scrypt';
  CREATE INDEX api_keys_hash ON api_keys(hash);
  CREATE TABLE auth_secret (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    secret BYTEA NOT NULL
  );
  `,
  // 5: as SQLite's 5 (daemons; list generations counted by triggers).
  `
  CREATE TABLE daemons (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    zone_id TEXT REFERENCES zones(id),
    name TEXT NOT NULL,
    hash BYTEA NOT NULL UNIQUE,
    created_on TEXT NOT NULL,
    revoked_on TEXT,
    connected BIGINT NOT NULL DEFAULT 0,
    connected_since TEXT,
    disconnected_at TEXT,
    remote_address TEXT,
    moat_version TEXT,
    digest TEXT,
    account_version TEXT,
    zone_version TEXT,
    runs TEXT NOT NULL DEFAULT '[]',
    applied_on TEXT,
    last_rejection TEXT,
    counters TEXT,
    last_seen TEXT,
    UNIQUE (account_id, name)
  );
  ALTER TABLE lists ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
  ALTER TABLE managed_lists ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
  -- SQLite's AFTER UPDATE OF modified_on triggers add 1 to the row just
  -- written; BEFORE UPDATE OF with NEW.generation + 1 does the same in one write.
  CREATE FUNCTION moat_bump_generation() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN NEW.generation := NEW.generation + 1; RETURN NEW; END;
  $$;
  CREATE TRIGGER lists_generation BEFORE UPDATE OF modified_on ON lists
    FOR EACH ROW EXECUTE FUNCTION moat_bump_generation();
  CREATE TRIGGER managed_lists_generation BEFORE UPDATE OF modified_on ON managed_lists
    FOR EACH ROW EXECUTE FUNCTION moat_bump_generation();
  `,
  // 6: as SQLite's 6 (notifications: policies, webhooks, outbox, incidents, history).
  `
  CREATE TABLE alert_policies (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    enabled BIGINT NOT NULL,
    alert_type TEXT NOT NULL,
    alert_interval TEXT,
    filters TEXT,
    mechanisms TEXT NOT NULL,
    created TEXT NOT NULL,
    modified TEXT NOT NULL
  );
  CREATE INDEX alert_policies_account ON alert_policies(account_id, alert_type);
  CREATE TABLE alert_webhooks (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    secret TEXT,
    type TEXT NOT NULL,
    created_at TEXT NOT NULL,
    last_success TEXT,
    last_failure TEXT
  );
  CREATE INDEX alert_webhooks_account ON alert_webhooks(account_id);
  CREATE TABLE alert_outbox (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    policy_id TEXT,
    event_id TEXT NOT NULL,
    mechanism_type TEXT NOT NULL,
    target TEXT NOT NULL,
    payload TEXT NOT NULL,
    created TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_ms BIGINT NOT NULL,
    lease_owner TEXT,
    lease_until_ms BIGINT,
    last_error TEXT,
    done_at TEXT
  );
  CREATE INDEX alert_outbox_due ON alert_outbox(status, next_attempt_ms);
  CREATE TABLE alert_incidents (
    account_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    correlation_id TEXT NOT NULL,
    PRIMARY KEY (account_id, subject)
  );
  CREATE TABLE alert_history (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    policy_id TEXT,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    alert_type TEXT NOT NULL,
    alert_body TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    mechanism_type TEXT NOT NULL,
    sent TEXT NOT NULL,
    outcome TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    status_code BIGINT,
    error TEXT
  );
  CREATE INDEX alert_history_account ON alert_history(account_id, sent);
  CREATE TABLE alert_deprecation_notices (
    account_id TEXT NOT NULL,
    address CITEXT NOT NULL,
    last_sent_ms BIGINT NOT NULL,
    PRIMARY KEY (account_id, address)
  );
  `,
  // 7: as SQLite's 7 (load balancer pools and monitors, their health).
  `
  CREATE TABLE lb_monitors (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    body TEXT NOT NULL,
    created_on TEXT NOT NULL,
    modified_on TEXT NOT NULL
  );
  CREATE INDEX lb_monitors_account ON lb_monitors(account_id);
  CREATE TABLE lb_pools (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    monitor_id TEXT REFERENCES lb_monitors(id),
    body TEXT NOT NULL,
    created_on TEXT NOT NULL,
    modified_on TEXT NOT NULL
  );
  CREATE INDEX lb_pools_account_name ON lb_pools(account_id, name, id);
  CREATE INDEX lb_pools_monitor ON lb_pools(monitor_id);
  CREATE TABLE lb_origin_health (
    pool_id TEXT NOT NULL REFERENCES lb_pools(id) ON DELETE CASCADE,
    origin_name TEXT NOT NULL,
    address TEXT NOT NULL,
    health TEXT,
    ups BIGINT NOT NULL DEFAULT 0,
    downs BIGINT NOT NULL DEFAULT 0,
    failure_reason TEXT NOT NULL DEFAULT '',
    response_code BIGINT,
    rtt_ms DOUBLE PRECISION,
    checked_on TEXT,
    PRIMARY KEY (pool_id, origin_name)
  );
  CREATE TABLE lb_pool_health (
    pool_id TEXT PRIMARY KEY REFERENCES lb_pools(id) ON DELETE CASCADE,
    health TEXT
  );
  CREATE TABLE health_events (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    pool_id TEXT NOT NULL,
    event_source TEXT NOT NULL,
    origin_name TEXT,
    origin_address TEXT,
    old_health TEXT,
    new_health TEXT NOT NULL,
    reason TEXT NOT NULL,
    at TEXT NOT NULL
  );
  CREATE INDEX health_events_account_at ON health_events(account_id, at);
  `,
  // 8 (PostgreSQL only): named leases for work that one replica at a time
  // does (leases.ts). epoch grows at each change of owner: a fencing token.
  // Times are the server's clock, so replicas' clocks need not agree.
  `
  CREATE TABLE moat_leases (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
  );
  `,
  // 9 (PostgreSQL only): the insertion order SQLite's implicit rowid gives,
  // which the repositories sort and page by (rulesets' keyset cursor, a
  // list's items' FIFO of bulk operations, lists created in the same
  // millisecond, health events and history rows sharing one stamp). Named
  // rowid so the SQL reads as SQLite's; BY DEFAULT so migrate-store can copy
  // SQLite's numbers. Numbers are drawn at INSERT, not at COMMIT: between
  // concurrent writers the order is the one they inserted in.
  `
  ALTER TABLE rulesets ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY;
  ALTER TABLE lists ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY;
  ALTER TABLE bulk_operations ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY;
  ALTER TABLE health_events ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY;
  ALTER TABLE alert_history ADD COLUMN rowid BIGINT GENERATED BY DEFAULT AS IDENTITY;
  `,
];

/**
 * Columns that exist only in the PostgreSQL schema, as table.column (the
 * schema test allows these): SQLite's implicit rowid, made explicit.
 */
export const PG_ONLY_COLUMNS: readonly string[] = ['rulesets.rowid', 'lists.rowid', 'bulk_operations.rowid', 'health_events.rowid', 'alert_history.rowid'];

/** The tables that exist only in the PostgreSQL schema (the schema test allows these). */
export const PG_ONLY_TABLES: readonly string[] = ['moat_schema', 'moat_leases'];

/**
 * The advisory lock keys of Moat: pg_advisory_lock(MOAT_LOCK_CLASS, n). The
 * class is "moat" in ASCII, so Moat's locks are recognisable in pg_locks
 * (classid 1836016500) and keep clear of other applications' on a shared server.
 */
export const MOAT_LOCK_CLASS = 0x6d6f6174;
export const MIGRATION_LOCK = 1;

/** What one migrator did. */
export interface MigrationReport {
  /** The version found (0: an empty database). */
  from: number;
  /** The version left (PG_MIGRATIONS.length). */
  to: number;
  /** The migrations this migrator applied (others may have applied the rest). */
  applied: number[];
}

/**
 * Brings the schema to the latest version, once across every replica that
 * starts at the same time: a migrator holds Moat's migration advisory lock
 * (a session lock, freed by the server if the replica dies) while it reads
 * the version and applies what is missing, each migration in a transaction
 * of its own with its row in moat_schema; the others wait for the lock and
 * then find nothing left to do. 8004 when the database is newer than this
 * Moat; 8002 naming the migration that failed.
 */
export async function migratePostgres(db: PgDatabase, migrator: string, migrations: readonly string[] = PG_MIGRATIONS): Promise<MigrationReport> {
  const client = await db.connection();
  let broken: Error | undefined;
  try {
    await client.query('SELECT pg_advisory_lock($1, $2)', [MOAT_LOCK_CLASS, MIGRATION_LOCK]);
    try {
      await client.query(`CREATE TABLE IF NOT EXISTS moat_schema (
        version BIGINT PRIMARY KEY,
        applied_on TEXT NOT NULL,
        applied_by TEXT NOT NULL
      )`);
      const row = (await client.query<{ v: number | null }>('SELECT max(version) AS v FROM moat_schema')).rows[0];
      const from = row?.v ?? 0;
      if (from > migrations.length) {
        throw new MoatError('STORE_NEWER_SCHEMA', `PostgreSQL ${db.target.description}: schema version ${from} is newer than this Moat knows (${migrations.length}); upgrade Moat`);
      }
      const applied: number[] = [];
      for (let v = from; v < migrations.length; v++) {
        try {
          await client.query('BEGIN');
          await client.query(migrations[v]!);
          await client.query('INSERT INTO moat_schema (version, applied_on, applied_by) VALUES ($1, $2, $3)', [v + 1, new Date().toISOString(), migrator]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch((e: Error) => {
            broken = e;
          });
          const mapped = mapPgError(err, db.target);
          if (mapped instanceof MoatError) throw mapped;
          throw new MoatError('STORE_MIGRATION', `PostgreSQL ${db.target.description}: migration ${v + 1} failed: ${(err as Error).message}`, { cause: err });
        }
        applied.push(v + 1);
      }
      return { from, to: migrations.length, applied };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1, $2)', [MOAT_LOCK_CLASS, MIGRATION_LOCK]).catch((e: Error) => {
        broken = e;
      });
    }
  } catch (err) {
    throw mapPgError(err, db.target);
  } finally {
    client.release(broken);
  }
}
