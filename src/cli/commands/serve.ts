// `moat serve`: the control plane. Opens (or creates) the SQLite database in
// the data directory, or the PostgreSQL database of --database /
// MOAT_DATABASE_URL (several replicas may share one), applies schema migrations, creates a first user on an
// empty database and says how to reach the API with it, then serves
// Cloudflare's v4 API under /client/v4 until SIGTERM or SIGINT.

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Option, type Command } from 'commander';
import type { FastifyInstance } from 'fastify';
import { pino, type Logger } from 'pino';
import { buildServer, createServices, BASE_PATH, DEFAULT_AUTH_LIMIT, DEFAULT_MAIL_FROM, DEFAULT_MIN_INTERVAL } from '../../api/index.js';
import { CHANNEL_PATH, HEARTBEAT_SECONDS } from '../../channel/index.js';
import { hostPortProblem } from '../../config/index.js';
import { MoatError } from '../../errors/index.js';
import { pgNotifyRepos } from '../../notify/index.js';
import { Database, PgStore, databaseUrlFrom, isWellFormedEmail, newId, secureDataDir, type Store } from '../../store/index.js';
import { DATABASE_HELP } from '../open-store.js';
import { CliError, type Output } from '../output.js';

/** The data directory when --data-dir is not given: $MOAT_DATA_DIR, else ./moat-data. */
export const DEFAULT_DATA_DIR = process.env['MOAT_DATA_DIR'] ?? './moat-data';
/** Where the API listens when --listen is not given. */
export const DEFAULT_LISTEN = '127.0.0.1:8080';
/** Email of the user created on an empty database when --first-user-email is not given (anyone can guess it: the server says so). */
export const FIRST_USER_EMAIL = 'admin@moat.local';

interface ServeFlags {
  dataDir: string;
  database?: string;
  listen: string;
  logLevel: string;
  writeFirstUser?: boolean;
  firstUserEmail?: string;
  authFailLimit: string;
  authFailWindow: string;
  monitorMinInterval: string;
  channelHeartbeat: string;
  tlsCert?: string;
  tlsKey?: string;
  smtpUrl?: string;
  mailFrom?: string;
  allowPrivateWebhooks?: boolean;
  deprecationInterval: string;
  notificationLease: string;
}

/** --smtp-url: smtp:// or smtps:// with a host (credentials and options as nodemailer reads them). */
function smtpUrl(v: string | undefined): string | undefined {
  if (v === undefined) return undefined;
  let u: URL | undefined;
  try {
    u = new URL(v);
  } catch {
    u = undefined;
  }
  if (u === undefined || (u.protocol !== 'smtp:' && u.protocol !== 'smtps:') || u.hostname === '') {
    throw new CliError('--smtp-url: expected smtp://[user:password@]host[:port] or smtps://..., e.g. smtp://127.0.0.1:25');
  }
  return v;
}

/** A whole number in [min, max] given to `flag`, or a usage error naming it. */
function wholeNumber(flag: string, value: string, min: number, max: number): number {
  const n = /^\d{1,9}$/.test(value) ? Number(value) : NaN;
  if (!(n >= min && n <= max)) throw new CliError(`${flag} ${JSON.stringify(value.slice(0, 40))}: expected a whole number from ${min} to ${max}`);
  return n;
}

/** --channel-heartbeat: seconds, a positive number up to an hour (fractions for tests). */
function heartbeatSeconds(v: string): number {
  const n = Number(v);
  if (!/^\d+(\.\d+)?$/.test(v) || !(n >= 0.05 && n <= 3600)) throw new CliError(`--channel-heartbeat ${v}: expected seconds between 0.05 and 3600, e.g. 10`);
  return n;
}

