// `moat migrate-notifications`: moves an account off the legacy pool
// `notification_email` (seed section 8) as a plain client of the v4 API, so it
// works against `moat serve` and any service with the same API. It lists every
// pool, creates one health policy per legacy address set, clears the addresses
// page by page with the bulk update, and verifies that none is left. Every
// step looks at the current state first, so a second run, or a run after an
// interrupted one, creates nothing twice and finishes the work.

import type { Command } from 'commander';
import { MoatError } from '../../errors/index.js';
import { CliError, type Output } from '../output.js';

/** The policy name's start, by which a later run recognises the policies it created. */
export const MIGRATED_PREFIX = 'Pool health (migrated from notification_email): ';
/** Pools per listed and per cleared page: the bulk update's own default (seed section 8). */
const PAGE = 25;
/** Longest policy name the API accepts. */
const MAX_NAME = 256;
const ALERT_TYPE = 'load_balancing_health_alert';

interface Pool {
  id: string;
  name: string;
  notification_email?: string;
}

interface Policy {
  id: string;
  name: string;
  alert_type: string;
  filters?: Record<string, unknown>;
  mechanisms?: Record<string, unknown>;
}

/** One address set and what the run does about it. */
export interface PlannedPolicy {
  addresses: string[];
  pool_ids: string[];
  pool_names: string[];
  /** create: no migrated policy has these addresses; update: one does, without all these pools; exists: it covers them. */
  action: 'create' | 'update' | 'exists';
  policy_id: string | null;
  name: string;
}

/** Normalised legacy address set: split on commas, trimmed, lowercased, sorted, deduplicated. */
export function addressSet(list: string | undefined): string[] {
  return [...new Set((list ?? '').split(',').map((a) => a.trim().toLowerCase()).filter((a) => a !== ''))].sort();
}

function policyName(addresses: readonly string[]): string {
  const name = MIGRATED_PREFIX + addresses.join(', ');
  return name.length <= MAX_NAME ? name : name.slice(0, MAX_NAME - 1) + '…';
}

