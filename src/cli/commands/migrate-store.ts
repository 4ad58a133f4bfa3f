// `moat migrate-store`: moves an installation from its SQLite file to a
// PostgreSQL database, or (--verify-only) checks that a PostgreSQL database
// holds the same rows as a SQLite file. The work is the store's
// (../../store/migrate-store.ts); this prints its table of counts and
// digests, and the coded error of a refusal or a mismatch.

import type { Command } from 'commander';
import { databaseUrlFrom, migrateStore, StoreMismatchError, verifyStore, type StoreReport } from '../../store/index.js';
import { CliError, type Output } from '../output.js';
import { DEFAULT_DATA_DIR } from './serve.js';

/** The report as a table: one line per table, digests shortened to 16 hex digits (the JSON has them whole). */
function printTable(out: Output, r: StoreReport): void {
  const width = Math.max(5, ...r.tables.map((t) => t.table.length));
  out.stdout(`${'table'.padEnd(width)}  ${'sqlite'.padStart(8)}  ${'postgres'.padStart(8)}  ${'sqlite digest'.padEnd(16)}  ${'postgres digest'.padEnd(16)}  ok`);
  for (const t of r.tables) {
    out.stdout(`${t.table.padEnd(width)}  ${String(t.sqliteRows).padStart(8)}  ${String(t.postgresRows).padStart(8)}  ${t.sqliteDigest.slice(0, 16)}  ${t.postgresDigest.slice(0, 16)}  ${t.ok ? 'yes' : 'NO'}`);
  }
}

/** Registers `moat migrate-store`. */
export function registerMigrateStore(program: Command, out: Output): void {
  program
    .command('migrate-store')
    .description('copy the SQLite database of a data directory into an empty PostgreSQL database, and verify the copy table by table (or only verify, with --verify-only)')
    .option('--from <dir>', 'the data directory whose moat.db is copied (default $MOAT_DATA_DIR, else ./moat-data)', DEFAULT_DATA_DIR)
    .option('--to <url>', 'the PostgreSQL database, postgres://user:password@host:port/database (default $MOAT_DATABASE_URL)')
    .option('--replace-target', 'when the target already holds Moat data, delete all of it (in the copy\'s transaction) and copy; without it such a target is refused (8030)')
    .option('--verify-only', 'copy nothing: compare the row counts and digests of every table on both sides (exit 1, error 8032, on a difference)')
    .option('--json', 'print the report as JSON')
    .action(async (flags: { from: string; to?: string; replaceTarget?: boolean; verifyOnly?: boolean; json?: boolean }) => {
      const to = databaseUrlFrom(flags.to);
      if (to === undefined) throw new CliError('migrate-store: give --to postgres://... (or set MOAT_DATABASE_URL)');
      if (flags.verifyOnly === true && flags.replaceTarget === true) throw new CliError('migrate-store: --verify-only changes nothing; it does not go with --replace-target');
      const show = (r: StoreReport): void => {
        if (flags.json === true) out.stdout(JSON.stringify(r));
        else printTable(out, r);
      };
      let report: StoreReport;
      try {
        report = flags.verifyOnly === true ? await verifyStore({ from: flags.from, to }) : await migrateStore({ from: flags.from, to, replaceTarget: flags.replaceTarget === true });
      } catch (err) {
        // The table first, so the operator sees which tables differ; then the coded error (exit 1).
        if (err instanceof StoreMismatchError) show(err.report);
        throw err;
      }
      show(report);
      if (flags.json === true) return;
      const rows = report.tables.reduce((n, t) => n + t.sqliteRows, 0);
      const replaced = Object.keys(report.replaced).length > 0 ? ` (replacing what it held: ${Object.entries(report.replaced).map(([t, n]) => `${t} ${n}`).join(', ')})` : '';
      out.stdout(flags.verifyOnly === true
        ? `verified: ${report.to} holds the same ${rows} row(s) in ${report.tables.length} table(s) as ${report.from}`
        : `copied ${rows} row(s) in ${report.tables.length} table(s) from ${report.from} to ${report.to}${replaced}; counts and digests match`);
    });
}
