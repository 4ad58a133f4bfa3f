// `moat migrate-notifications` against a real `moat serve` in process (real
// SQLite file, fastify on loopback): pools with mixed legacy addresses become
// one health policy per address set and lose their notification_email; a dry
// run changes nothing; a second run creates nothing; a run killed with SIGKILL
// right after its first policy is finished by the next run; then the
// account's deprecation notices stop.
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeprecationNotices } from '../../src/notify/index.js';
import { Tokens } from '../../src/store/index.js';
import { startApi, type TestApi } from '../support/api.js';
import { BIN, ROOT, ensureBuilt, moat } from '../support/cli.js';

const PREFIX = 'Pool health (migrated from notification_email): ';

/** The legacy field of pool i: five kinds, two of which normalise to the same set. */
function legacyEmail(i: number): string {
  switch ((i + 1) % 5) {
    case 0:
      return '';
    case 1:
      return 'ops@example.com';
    case 2:
      return ' OPS@example.com , team@example.com';
    case 3:
      return 'team@example.com,ops@example.com,ops@example.com';
    default:
      return `owner${i % 3}@example.com`;
  }
}

/** The normalised set pool i must end up covered by (written out by hand, not by the command's code). */
function expectedSet(i: number): string | undefined {
  switch ((i + 1) % 5) {
    case 0:
      return undefined;
    case 1:
      return 'ops@example.com';
    case 2:
    case 3:
      return 'ops@example.com, team@example.com';
    default:
      return `owner${i % 3}@example.com`;
  }
}

interface Seeded {
  ids: string[];
  /** "a@x, b@y" -> the pool ids that must be in its policy. */
  expected: Map<string, Set<string>>;
}

async function seed(api: TestApi, n: number): Promise<Seeded> {
  const ids: string[] = [];
  const expected = new Map<string, Set<string>>();
  for (let i = 0; i < n; i++) {
    // Names out of creation order, so pages by name mix the kinds.
    const name = `pool-${String((i * 37) % 1000).padStart(3, '0')}-${i}`;
    const pool = (await api.services.loadBalancing.createPool(api.accountId, {
      name,
      origins: [{ name: 'a', address: '192.0.2.1' }],
      notification_email: legacyEmail(i),
    })) as { id: string };
    ids.push(pool.id);
    const set = expectedSet(i);
    if (set !== undefined) expected.set(set, (expected.get(set) ?? new Set()).add(pool.id));
  }
  return { ids, expected };
}

async function policies(api: TestApi): Promise<{ id: string; name: string; modified: string; filters: { pool_id: string[]; new_health: string[]; event_source: string[] }; mechanisms: { email: { id: string }[] } }[]> {
  const r = await api.call('GET', `/accounts/${api.accountId}/alerting/v3/policies`);
  expect(r.status).toBe(200);
  return r.json.result;
}

async function poolEmails(api: TestApi): Promise<string[]> {
  const r = await api.call('GET', `/accounts/${api.accountId}/load_balancers/pools`);
  expect(r.status).toBe(200);
  return (r.json.result as { notification_email: string }[]).map((p) => p.notification_email);
}

/** The migrated policies as "addresses -> sorted pool ids", checking each one's filters. */
async function migrated(api: TestApi): Promise<Map<string, string[]>> {
  const m = new Map<string, string[]>();
  for (const p of await policies(api)) {
    expect(p.name.startsWith(PREFIX)).toBe(true);
    expect(p.filters.new_health).toEqual(['Healthy', 'Unhealthy']);
    expect(p.filters.event_source).toEqual(['pool', 'origin']);
    const set = p.mechanisms.email.map((e) => e.id).join(', ');
    expect(m.has(set)).toBe(false);
    expect(p.name).toBe(PREFIX + set);
    m.set(set, [...p.filters.pool_id].sort());
  }
  return m;
}

function asSorted(expected: Map<string, Set<string>>): Map<string, string[]> {
  return new Map([...expected].map(([k, v]) => [k, [...v].sort()]));
}

function args(api: TestApi, base = api.base): string[] {
  return ['migrate-notifications', '--account', api.accountId, '--base-url', base, '--email', api.email, '--key', api.key];
}

/** A pass-through proxy in front of the server; `intercept` may answer a request itself or act after it is forwarded. */
async function proxy(target: string, after: (method: string, path: string, status: number) => void, intercept?: (method: string, path: string) => unknown): Promise<{ base: string; server: Server }> {
  const origin = new URL(target).origin;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const method = req.method ?? 'GET';
        const path = req.url ?? '/';
        const fake = intercept?.(method, path);
        if (fake !== undefined) {
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(fake));
          return;
        }
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'host' && k !== 'content-length' && k !== 'connection') headers[k] = v;
        const r = await fetch(origin + path, { method, headers, body: chunks.length > 0 ? Buffer.concat(chunks) : undefined });
        const body = await r.text();
        after(method, path, r.status);
        res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' }).end(body);
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { base: `http://127.0.0.1:${port}${new URL(target).pathname}`, server };
}