/** Reads --tls-cert and --tls-key (both or neither): PEM files. */
function readTls(flags: ServeFlags): { cert: Buffer; key: Buffer } | undefined {
  if (flags.tlsCert === undefined && flags.tlsKey === undefined) return undefined;
  if (flags.tlsCert === undefined || flags.tlsKey === undefined) throw new CliError('--tls-cert and --tls-key go together: give both PEM files, or neither for plain HTTP');
  const read = (flag: string, path: string): Buffer => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw new MoatError('SERVE_TLS', `${flag} ${path}: cannot read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
    }
  };
  return { cert: read('--tls-cert', flags.tlsCert), key: read('--tls-key', flags.tlsKey) };
}

/** Splits HOST:PORT (IPv6 hosts in brackets). */
export function parseListen(s: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(s);
  const port = m === null ? NaN : Number(m[3]);
  if (m === null || port > 65535) throw new CliError(`--listen ${s}: expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080`);
  // The host is an IP literal or a host name; port 0 lets the kernel choose (the printed URL has the port).
  const why = m[2] === '' ? undefined : hostPortProblem(s, true);
  if (why !== undefined) throw new CliError(`--listen ${s}: ${why}`);
  return { host: m[1] ?? (m[2] === '' ? '127.0.0.1' : m[2]!), port };
}

/** Registers `moat serve`. */
export function registerServe(program: Command, out: Output): void {
  program
    .command('serve')
    .description("run the control plane: Cloudflare's v4 API on an embedded SQLite database, or on PostgreSQL shared by several replicas (--database)")
    .addOption(new Option('--data-dir <dir>', 'directory of the database (created when missing)').default(DEFAULT_DATA_DIR, `${JSON.stringify(DEFAULT_DATA_DIR)}: $MOAT_DATA_DIR when set, else ./moat-data`))
    .option('--database <url>', `${DATABASE_HELP}; --data-dir then holds only the mail spool and first-user.json`)
    .option('--listen <host:port>', 'address to listen on', DEFAULT_LISTEN)
    .option('--log-level <level>', 'log level: fatal, error, warn, info, debug', 'info')
    .option('--channel-heartbeat <seconds>', 'seconds between heartbeats on the control channel; a daemon silent for 3 is disconnected', String(HEARTBEAT_SECONDS))
    .option('--tls-cert <file>', 'serve the API and the control channel over HTTPS/WSS with this PEM certificate (chain) and --tls-key')
    .option('--tls-key <file>', 'the PEM private key of --tls-cert')
    .option('--write-first-user', "also write the first user's key to <data-dir>/first-user.json (mode 0600) when this start creates it; without it the key is only printed")
    .option('--first-user-email <email>', `email of the user created on an empty database (default ${FIRST_USER_EMAIL}, which anyone can guess)`)
    .option('--auth-fail-limit <n>', 'failed authentications an address may make per window before its failures are answered 429 (0: no limit)', String(DEFAULT_AUTH_LIMIT.maxFailures))
    .option('--smtp-url <url>', 'send notification emails through this SMTP server (smtp://[user:pass@]host[:port], smtps:// for TLS); without it they are written as .eml files to <data-dir>/mail-spool')
    .option('--mail-from <address>', `From: of notification emails (default ${JSON.stringify(DEFAULT_MAIL_FROM)})`)
    .option('--allow-private-webhooks', 'let webhook destinations be loopback, link-local, private or metadata addresses (refused by default: a webhook URL must not reach the host or its network)')
    .option('--notification-lease <seconds>', 'how long a replica\'s claim on a notification it sends holds; a replica killed mid-send has its notifications sent again by another after this (2 to 3600; a webhook attempt is given at most half of it)', '60')
    .option('--deprecation-interval <hours>', 'hours between two deprecation notices to an address still in a pool\'s notification_email (0: none)', '24')
    .option('--monitor-min-interval <seconds>', 'shortest interval a load balancer monitor may have, in seconds (1 to 3600)', String(DEFAULT_MIN_INTERVAL))
    .option('--auth-fail-window <seconds>', "the failure limit's window, from an address's first failure", String(DEFAULT_AUTH_LIMIT.windowSeconds))
    .action(async (flags: ServeFlags) => {
      const { host, port } = parseListen(flags.listen);
      if (flags.firstUserEmail !== undefined && !isWellFormedEmail(flags.firstUserEmail)) {
        throw new CliError(`--first-user-email ${JSON.stringify(flags.firstUserEmail.slice(0, 80))}: not an email address`);
      }
      const authLimit = {
        maxFailures: wholeNumber('--auth-fail-limit', flags.authFailLimit, 0, 1_000_000),
        windowSeconds: wholeNumber('--auth-fail-window', flags.authFailWindow, 1, 86_400),
      };
      const heartbeat = heartbeatSeconds(flags.channelHeartbeat);
      const notify = {
        smtpUrl: smtpUrl(flags.smtpUrl),
        mailFrom: flags.mailFrom,
        allowPrivateWebhooks: flags.allowPrivateWebhooks === true,
        deprecationIntervalMs: wholeNumber('--deprecation-interval', flags.deprecationInterval, 0, 8760) * 3_600_000,
        leaseMs: wholeNumber('--notification-lease', flags.notificationLease, 2, 3600) * 1000,
      };
      const minInterval = wholeNumber('--monitor-min-interval', flags.monitorMinInterval, 1, 3600);
      if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(flags.logLevel)) throw new CliError(`--log-level ${flags.logLevel}: unknown level`);
      // Every startup failure is one line with a code and exit 1 (see startupError).
      let store: Database | Store | undefined;
      let app: FastifyInstance | undefined;
      try {
        // Everything the server creates (the database, its -wal and -shm,
        // first-user.json) is owner-only; what an earlier start or another
        // tool left open to others is tightened, and said so.
        process.umask(0o077);
        for (const line of secureDataDir(flags.dataDir)) out.stderr(`moat: tightened ${line}`);
        const log = pino({ level: flags.logLevel, base: { service: 'moat-api' } });
        const url = databaseUrlFrom(flags.database);
        // PostgreSQL: the schema is migrated once across replicas starting at once (an advisory lock).
        store = url === undefined ? Database.open(flags.dataDir) : await PgStore.open(url, pgNotifyRepos, { log });
        const https = readTls(flags);
        const spoolDir = url === undefined ? undefined : join(flags.dataDir, 'mail-spool');
        const services = createServices({ store, logger: log, authLimit, channel: { heartbeatSeconds: heartbeat }, notify: { ...notify, spoolDir }, loadBalancing: { minIntervalSeconds: minInterval } });
        try {
          app = await buildServer({ services, logger: log, https });
        } catch (err) {
          // A certificate and key that do not parse or do not match fail here, in node's TLS layer.
          if (https !== undefined && !(err instanceof MoatError)) throw new MoatError('SERVE_TLS', `--tls-cert/--tls-key: ${(err as Error).message}`, { cause: err });
          throw err;
        }
        try {
          // The runners start once this resolves: a busy port starts no work,
          // and the first user is created only by a server that listens.
          await app.listen({ host, port });
        } catch (err) {
          throw listenError(flags.listen, err);
        }
        await running(app, services.store, log, flags, host, port, out);
      } catch (err) {
        // A server that listened and then failed must not keep the process alive.
        await app?.close().catch(() => undefined);
        await Promise.resolve(store?.close()).catch(() => undefined);
        throw startupError(err);
      }
    });
}

/** The coded error of a failed listen, in words an operator acts on. */
function listenError(listen: string, err: unknown): MoatError {
  const code = (err as NodeJS.ErrnoException).code;
  const why =
    code === 'EADDRINUSE'
      ? 'the address is in use (another `moat serve` or another program listens there); stop it or choose another --listen'
      : code === 'EADDRNOTAVAIL'
        ? 'the address is not one of this host\'s'
        : code === 'EACCES'
          ? 'permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)'
          : code === 'ENOTFOUND' || code === 'EAI_AGAIN'
            ? 'the host name does not resolve'
            : (err as Error).message;
  return new MoatError('SERVE_LISTEN', `cannot listen on ${listen}: ${why}`, { cause: err });
}

/** Any startup failure as a coded error: coded errors pass, anything else becomes 7098 with its message. */
function startupError(err: unknown): unknown {
  if (err instanceof MoatError || err instanceof CliError) return err;
  const e = err as Error;
  return new MoatError('SERVE_START', `cannot start the control plane: ${e.message ?? String(err)}`, { cause: err });
}

/** After listen: the first user on an empty database, what to print, and the signals that stop it. */
async function running(
  app: FastifyInstance,
  store: Store,
  log: Logger,
  flags: ServeFlags,
  host: string,
  port: number,
  out: Output,
): Promise<never> {
  // Counted and created under one write lock: two servers started at once
  // on an empty directory must not both try to create the first user.
  const firstEmail = flags.firstUserEmail ?? FIRST_USER_EMAIL;
  const first = await store.write(async (tx) => {
    if ((await tx.users.count()) !== 0) return undefined;
    const account = newId();
    const { key } = await tx.users.create({ email: firstEmail, accounts: [account] });
    return { email: firstEmail, key, account };
  });
  const { users } = store;
  if (first !== undefined && flags.writeFirstUser === true) {
    const { email, key, account } = first;
    writeFileSync(join(flags.dataDir, 'first-user.json'), JSON.stringify({ email, key, account_id: account }, null, 2) + '\n', { mode: 0o600 });
  }
  const shown = host.includes(':') ? `[${host}]` : host;
  // The bound port, not the requested one: with --listen HOST:0 the kernel
  // picks it, and the printed URL is how callers find the server.
  const addr = app.server.address();
  const bound = addr !== null && typeof addr === 'object' ? addr.port : port;
  const tls = flags.tlsCert !== undefined;
  const url = `${tls ? 'https' : 'http'}://${shown}:${bound}${BASE_PATH}`;
  out.stdout(`moat: control plane listening on ${url} (database ${store.location})`);
  out.stdout(`moat: control channel for daemons on ${tls ? 'wss' : 'ws'}://${shown}:${bound}${CHANNEL_PATH}`);
  if (first !== undefined) {
    const saved = flags.writeFirstUser === true ? `; it is also in ${join(flags.dataDir, 'first-user.json')}, mode 0600: delete that file once the key is stored elsewhere` : '; keep it now (--write-first-user would also write it to a 0600 file)';
    out.stdout(`moat: created the first user (the key is shown once${saved}):`);
    out.stdout(`  X-Auth-Email: ${first.email}`);
    out.stdout(`  X-Auth-Key:   ${first.key}`);
    out.stdout(`  account id:   ${first.account}`);
    out.stdout(`  try: curl -s ${url}/accounts/${first.account}/rulesets -H 'X-Auth-Email: ${first.email}' -H 'X-Auth-Key: ${first.key}'`);
  } else {
    out.stdout(`moat: ${await users.count()} user(s); manage them with: moat users list --data-dir ${flags.dataDir}`);
    if (flags.firstUserEmail !== undefined) out.stderr(`moat: --first-user-email ignored: the database already has users (add one with \`moat users create\`)`);
  }
  // The default email is the first thing an attacker tries: say so on every start while it has a live key.
  if ((await users.get(FIRST_USER_EMAIL))?.keys.some((k) => k.revoked_on === null) === true) {
    out.stderr(
      `moat: warning: user ${FIRST_USER_EMAIL} is the default first user, an email anyone can guess: create your own (moat users create --data-dir ${flags.dataDir} --email YOU --account ACCOUNT_ID) ` +
        `and revoke it (moat users revoke --data-dir ${flags.dataDir} --email ${FIRST_USER_EMAIL}), or start on a new data directory with --first-user-email`,
    );
  }
  const legacy = await users.legacyKeyCount();
  if (legacy > 0) {
    out.stderr(
      `moat: ${legacy} API key(s) still hold the scrypt hash of an older Moat; each is re-hashed on its first successful use. Until then a wrong key for their users costs a scrypt check ` +
        '(at most 2 a second server-wide, beyond that 503/7404); replace unused ones (moat users add-key, then moat users revoke --key-id)',
    );
  }
  let closing = false;
  const stop = (signal: string) => {
    if (closing) return;
    closing = true;
    log.info({ signal }, 'stopping');
    void app.close().finally(async () => {
      await store.close().catch(() => undefined);
      log.flush();
      process.exit(0);
    });
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  return new Promise<never>(() => {});
}
