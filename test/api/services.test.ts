// The control plane's composition root: services built once over a database,
// runners started only when the server listens (a server that cannot bind its
// port starts none, so queued work stays queued) and stopped when it closes.
import { createServer, type Server } from 'node:net';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { buildServer, createServices, type Services } from '../../src/api/index.js';
import { Database, newId } from '../../src/store/index.js';

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