function strings(v: unknown): string[] {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

/** The address set a policy migrated earlier (by this command) mails, or undefined for any other policy. */
function migratedAddresses(p: Policy): string[] | undefined {
  if (p.alert_type !== ALERT_TYPE || !p.name.startsWith(MIGRATED_PREFIX)) return undefined;
  const f = p.filters ?? {};
  const health = strings(f.new_health);
  const source = strings(f.event_source);
  if (!health.includes('Healthy') || !health.includes('Unhealthy') || !source.includes('pool') || !source.includes('origin')) return undefined;
  const email = Array.isArray(p.mechanisms?.email) ? (p.mechanisms.email as { id?: unknown }[]) : [];
  return addressSet(email.map((e) => (typeof e.id === 'string' ? e.id : '')).join(','));
}

interface Credentials {
  headers: Record<string, string>;
}

/** A v4 API client with the envelope's errors turned into coded CLI errors (9501). */
class V4 {
  constructor(
    private readonly base: string,
    private readonly creds: Credentials,
  ) {}

  async call<T>(method: string, path: string, body?: unknown): Promise<{ result: T; result_info?: { total_pages?: number; total_count?: number } }> {
    const url = this.base.replace(/\/+$/, '') + path;
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: { ...this.creds.headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new MoatError('MIGRATE_API_ERROR', `${method} ${url}: ${(err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message}`);
    }
    const text = await res.text();
    let json: { success?: boolean; result?: T; result_info?: { total_pages?: number }; errors?: { code?: number; message?: string; source?: { pointer?: string } }[] } | undefined;
    try {
      json = JSON.parse(text) as typeof json;
    } catch {
      json = undefined;
    }
    if (!res.ok || json?.success !== true) {
      // The API's own errors, with their codes and pointers, as it gave them.
      const errs = (json?.errors ?? []).map((e) => `error ${e.code ?? '?'}: ${e.message ?? ''}${e.source?.pointer === undefined ? '' : ` (at ${e.source.pointer})`}`);
      throw new MoatError('MIGRATE_API_ERROR', `${method} ${path} answered ${res.status}: ${errs.length > 0 ? errs.join('; ') : text.slice(0, 200)}`);
    }
    return { result: json.result as T, result_info: json.result_info };
  }
}

/** What a run did (or, with --dry-run, would do). */
export interface MigrationReport {
  account: string;
  dry_run: boolean;
  pools: number;
  pools_with_email: number;
  policies: PlannedPolicy[];
  cleared: number;
  remaining: string[];
}

async function listPools(api: V4, pools: string, page: number): Promise<{ pools: Pool[]; totalPages: number }> {
  const r = await api.call<Pool[]>('GET', `${pools}?page=${page}&per_page=${PAGE}`);
  const list = Array.isArray(r.result) ? r.result : [];
  return { pools: list, totalPages: r.result_info?.total_pages ?? (list.length < PAGE ? page : page + 1) };
}

async function allPools(api: V4, path: string): Promise<Pool[]> {
  const all: Pool[] = [];
  for (let page = 1; ; page++) {
    const r = await listPools(api, path, page);
    all.push(...r.pools);
    if (r.pools.length === 0 || page >= r.totalPages) return all;
  }
}

/** Runs the migration; progress lines go to `log`. */
export async function migrateNotifications(
  api: V4,
  account: string,
  dryRun: boolean,
  log: (line: string) => void,
): Promise<MigrationReport> {
  const acct = `/accounts/${encodeURIComponent(account)}`;
  const poolsPath = `${acct}/load_balancers/pools`;
  const policiesPath = `${acct}/alerting/v3/policies`;

  // 1. Every pool, and the address set of each pool that has one.
  const pools = await allPools(api, poolsPath);
  const legacy = pools.filter((p) => addressSet(p.notification_email).length > 0);

  // 2. One policy per address set: the migrated policy already there, or a new one.
  const existing = (await api.call<Policy[]>('GET', policiesPath)).result;
  const known = new Set(pools.map((p) => p.id));
  const plans = new Map<string, PlannedPolicy & { have: Set<string> }>();
  for (const p of existing) {
    const set = migratedAddresses(p);
    if (set === undefined || set.length === 0 || plans.has(set.join(','))) continue;
    const have = new Set(strings(p.filters?.pool_id));
    // Pools deleted since the policy was made would make its update fail validation: keep only those that exist.
    plans.set(set.join(','), { addresses: set, pool_ids: [...have].filter((id) => known.has(id)), pool_names: [], action: 'exists', policy_id: p.id, name: p.name, have });
  }
  const planFor = (pool: Pool): PlannedPolicy & { have: Set<string> } => {
    const set = addressSet(pool.notification_email);
    const key = set.join(',');
    let plan = plans.get(key);
    if (plan === undefined) {
      plan = { addresses: set, pool_ids: [], pool_names: [], action: 'create', policy_id: null, name: policyName(set), have: new Set() };
      plans.set(key, plan);
    }
    if (!plan.pool_ids.includes(pool.id)) {
      plan.pool_ids.push(pool.id);
      if (plan.action === 'exists' && !plan.have.has(pool.id)) plan.action = 'update';
    }
    if (!plan.pool_names.includes(pool.name)) plan.pool_names.push(pool.name);
    return plan;
  };
  for (const pool of legacy) planFor(pool);
  const touched = (): (PlannedPolicy & { have: Set<string> })[] => [...plans.values()].filter((p) => p.pool_names.length > 0 || p.action !== 'exists');

  const apply = async (plan: PlannedPolicy & { have: Set<string> }): Promise<void> => {
    // Nothing to do when the policy exists and already names every pool of its set.
    if (plan.policy_id !== null && plan.pool_ids.every((id) => plan.have.has(id))) return;
    const body = {
      name: plan.name,
      description: 'Created by `moat migrate-notifications` to replace the pools\' legacy notification_email.',
      enabled: true,
      alert_type: ALERT_TYPE,
      filters: { pool_id: plan.pool_ids, new_health: ['Healthy', 'Unhealthy'], event_source: ['pool', 'origin'] },
      mechanisms: { email: plan.addresses.map((id) => ({ id })) },
    };
    if (plan.policy_id === null) {
      plan.policy_id = (await api.call<{ id: string }>('POST', policiesPath, body)).result.id;
      log(`created policy ${plan.policy_id} "${plan.name}" for ${plan.pool_ids.length} pool(s)`);
    } else {
      await api.call('PUT', `${policiesPath}/${plan.policy_id}`, body);
      log(`updated policy ${plan.policy_id} "${plan.name}": now ${plan.pool_ids.length} pool(s)`);
    }
    plan.have = new Set(plan.pool_ids);
  };

  const report = (cleared: number, remaining: string[]): MigrationReport => ({
    account,
    dry_run: dryRun,
    pools: pools.length,
    pools_with_email: legacy.length,
    policies: touched().map((p) => ({ addresses: p.addresses, pool_ids: p.pool_ids, pool_names: p.pool_names, action: p.action, policy_id: p.policy_id, name: p.name })),
    cleared,
    remaining,
  });
  if (dryRun) {
    const r = report(0, []);
    // What the run would do, before it does any of it.
    r.cleared = legacy.length;
    return r;
  }
  for (const plan of plans.values()) await apply(plan);

  // 3. Clear page by page. Clearing keeps the order by name, but a pool added or
  // renamed meanwhile moves the pages: each page is listed again right before
  // its update, and any address set not covered yet gets its policy first.
  let cleared = 0;
  let remaining: string[] = [];
  // A pool deleted meanwhile moves later pools onto a page already done: up to
  // three passes, each verified by listing every pool again (step 4).
  for (let pass = 1; pass <= 3; pass++) {
    for (let page = 1; ; page++) {
      const r = await listPools(api, poolsPath, page);
      const withEmail = r.pools.filter((p) => addressSet(p.notification_email).length > 0);
      if (withEmail.length > 0) {
        for (const pool of withEmail) await apply(planFor(pool));
        const changed = await api.call<Pool[]>('PATCH', `${poolsPath}?page=${page}&per_page=${PAGE}`, { notification_email: '' });
        cleared += withEmail.length;
        log(`cleared notification_email on page ${page} (${withEmail.length} pool(s) had one)`);
        // The bulk update answers the pools it changed: one not on the page just listed moved in between the two calls.
        const listed = new Set(r.pools.map((p) => p.id));
        const moved = (Array.isArray(changed.result) ? changed.result : []).filter((p) => !listed.has(p.id));
        if (moved.length > 0) log(`warning: pool(s) ${moved.map((p) => p.name).join(', ')} moved onto page ${page} during the run and were cleared too; check that their addresses have a policy`);
      }
      if (r.pools.length === 0 || page >= r.totalPages) break;
    }
    // 4. Verify: no pool of the account may still have an address.
    remaining = (await allPools(api, poolsPath)).filter((p) => addressSet(p.notification_email).length > 0).map((p) => p.id);
    if (remaining.length === 0) break;
  }
  return report(cleared, remaining);
}

function credentials(flags: { email?: string; key?: string; token?: string }): Credentials {
  const email = flags.email ?? process.env.MOAT_API_EMAIL;
  const key = flags.key ?? process.env.MOAT_API_KEY;
  if (flags.token !== undefined) {
    if (flags.email !== undefined || flags.key !== undefined) throw new CliError('give either --token or --email with --key, not both');
    return { headers: { authorization: `Bearer ${flags.token}` } };
  }
  if (email === undefined || email === '' || key === undefined || key === '') {
    throw new CliError('credentials needed: --email and --key (or $MOAT_API_EMAIL and $MOAT_API_KEY), or --token');
  }
  return { headers: { 'x-auth-email': email, 'x-auth-key': key } };
}

/** Registers `moat migrate-notifications`. */
export function registerMigrateNotifications(program: Command, out: Output): void {
  program
    .command('migrate-notifications')
    .description('move an account off the legacy pool notification_email: one health policy per address set, then clear the addresses (a v4 API client)')
    .requiredOption('--account <id>', 'the account whose pools are migrated')
    .option('--base-url <url>', 'the v4 API', 'http://127.0.0.1:8080/client/v4')
    .option('--email <email>', 'X-Auth-Email (default $MOAT_API_EMAIL)')
    .option('--key <key>', 'X-Auth-Key (default $MOAT_API_KEY)')
    .option('--token <token>', 'an API token (Authorization: Bearer) instead of email and key')
    .option('--dry-run', 'print the plan and change nothing')
    .option('--json', 'print the plan or the result as JSON')
    .action(async (flags: { account: string; baseUrl: string; email?: string; key?: string; token?: string; dryRun?: boolean; json?: boolean }) => {
      if (!/^https?:\/\/[^/]/.test(flags.baseUrl)) throw new CliError(`--base-url must be an http(s) URL, got "${flags.baseUrl}"`);
      const api = new V4(flags.baseUrl, credentials(flags));
      const json = flags.json === true;
      const r = await migrateNotifications(api, flags.account, flags.dryRun === true, (line) => (json ? out.stderr(line) : out.stdout(line)));
      if (json) out.stdout(JSON.stringify(r));
      else {
        out.stdout(`${r.pools} pool(s), ${r.pools_with_email} with a notification_email; ${r.policies.length} address set(s):`);
        for (const p of r.policies) {
          out.stdout(`  ${p.addresses.join(', ')}: ${p.pool_ids.length} pool(s) -> ${r.dry_run ? p.action : 'policy'} ${p.policy_id ?? '(new)'} "${p.name}"`);
        }
        out.stdout(r.dry_run ? `dry run: would clear notification_email on ${r.cleared} pool(s); nothing changed` : `cleared notification_email on ${r.cleared} pool(s)`);
      }
      if (r.remaining.length > 0) {
        throw new MoatError('MIGRATE_INCOMPLETE', `${r.remaining.length} pool(s) still have a notification_email (added or changed during the run?): ${r.remaining.slice(0, 10).join(', ')}; run the command again`);
      }
    });
}
