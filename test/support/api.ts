// A real control plane for tests. In process: a fresh data directory with a
// real SQLite file, a first user, and fastify listening on a loopback port
// (startApi; or, given `database`, a PgStore over that PostgreSQL database:
// apiBackends() in support/backends.ts runs a file's scenarios on both). As a process: the built `moat serve` on a kernel-chosen port,
// with what it printed (serveProcess). Clients are Cloudflare's official SDK
// (pointed at it with baseURL/apiEmail/apiKey) or plain fetch.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Cloudflare, { type APIError } from 'cloudflare';
import type { FastifyInstance } from 'fastify';
import { buildServer, createServices, type ApiLimits, type AuthLimitOptions, type HubOptions, type NotifyOptions, type RulesetView, type Services, type ServicesOptions } from '../../src/api/index.js';
import { pgNotifyRepos } from '../../src/notify/index.js';
import { Database, PgStore, newId, type Store, type StoredRule, type Users } from '../../src/store/index.js';

/** The SDK's phase type lists Cloudflare's names only; Moat's phase is network_transit. */
export type Phase = NonNullable<Parameters<Cloudflare['rulesets']['create']>[0]['phase']>;
/** `network_transit`, typed for the SDK. */
export const PHASE = 'network_transit' as string as Phase;

/** A rule as the server returns it (managed rules come without `expression`). */
export type Rule = Omit<StoredRule, 'expression'> & { expression?: string };

/** A ruleset as the server returns it, with its rules. */
export type Ruleset = Omit<RulesetView, 'rules'> & { rules: Rule[] };

/** The SDK types the result of every ruleset write as `unknown`; read it as what the server returns. */
export function written(p: Promise<unknown>): Promise<Ruleset> {
  return p as Promise<Ruleset>;
}

/** A response of `call`. `json` is the parsed body, loosely typed: tests assert on its shape. */
export interface ApiResponse {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary envelopes and assert on them
  json: any;
  headers: Headers;
  text: string;
}

/** A user of its own account and zone, and how to call the server as that user. */
export interface TestUser {
  readonly email: string;
  readonly key: string;
  readonly accountId: string;
  readonly zoneId: string;
  /** A Cloudflare SDK client with this user's credentials. */
  readonly client: Cloudflare;
  /** Plain HTTP with this user's headers (override or drop them with `headers`). */
  call(method: string, path: string, body?: unknown, headers?: Record<string, string | undefined>): Promise<ApiResponse>;
}

/** A running server and the credentials of its first user. */
export interface TestApi {
  readonly app: FastifyInstance;
  readonly services: Services;
  /** SQLite only: the database (throws on PostgreSQL; use services.store). */
  readonly store: Database;
  /** SQLite only: the synchronous users repository (throws on PostgreSQL; use addUser or services.store.users). */
  readonly users: Users;
  readonly dataDir: string;
  /** Which store the server runs on. */
  readonly backend: Store['backend'];
  /** The PostgreSQL URL it runs on (undefined on SQLite). */
  readonly database: string | undefined;
  /** The arguments that point an operator command (`moat tokens ...`) at this server's store. */
  readonly storeArgs: readonly string[];
  /** Base URL including /client/v4. */
  readonly base: string;
  readonly email: string;
  readonly key: string;
  readonly accountId: string;
  readonly zoneId: string;
  /** A Cloudflare SDK client for the first user. */
  client(email?: string, key?: string): Cloudflare;
  /** Plain HTTP with the first user's headers (override or drop them with `headers`). */
  call(method: string, path: string, body?: unknown, headers?: Record<string, string | undefined>): Promise<ApiResponse>;
  /** Creates another user with an account and a zone of its own (emails default to user<n>@example.com). */
  newUser(email?: string): TestUser;
  /** newUser on any backend. */
  addUser(email?: string): Promise<TestUser>;
  /** Stops the server and closes the database (the data directory is kept until `dispose`). */
  stop(): Promise<void>;
  /** Stops and removes the data directory. */
  dispose(): Promise<void>;
}

