// `moat daemons`: the daemons of the control channel. `create` registers one
// for an account (and optionally one of its zones) and gives its token once,
// on standard output or in a 0600 file for a service's token file; `list`
// shows the fleet status the control plane records; `revoke` ends a token,
// and `moat serve` closes its open connection within a second. Works on an
// existing database, also while `moat serve` runs.

import { closeSync, constants, openSync, writeSync } from 'node:fs';
import type { Command } from 'commander';
import type { DaemonInfo, DaemonsRepo } from '../../store/index.js';
import { withStore, type StoreTarget } from '../open-store.js';
import { CliError, type Output } from '../output.js';
import { DEFAULT_DATA_DIR } from './serve.js';

const DATA_DIR_HELP = 'directory of the database (default $MOAT_DATA_DIR, else ./moat-data)';

function withDaemons<T>(where: StoreTarget, fn: (d: DaemonsRepo) => Promise<T>): Promise<T> {
  return withStore(where, (store) => fn(store.daemons));
}

/** Writes the token to a new file, owner-only; an existing file is never overwritten (it may be another daemon's). */
function writeTokenFile(path: string, token: string): void {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'EEXIST' ? 'the file exists (it may hold another token): remove it or choose another path' : ((err as Error).message);
    throw new CliError(`--token-file ${path}: ${why}`, 'CLI_SYSTEM');
  }
  try {
    writeSync(fd, token + '\n');
  } finally {
    closeSync(fd);
  }
}

function state(d: DaemonInfo): string {
  if (d.revoked_on !== null) return `revoked ${d.revoked_on}`;
  if (d.connected) return `connected since ${d.connected_since}`;
  return d.disconnected_at === null ? 'never connected' : `disconnected at ${d.disconnected_at}`;
}

/** One daemon as `moat daemons list` prints it: one line, fields in a fixed order. */
export function describeDaemon(d: DaemonInfo): string {
  const parts = [
    d.id,
    JSON.stringify(d.name),
    `account ${d.account_id}`,
    d.zone_id === null ? 'no zone' : `zone ${d.zone_id}`,
    state(d),
  ];
  if (d.remote_address !== null) parts.push(`from ${d.remote_address}`);
  if (d.moat_version !== null) parts.push(`moat ${d.moat_version}`);
  if (d.digest !== null) {
    parts.push(`runs ${d.digest.slice(0, 12)} (account v${d.versions.account ?? '-'}, zone v${d.versions.zone ?? '-'}) applied ${d.applied_on}`);
  }
  if (d.last_rejection !== null) parts.push(`last rejected ${d.last_rejection.digest.slice(0, 12)} on ${d.last_rejection.on}: ${d.last_rejection.errors.map((e) => e.code).join(',')}`);
  if (d.counters !== null) parts.push(`passed ${d.counters.passed} dropped ${d.counters.dropped} undecodable ${d.counters.undecodable} swaps ${d.counters.swaps}`);
  return parts.join('  ');
}

/** Registers `moat daemons create|list|revoke`. */
export function registerDaemons(program: Command, out: Output): void {
  const daemons = program.command('daemons').description('manage the daemons that connect to the control channel (tokens, fleet status)');

  daemons
    .command('create')
    .description('register a daemon of an account (and optionally one of its zones); prints its token once (only a hash is stored)')
    .option('--data-dir <dir>', DATA_DIR_HELP, DEFAULT_DATA_DIR)
    .requiredOption('--account <id>', 'the account whose bundle the daemon receives (and nothing else)')
    .option('--zone <id>', "a zone of the account: the daemon also runs the zone's entrypoint")
    .requiredOption('--name <name>', 'a name unique in the account (shown by `moat daemons list`)')
    .option('--token-file <file>', 'write the token to this new file (mode 0600) instead of printing it')
    .option('--json', 'print the result as JSON')
    .action(async (flags: { dataDir: string; account: string; zone?: string; name: string; tokenFile?: string; json?: boolean }) => {
      const r = await withDaemons(flags, (d) => d.create({ accountId: flags.account, zoneId: flags.zone, name: flags.name }));
      if (flags.tokenFile !== undefined) {
        try {
          writeTokenFile(flags.tokenFile, r.token);
        } catch (err) {
          // A daemon whose token nobody has is useless: take it back.
          await withDaemons(flags, (d) => d.revoke(r.info.id));
          throw err;
        }
      }
      if (flags.json === true) {
        out.stdout(JSON.stringify(flags.tokenFile === undefined ? { ...r.info, token: r.token } : { ...r.info, token_file: flags.tokenFile }));
        return;
      }
      out.stdout(`created daemon ${r.info.id} "${r.info.name}" of account ${r.info.account_id}${r.info.zone_id === null ? '' : `, zone ${r.info.zone_id}`}`);
      if (flags.tokenFile === undefined) out.stdout(`token: ${r.token}   (shown once; only a hash is stored)`);
      else out.stdout(`token written to ${flags.tokenFile} (mode 0600; shown nowhere else, only a hash is stored)`);
    });

  daemons
    .command('list')
    .description('list daemons and their fleet status: connected or not, what they run, last rejection, counters')
    .option('--data-dir <dir>', DATA_DIR_HELP, DEFAULT_DATA_DIR)
    .option('--account <id>', 'only the daemons of this account')
    .option('--json', 'print as JSON')
    .action(async (flags: { dataDir: string; account?: string; json?: boolean }) => {
      const list = await withDaemons(flags, (d) => d.list({ accountId: flags.account }));
      if (flags.json === true) {
        out.stdout(JSON.stringify(list));
        return;
      }
      if (list.length === 0) out.stdout('no daemons');
      for (const d of list) out.stdout(describeDaemon(d));
    });

  daemons
    .command('revoke')
    .description('revoke a daemon by id or name; `moat serve` closes its connection (code 4003) within a second')
    .argument('<id-or-name>', 'the daemon id, or its name')
    .option('--data-dir <dir>', DATA_DIR_HELP, DEFAULT_DATA_DIR)
    .option('--account <id>', 'the account of a name used in several accounts')
    .action(async (idOrName: string, flags: { dataDir: string; account?: string }) => {
      const d = await withDaemons(flags, (x) => x.revoke(idOrName, flags.account));
      out.stdout(`revoked daemon ${d.id} "${d.name}"`);
    });
}
