// The stores an API test runs on: SQLite always, and PostgreSQL (a new
// database in this file's throwaway cluster for each server) where it can run
// here (under CI=true it must: requirePostgres throws). A test file runs its
// scenarios on each with describe.each(apiBackends()), so both backends answer
// the same SDK scenarios (issue #20: "the same API responses").
import { startApi, type StartApiOptions, type TestApi } from './api.js';
import { requirePostgres, usePostgres, type PgCluster } from './postgres.js';

/** One backend an API test runs on. */
export interface ApiBackend {
  readonly name: 'SQLite' | 'PostgreSQL';
  /** startApi on this backend (on PostgreSQL: over a new database unless `options.database` names one). */
  start(options?: StartApiOptions): Promise<TestApi>;
  /** PostgreSQL: the file's cluster (to look into a server's database with admin()). */
  readonly cluster?: () => PgCluster;
}

/**
 * The backends of this test file. Call it once at the file's top level: on
 * PostgreSQL it registers the hooks of one cluster for the file.
 */
export function apiBackends(): ApiBackend[] {
  const run = requirePostgres();
  const cluster: () => PgCluster = usePostgres(run);
  const sqlite: ApiBackend = { name: 'SQLite', start: (options) => startApi(options) };
  if (!run) return [sqlite];
  const postgres: ApiBackend = {
    name: 'PostgreSQL',
    cluster,
    start: async (options = {}) => startApi({ ...options, database: options.database ?? (await cluster().createDatabase('api')) }),
  };
  return [sqlite, postgres];
}
