// The control plane's composition root: services built once over a database,
// runners started only when the server listens (a server that cannot bind its
// port starts none, so queued work stays queued) and stopped when it closes;
// and the whole API over a Store that is not a SqliteStore (as PostgreSQL's),
// so that no route or runner reaches past the Store to SQLite.
import { createServer, type Server } from 'node:net';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BASE_PATH, buildServer, createServices, type Services } from '../../src/api/index.js';
import { sqliteNotifyRepos } from '../../src/notify/index.js';
import { Database, newId, SqliteStore, type Store } from '../../src/store/index.js';
import { ChannelClient } from '../support/channel-client.js';

const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function services(): Services {
  return servicesIn(mkdtempSync(join(tmpdir(), 'moat-services-')));
}

function servicesIn(dir: string): Services {
  const store = Database.open(dir);
  cleanups.push(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return createServices({ store });
}

/** Queues an append to a new list of a new account; returns the operation's status reader. */
async function queueAppend(s: Services): Promise<() => Promise<string>> {
  const accountId = newId();
  const list = await s.lists.create(accountId, { name: 'queued', kind: 'ip' });
  const op = await s.lists.write(accountId, list.id, 'append', [{ ip: '192.0.2.1' }]);
  return async () => (await s.lists.operation(accountId, op)).status;
}

const turns = (n: number) => new Promise((resolve) => setTimeout(resolve, n));

describe('the services and their runners', () => {
  it('starts the runners when the server listens and stops them when it closes', async () => {
    const s = services();
    const app = await buildServer({ services: s });
    const status = await queueAppend(s);
    await app.ready();
    await turns(50);
    expect(s.runners.started).toBe(false);
    expect(await status()).toBe('pending');
    await app.listen({ host: '127.0.0.1', port: 0 });
    expect(s.runners.started).toBe(true);
    for (let i = 0; i < 100 && (await status()) !== 'completed'; i++) await turns(10);
    expect(await status()).toBe('completed');
    await app.close();
    expect(s.runners.started).toBe(false);
  });

  it('starts no runner when the port is taken', async () => {
    const busy: Server = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => busy.close(() => resolve())));
    const port = (busy.address() as { port: number }).port;
    const s = services();
    const app = await buildServer({ services: s });
    cleanups.push(() => app.close());
    const status = await queueAppend(s);
    await expect(app.listen({ host: '127.0.0.1', port })).rejects.toMatchObject({ code: 'EADDRINUSE' });
    await turns(50);
    expect(s.runners.started).toBe(false);
    expect(await status()).toBe('pending');
  });

  it('tells a legacy notification_email of its deprecation as soon as a pool gets one, not at the next periodic check', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-services-'));
    const s = servicesIn(dir);
    const app = await buildServer({ services: s });
    cleanups.push(() => app.close());
    await app.listen({ host: '127.0.0.1', port: 0 });
    // The worker's first pass found no legacy address; the next periodic check is a minute away.
    await turns(100);
    const spool = join(dir, 'mail-spool');
    const spooled = () => (existsSync(spool) ? readdirSync(spool).map((f) => readFileSync(join(spool, f), 'utf8')) : []);
    expect(spooled()).toEqual([]);
    s.loadBalancing.store.createPool(newId(), 'web', null, { name: 'web', origins: [], notification_email: 'legacy@example.com' });
    for (let i = 0; i < 100 && spooled().length === 0; i++) await turns(20);
    const mails = spooled();
    expect(mails).toHaveLength(1);
    expect(mails[0]).toContain('To: legacy@example.com');
    expect(mails[0]).toContain('Subject: [Moat] Action needed: notification_email is deprecated (1 pool)');
  });
});

/**
 * A Store that only forwards to another one: the services see nothing but the
 * Store contract (it is no SqliteStore, as PostgreSQL's is not), while the data
 * lives in a real SQLite file.
 */
