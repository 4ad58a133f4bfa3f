// A real control-plane server for tests: a fresh data directory with a real
// SQLite file, a first user, and fastify listening on a loopback port. Clients
// are Cloudflare's official SDK (pointed at it with baseURL/apiEmail/apiKey) or
// plain fetch.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Cloudflare from 'cloudflare';
import type { FastifyInstance } from 'fastify';
import { buildServer, type ApiLimits, type RulesetView } from '../../src/api/index.js';
import { Database, Users, newId, type StoredRule } from '../../src/store/index.js';

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

/** A running server and the credentials of its first user. */
export interface TestApi {
  readonly app: FastifyInstance;
  readonly store: Database;
  readonly users: Users;
  readonly dataDir: string;
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
  /** Stops the server and closes the database (the data directory is kept until `dispose`). */
  stop(): Promise<void>;
  /** Stops and removes the data directory. */
  dispose(): Promise<void>;
}

/** Starts a server on 127.0.0.1:0 over `dataDir` (a new temporary one by default). */
export async function startApi(options: { dataDir?: string; limits?: Partial<ApiLimits>; email?: string; key?: string; accountId?: string; zoneId?: string } = {}): Promise<TestApi> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'moat-api-'));
  const store = Database.open(dataDir);
  const users = new Users(store);
  const email = options.email ?? 'owner@example.com';
  const accountId = options.accountId ?? newId();
  const zoneId = options.zoneId ?? newId();
  let key = options.key ?? 'k' + newId();
  if (users.get(email) === undefined) key = users.create({ email, accounts: [accountId], zones: [zoneId], key }).key;
  const app = await buildServer({ store, users, limits: options.limits });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const addr = app.server.address();
  if (addr === null || typeof addr === 'string') throw new Error('no address');
  const base = `http://127.0.0.1:${addr.port}/client/v4`;
  let stopped = false;
  const api: TestApi = {
    app,
    store,
    users,
    dataDir,
    base,
    email,
    key,
    accountId,
    zoneId,
    client: (e = email, k = key) => new Cloudflare({ baseURL: base, apiEmail: e, apiKey: k, apiToken: null, maxRetries: 0, timeout: 10_000 }),
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
    async stop() {
      if (stopped) return;
      stopped = true;
      await app.close();
      store.close();
    },
    async dispose() {
      await api.stop();
      if (options.dataDir === undefined) rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return api;
}
