// The stores an API test runs on: SQLite always, and PostgreSQL (a new
// database in this file's throwaway cluster for each server) where it can run
// here (under CI=true it must: requirePostgres throws). A test file runs its
// scenarios on each with describe.each(apiBackends()), so both backends answer
// the same SDK scenarios (issue #20: "the same API responses").
//
// Each server's database is a copy of one migrated template (CREATE DATABASE
// ... TEMPLATE): migrating a new database on every start cost lists.test.ts,
// which starts a server per test, about 1 s per test on the shared machine.
import { pgNotifyRepos } from '../../src/notify/index.js';
import { PgStore } from '../../src/store/index.js';
import { startApi, type StartApiOptions, type TestApi } from './api.js';
import { databaseOf, requirePostgres, usePostgres, type PgCluster } from './postgres.js';

/** The migrated template database of each cluster (by its directory). */
const templates = new Map<string, Promise<string>>();
let copies = 0;

/** A new database of `cluster` with Moat's schema, copied from a template migrated once. */
async function migratedDatabase(cluster: PgCluster): Promise<string> {
  let template = templates.get(cluster.dir);
  if (template === undefined) {
    template = (async () => {
      const url = await cluster.createDatabase('api_template');
      const store = await PgStore.open(url, pgNotifyRepos);
      await store.close();
      return databaseOf(url);
    })();
    templates.set(cluster.dir, template);
  }
  const source = await template;
  const name = `api_${process.pid}_${++copies}`;
  for (let attempt = 0; ; attempt++) {
    try {
      await cluster.admin(`CREATE DATABASE ${name} TEMPLATE ${source}`);
      return cluster.url(name);
    } catch (err) {
      // The template's last connection may still be closing on the server side.
      if (attempt >= 100 || !/being accessed by other users/.test(String(err))) throw err;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

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
    start: async (options = {}) => startApi({ ...options, database: options.database ?? (await migratedDatabase(cluster())) }),
  };
  return [sqlite, postgres];
}