function contractOnly(inner: SqliteStore): Store {
  return {
    backend: 'postgres',
    location: 'forwarded',
    users: inner.users,
    tokens: inner.tokens,
    rulesets: inner.rulesets,
    lists: inner.lists,
    daemons: inner.daemons,
    loadBalancing: inner.loadBalancing,
    alerting: inner.alerting,
    outbox: inner.outbox,
    changes: inner.changes,
    write: (fn, o) => inner.write(fn, o),
    read: (fn) => inner.read(fn),
    changeEpoch: () => inner.changeEpoch(),
    onHealthEvent: (l) => inner.onHealthEvent(l),
    onPoolsWritten: (l) => inner.onPoolsWritten(l),
    writable: (w) => inner.writable(w),
    get closed() {
      return inner.closed;
    },
    close: () => inner.close(),
  };
}

describe('the services over a Store that is not SQLite\'s', () => {
  it('serve rulesets (writes, cached reads, managed imports) and the control channel through the Store alone; the SQLite-only extras say so', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-services-'));
    const inner = new SqliteStore(Database.open(dir), sqliteNotifyRepos);
    cleanups.push(async () => {
      await inner.close();
      rmSync(dir, { recursive: true, force: true });
    });
    const store = contractOnly(inner);
    expect(() => createServices({ store })).toThrow(/spoolDir or notify.smtpUrl/);
    const s = createServices({ store, notify: { spoolDir: join(dir, 'spool') } });
    expect(() => s.database).toThrow(/only on SQLite/);
    expect(() => s.daemons).toThrow(/only on SQLite/);
    expect(() => s.loadBalancing.store).toThrow(/only on SQLite/);
    const app = await buildServer({ services: s });
    cleanups.push(() => app.close());
    await app.listen({ host: '127.0.0.1', port: 0 });
    const origin = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;

    const { user, key } = await store.users.create({ email: 'ops@example.com', accounts: [newId()] });
    const accountId = user.accounts[0]!;
    const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
      const res = await fetch(origin + BASE_PATH + path, {
        method,
        headers: { 'X-Auth-Email': 'ops@example.com', 'X-Auth-Key': key, 'Content-Type': 'application/json', ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: res.status, etag: res.headers.get('etag'), json: (await res.json().catch(() => undefined)) as { result: { id: string; version: string; rules: { expression: string }[] } } };
    };
    const managed = await s.rulesets.importManaged({ name: 'Forwarded', rules: [{ action: 'block', expression: 'tcp.dstport == 9', categories: ['x'] }] });
    const ep = `/accounts/${accountId}/rulesets/phases/network_transit/entrypoint`;
    const put = await call('PUT', ep, { rules: [{ action: 'block', expression: 'tcp.dstport == 23' }, { action: 'execute', expression: 'true', action_parameters: { id: managed.id, version: '1' } }] });
    expect([put.status, put.json.result.version]).toEqual([200, '1']);
    const added = await call('POST', `/accounts/${accountId}/rulesets/${put.json.result.id}/rules`, { action: 'block', expression: 'tcp.dstport == 24' });
    expect([added.status, added.json.result.version, added.json.result.rules.map((r) => r.expression)]).toEqual([200, '2', ['tcp.dstport == 23', 'true', 'tcp.dstport == 24']]);
    const first = await call('GET', ep);
    const second = await call('GET', ep);
    expect([first.status, first.json.result.version, second.etag]).toEqual([200, '2', first.etag]);
    expect((await call('GET', ep, undefined, { 'If-None-Match': first.etag! })).status).toBe(304);

    const daemon = await store.daemons.create({ accountId, name: 'gw' });
    const c = await ChannelClient.hello(origin.replace(/^http/, 'ws') + '/moat/channel', daemon.token);
    cleanups.push(() => c.close());
    expect((await c.next()).type).toBe('welcome');
    const bundle = await c.next('bundle');
    expect([bundle.account.version, bundle.managed.map((m: { id: string; version: string }) => [m.id, m.version])]).toEqual(['2', [[managed.id, '1']]]);
  });
});