/** What startApi may be given; every field has a default. */
export interface StartApiOptions {
  /** The data directory (default: a new temporary one, removed by dispose). */
  dataDir?: string;
  limits?: Partial<ApiLimits>;
  /** The failed-authentication limit (default: the server's own). */
  authLimit?: Partial<AuthLimitOptions>;
  /** The server's body limit in bytes (default: the server's own). */
  bodyLimit?: number;
  /** The first user (created unless a user of that email exists). */
  email?: string;
  key?: string;
  accountId?: string;
  zoneId?: string;
  /** Control channel settings (a short heartbeat or hello timeout for tests). */
  channel?: HubOptions;
  /** Notification settings (a pool directory, --allow-private-webhooks, SMTP, a clock). */
  notify?: NotifyOptions;
  /** Load balancing settings (a 1 s minimum monitor interval for tests). */
  loadBalancing?: ServicesOptions['loadBalancing'];
  /** The health monitor's settings. */
  health?: ServicesOptions['health'];
  /** A postgres:// URL: the server runs on a PgStore over that database instead of SQLite (e-mails spool in the data directory). */
  database?: string;
}

/** Starts a server on 127.0.0.1:0 over `dataDir` (a new temporary one by default). */
export async function startApi(options: StartApiOptions = {}): Promise<TestApi> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'moat-api-'));
  const store = options.database === undefined ? Database.open(dataDir) : await PgStore.open(options.database, pgNotifyRepos);
  const spoolDir = options.database === undefined ? options.notify?.spoolDir : (options.notify?.spoolDir ?? join(dataDir, 'mail-spool'));
  const notify = options.notify === undefined && spoolDir === undefined ? undefined : { ...options.notify, spoolDir };
  const services = createServices({ store, limits: options.limits, authLimit: options.authLimit, channel: options.channel, notify, loadBalancing: options.loadBalancing, health: options.health });
  const email = options.email ?? 'owner@example.com';
  const accountId = options.accountId ?? newId();
  const zoneId = options.zoneId ?? newId();
  let key = options.key ?? 'k' + newId();
  if ((await services.store.users.get(email)) === undefined) key = (await services.store.users.create({ email, accounts: [accountId], zones: [zoneId], key })).key;
  const app = await buildServer({ services, bodyLimit: options.bodyLimit });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const addr = app.server.address();
  if (addr === null || typeof addr === 'string') throw new Error('no address');
  const base = `http://127.0.0.1:${addr.port}/client/v4`;
  let stopped = false;
  let userCount = 0;
  const sqliteOnly = <T>(what: string, get: (db: Database) => T): T => {
    if (!(store instanceof Database)) throw new Error(`api.${what} exists only on SQLite; this server runs on ${services.store.backend}`);
    return get(store);
  };
  const testUser = (userEmail: string, userKey: string, user: { accountId: string; zoneId: string }): TestUser => ({
    ...user,
    email: userEmail,
    key: userKey,
    client: api.client(userEmail, userKey),
    call: (method, path, body, headers = {}) => api.call(method, path, body, { 'X-Auth-Email': userEmail, 'X-Auth-Key': userKey, ...headers }),
  });
  const api: TestApi = {
    app,
    services,
    get store() {
      return sqliteOnly('store', (db) => db);
    },
    get users() {
      return sqliteOnly('users', () => services.users);
    },
    dataDir,
    backend: services.store.backend,
    database: options.database,
    storeArgs: options.database === undefined ? ['--data-dir', dataDir] : ['--data-dir', dataDir, '--database', options.database],
    base,
    email,
    key,
    accountId,
    zoneId,
    client: (e = email, k = key) => sdkClient(base, { email: e, key: k }),
    async call(method, path, body, headers = {}) {
      const h: Record<string, string> = { 'X-Auth-Email': email, 'X-Auth-Key': key };
      if (body !== undefined) h['Content-Type'] = 'application/json';
      for (const [k, v] of Object.entries(headers)) {
        const existing = Object.keys(h).find((x) => x.toLowerCase() === k.toLowerCase());
        if (existing !== undefined) delete h[existing];
        if (v !== undefined) h[k] = v;
      }
      const res = await fetch(base + path, { method, headers: h, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
      const text = await res.text();
      let json: ApiResponse['json'] = undefined;
      try {
        json = text === '' ? undefined : JSON.parse(text);
      } catch {
        json = undefined;
      }
      return { status: res.status, json, headers: res.headers, text };
    },
    newUser(userEmail = `user${++userCount}@example.com`) {
      const user = { accountId: newId(), zoneId: newId() };
      const { key: userKey } = api.users.create({ email: userEmail, accounts: [user.accountId], zones: [user.zoneId] });
      return testUser(userEmail, userKey, user);
    },
    async addUser(userEmail = `user${++userCount}@example.com`) {
      const user = { accountId: newId(), zoneId: newId() };
      const { key: userKey } = await services.store.users.create({ email: userEmail, accounts: [user.accountId], zones: [user.zoneId] });
      return testUser(userEmail, userKey, user);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await app.close();
      await services.store.close();
    },
    async dispose() {
      await api.stop();
      if (options.dataDir === undefined) rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return api;
}

/** A `moat serve` child process and what it printed at start. */
export interface ServeProcess {
  readonly child: ChildProcess;
  /** The URL it printed, including /client/v4. */
  readonly url: string;
  /** Lines printed on stdout so far (it keeps appending). */
  readonly lines: string[];
  /** What it printed on stderr so far. */
  readonly stderr: () => string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Spawns the built `moat serve` over `dataDir` on a kernel-chosen port and
 * waits until it has printed its URL and the last line it prints at start (the
 * curl hint on a new database, the user count otherwise). Build dist/ first
 * (ensureBuilt); the caller kills the child. `wrapper` runs it under another
 * command (e.g. `unshare --pid --fork --kill-child`, another pid namespace).
 */
export async function serveProcess(dataDir: string, extra: readonly string[] = [], env?: NodeJS.ProcessEnv, wrapper: readonly string[] = []): Promise<ServeProcess> {
  // Loaded here: support/cli.ts loads the whole CLI, which in-process API tests do not need.
  const { BIN, ROOT } = await import('./cli.js');
  const [command, ...before] = [...wrapper, process.execPath];
  const child = spawn(command!, [...before, BIN, 'serve', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-level', 'warn', ...extra], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: env === undefined ? process.env : { ...process.env, ...env } });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const lines: string[] = [];
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const started = new Promise<string>((resolve, reject) => {
    let buffered = '';
    let found: string | undefined;
    const timer = setTimeout(() => reject(new Error(`moat serve did not start: ${lines.join('\n')} ${stderr}`)), 15_000);
    child.stdout!.on('data', (d: Buffer) => {
      buffered += d.toString();
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      lines.push(...parts);
      found ??= parts.map((l) => /listening on (https?:\/\/\S+)/.exec(l)?.[1]).find((u) => u !== undefined);
      if (found !== undefined && lines.some((l) => l.includes('try: curl') || /\d+ user\(s\)/.test(l))) {
        clearTimeout(timer);
        resolve(found);
      }
    });
    void exited.then(({ code }) => reject(new Error(`moat serve exited with ${code}: ${stderr}`)));
  });
  let url: string;
  try {
    url = await started;
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  return { child, url, lines, stderr: () => stderr, exited };
}

/** The first user's credentials as `moat serve` printed them on an empty data directory. */
export function printedCredentials(s: ServeProcess): { email: string; key: string; accountId: string } {
  const get = (label: string) => {
    const line = s.lines.find((l) => l.trimStart().startsWith(label));
    if (line === undefined) throw new Error(`no ${label} in ${s.lines.join('\n')}`);
    return line.slice(line.indexOf(label) + label.length).trim();
  };
  return { email: get('X-Auth-Email:'), key: get('X-Auth-Key:'), accountId: get('account id:') };
}

/** An SDK client for a server URL and credentials. */
export function sdkClient(url: string, c: { email: string; key: string }): Cloudflare {
  return new Cloudflare({ baseURL: url, apiEmail: c.email, apiKey: c.key, apiToken: null, maxRetries: 0, timeout: 10_000 });
}

/** The SDK error a promise rejects with (fails the test when it resolves). */
export async function rejection(p: Promise<unknown>): Promise<APIError> {
  try {
    await p;
  } catch (err) {
    return err as APIError;
  }
  throw new Error('expected the call to fail');
}