let api: TestApi | undefined;
let server: Server | undefined;
afterEach(async () => {
  await api?.dispose();
  api = undefined;
  await new Promise<void>((resolve) => (server === undefined ? resolve() : server.close(() => resolve())));
  server = undefined;
});

describe('moat migrate-notifications', () => {
  beforeAll(() => ensureBuilt());

  for (const n of [0, 1, 25, 26, 300]) {
    it(`migrates ${n} pools: one policy per address set, every notification_email cleared`, async () => {
      api = await startApi();
      const { expected } = await seed(api, n);
      const withEmail = [...expected.values()].reduce((a, s) => a + s.size, 0);
      const r = await moat(...args(api), '--json');
      expect(r.stderr.includes('error'), r.stderr).toBe(false);
      expect(r.code).toBe(0);
      const report = JSON.parse(r.stdout);
      expect(report).toMatchObject({ dry_run: false, pools: n, pools_with_email: withEmail, cleared: withEmail, remaining: [] });
      expect(await migrated(api)).toEqual(asSorted(expected));
      expect((await poolEmails(api)).filter((e) => e !== '')).toEqual([]);
      expect((await poolEmails(api)).length).toBe(n);
    }, 60_000);
  }

  it('with --dry-run prints the plan and changes nothing', async () => {
    api = await startApi();
    await seed(api, 26);
    const before = await poolEmails(api);
    const r = await moat(...args(api), '--dry-run');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('ops@example.com, team@example.com: 10 pool(s) -> create (new)');
    expect(r.stdout).toContain('dry run: would clear notification_email on 21 pool(s); nothing changed');
    const plan = JSON.parse((await moat(...args(api), '--dry-run', '--json')).stdout);
    expect(plan).toMatchObject({ dry_run: true, pools: 26, pools_with_email: 21, cleared: 21, remaining: [] });
    const sets = (plan.policies as { addresses: string[]; pool_ids: string[]; action: string; policy_id: null }[]).map((p) => [p.addresses.join(', '), p.pool_ids.length, p.action, p.policy_id]);
    expect(sets.sort((a, b) => (String(a[0]) < String(b[0]) ? -1 : 1))).toEqual([
      ['ops@example.com', 6, 'create', null],
      ['ops@example.com, team@example.com', 10, 'create', null],
      ['owner0@example.com', 2, 'create', null],
      ['owner1@example.com', 1, 'create', null],
      ['owner2@example.com', 2, 'create', null],
    ]);
    expect(await policies(api)).toEqual([]);
    expect(await poolEmails(api)).toEqual(before);
  });

  it('run twice creates nothing twice', async () => {
    api = await startApi();
    const { expected } = await seed(api, 60);
    expect((await moat(...args(api))).code).toBe(0);
    const first = await policies(api);
    expect(first.length).toBe(5);
    const r = await moat(...args(api), '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ pools_with_email: 0, policies: [], cleared: 0, remaining: [] });
    expect(await policies(api)).toEqual(first);
    expect(await migrated(api)).toEqual(asSorted(expected));
  });

  it('adds a new pool of a set already migrated to that set\'s policy instead of creating another', async () => {
    api = await startApi();
    await seed(api, 3);
    expect((await moat(...args(api))).code).toBe(0);
    const [before] = (await policies(api)).filter((p) => p.name === PREFIX + 'ops@example.com');
    const late = (await api.services.loadBalancing.createPool(api.accountId, { name: 'late', origins: [{ name: 'a', address: '192.0.2.1' }], notification_email: 'Ops@Example.com' })) as { id: string };
    const r = await moat(...args(api), '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).policies).toMatchObject([{ action: 'update', policy_id: before!.id, addresses: ['ops@example.com'] }]);
    const after = await policies(api);
    expect(after.length).toBe(2); // ops, and ops + team
    expect(after.find((p) => p.id === before!.id)!.filters.pool_id).toEqual([...before!.filters.pool_id, late.id]);
  });

  it('killed with SIGKILL after its first policy, finishes correctly when run again; then deprecation notices stop', async () => {
    api = await startApi();
    const { expected } = await seed(api, 80);
    const withEmail = [...expected.values()].reduce((a, s) => a + s.size, 0);
    // Five legacy addresses (ops, team, owner0..2), each due a notice now.
    const notices = new DeprecationNotices(api.services.store, api.services.loadBalancing.store, 1000);
    const start = Date.now();
    expect(await notices.run(start)).toBe(5);

    const spawned: ReturnType<typeof spawn>[] = [];
    let killed = false;
    const p = await proxy(api.base, (method, path, status) => {
      // The policy is committed on the server; the command dies before it reads the answer.
      if (!killed && method === 'POST' && path.endsWith('/alerting/v3/policies') && status === 200) {
        killed = true;
        spawned[0]?.kill('SIGKILL');
      }
    });
    server = p.server;
    const child = spawn(process.execPath, [BIN, ...args(api, p.base)], { cwd: ROOT, stdio: 'ignore' });
    spawned.push(child);
    const signal = await new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, sig) => resolve(sig)));
    expect(signal).toBe('SIGKILL');
    expect((await policies(api)).length).toBe(1);
    expect((await poolEmails(api)).filter((e) => e !== '').length).toBe(withEmail);

    const r = await moat(...args(api), '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ cleared: withEmail, remaining: [] });
    expect(await migrated(api)).toEqual(asSorted(expected));
    expect((await poolEmails(api)).filter((e) => e !== '')).toEqual([]);

    // The deprecation due-list of the account is empty: no notice, even days later.
    expect(api.services.loadBalancing.store.legacyPools().filter((l) => l.accountId === api!.accountId)).toEqual([]);
    expect(await notices.run(start + 3 * 86_400_000)).toBe(0);
  }, 60_000);

  it('authenticates with an API token given by --token', async () => {
    api = await startApi();
    const { expected } = await seed(api, 7);
    const { token } = new Tokens(api.store, api.users).create({ email: api.email, name: 'migration', accounts: [api.accountId], readOnly: false });
    const r = await moat('migrate-notifications', '--account', api.accountId, '--base-url', api.base, '--token', token);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('cleared notification_email on 6 pool(s)');
    expect(await migrated(api)).toEqual(asSorted(expected));
  });

  it('clears, in a second pass, a pool that a deletion during the run moved onto a page already cleared', async () => {
    api = await startApi();
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) {
      const pool = (await api.services.loadBalancing.createPool(api.accountId, { name: `p${String(i).padStart(2, '0')}`, origins: [{ name: 'a', address: '192.0.2.1' }], notification_email: i === 0 ? '' : 'ops@example.com' })) as { id: string };
      ids.push(pool.id);
    }
    let deleted = false;
    const p = await proxy(api.base, (method) => {
      // After page 1 is cleared, p00 goes: p25 (with its address) moves from page 2 onto page 1.
      if (!deleted && method === 'PATCH') {
        deleted = true;
        // synchronously, before the PATCH goes on (the proxy's hook is synchronous)
        api!.services.loadBalancing.store.deletePool(api!.accountId, ids[0]!);
      }
    });
    server = p.server;
    const r = await moat(...args(api, p.base), '--json');
    expect(r.code).toBe(0);
    expect(deleted).toBe(true);
    expect(JSON.parse(r.stdout)).toMatchObject({ pools: 40, pools_with_email: 39, cleared: 39, remaining: [] });
    const emails = await poolEmails(api);
    expect(emails).toEqual(new Array<string>(39).fill(''));
    expect(await migrated(api)).toEqual(new Map([['ops@example.com', ids.slice(1).sort()]]));
  });

  it('fails with 9500 when a service leaves notification_email on pools after the bulk update', async () => {
    api = await startApi();
    await seed(api, 4);
    // A service whose bulk update answers success but changes nothing.
    const p = await proxy(api.base, () => undefined, (method) => (method === 'PATCH' ? { success: true, errors: [], messages: [], result: [] } : undefined));
    server = p.server;
    const r = await moat(...args(api, p.base));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^moat: error 9500: 4 pool\(s\) still have a notification_email/);
  });

  it('shows the API\'s own error code and message (9501), and refuses to run without credentials (5010)', async () => {
    api = await startApi();
    const bad = await moat('migrate-notifications', '--account', api.accountId, '--base-url', api.base, '--email', api.email, '--key', api.key.slice(0, -1) + (api.key.endsWith('0') ? '1' : '0'));
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^moat: error 9501: GET \/accounts\/[0-9a-f]+\/load_balancers\/pools\?page=1&per_page=25 answered 403: error 9103: /);
    const saved = [process.env.MOAT_API_EMAIL, process.env.MOAT_API_KEY];
    delete process.env.MOAT_API_EMAIL;
    delete process.env.MOAT_API_KEY;
    try {
      const none = await moat('migrate-notifications', '--account', api.accountId, '--base-url', api.base);
      expect(none.code).toBe(2);
      expect(none.stderr).toBe('moat: error 5010: credentials needed: --email and --key (or $MOAT_API_EMAIL and $MOAT_API_KEY), or --token');
    } finally {
      if (saved[0] !== undefined) process.env.MOAT_API_EMAIL = saved[0];
      if (saved[1] !== undefined) process.env.MOAT_API_KEY = saved[1];
    }
  });
});
