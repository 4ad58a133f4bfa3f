// The health monitor inside a real `moat serve` (in process, loopback): real
// HTTP and TCP origins switched healthy and unhealthy during the test, pool and
// origin edges recorded as health events and handed to a listener inside the
// recording transaction (a listener that throws rolls the event back), the
// pool health endpoint from the latest probes, and a restart that reloads the
// state without false events.
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { HealthEvent } from '../../src/store/index.js';
import { startApi, type TestApi } from '../support/api.js';

/** An HTTP origin whose status the test sets. */
interface Origin {
  server: Server;
  port: number;
  status: number;
}

async function httpOrigin(): Promise<Origin> {
  const o = { status: 200 } as Origin;
  o.server = createHttpServer((_req, res) => res.writeHead(o.status).end('ok'));
  await new Promise<void>((r) => o.server.listen(0, '127.0.0.1', r));
  o.port = (o.server.address() as AddressInfo).port;
  return o;
}

async function until<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const FAST = { loadBalancing: { minIntervalSeconds: 1 }, health: { refreshMs: 50 } };

describe('the health monitor', () => {
  let api: TestApi;
  let a: Origin;
  let b: Origin;
  const events: HealthEvent[] = [];
  let inTransaction: boolean[] = [];
  let throwing = false;

  beforeAll(async () => {
    a = await httpOrigin();
    b = await httpOrigin();
    api = await startApi(FAST);
    api.services.loadBalancing.store.onHealthEvent((e) => {
      inTransaction.push(api.store.db.inTransaction);
      if (throwing) throw new Error('outbox full');
      events.push(e);
    });
  });
  afterAll(async () => {
    await api.dispose();
    for (const o of [a, b]) o.server.close();
  });
  afterEach(() => {
    throwing = false;
  });

  const recorded = () => api.services.loadBalancing.store.healthEvents(api.accountId);

  it('finds two healthy origins healthy, and records no event for unknown -> healthy', async () => {
    const sdk = api.client();
    const m = await sdk.loadBalancers.monitors.create({ account_id: api.accountId, interval: 1, timeout: 1, retries: 0, expected_codes: '2xx', port: 0 });
    const pool = await sdk.loadBalancers.pools.create({
      account_id: api.accountId,
      name: 'web',
      minimum_origins: 2,
      monitor: m.id,
      notification_email: 'ops@example.com',
      notification_filter: { origin: { disable: true } },
      origins: [
        { name: 'a', address: '127.0.0.1', port: a.port },
        { name: 'b', address: '127.0.0.1', port: b.port },
      ],
    });
    const healthy = await until('the pool to be healthy', async () => {
      const p = await sdk.loadBalancers.pools.get(pool.id!, { account_id: api.accountId });
      return (p as { healthy?: boolean }).healthy === true ? p : undefined;
    });
    expect(healthy.origins!.map((o) => [(o as { healthy?: boolean }).healthy, (o as { failure_reason?: string }).failure_reason])).toEqual([
      [true, 'No failures'],
      [true, 'No failures'],
    ]);
    expect(recorded()).toEqual([]);
    expect(events).toEqual([]);
  });

  it('records the origin\'s and the pool\'s edges with every field, inside the transaction, when an origin fails', async () => {
    const [pool] = (await api.call('GET', `/accounts/${api.accountId}/load_balancers/pools`)).json.result as { id: string }[];
    inTransaction = [];
    a.status = 503;
    await until('two events', () => (events.length >= 2 ? true : undefined));
    await new Promise((r) => setTimeout(r, 1500)); // another probe of each: no repeat while the state holds
    expect(events.map((e) => [e.eventSource, e.origin?.name ?? null, e.oldHealth, e.newHealth, e.reason])).toEqual([
      ['origin', 'a', 'healthy', 'unhealthy', 'HTTP 503'],
      ['pool', null, 'healthy', 'unhealthy', '1 healthy origin, fewer than minimum_origins (2)'],
    ]);
    expect(events[0]).toMatchObject({
      accountId: api.accountId,
      pool: { id: pool!.id, name: 'web', notificationEmail: 'ops@example.com', notificationFilter: { origin: { disable: true } } },
      origin: { name: 'a', address: '127.0.0.1' },
    });
    expect(events[0]!.id).toMatch(/^[0-9a-f]{32}$/);
    expect(events[0]!.at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(inTransaction).toEqual([true, true]);
    expect(recorded().map((r) => [r.id, r.event_source, r.new_health])).toEqual(events.map((e) => [e.id, e.eventSource, e.newHealth]));
    const health = (await api.call('GET', `/accounts/${api.accountId}/load_balancers/pools/${pool!.id}/health`)).json.result;
    const [ha, hb] = health.pop_health.moat.origins as Record<string, { healthy: boolean; failure_reason: string; response_code: number; rtt: string }>[];
    expect(health.pop_health.moat.healthy).toBe(false);
    expect(ha!['127.0.0.1']).toMatchObject({ healthy: false, failure_reason: 'HTTP 503', response_code: 503 });
    expect(ha!['127.0.0.1']!.rtt).toMatch(/^\d+\.\dms$/);
    expect(hb!['127.0.0.1']).toMatchObject({ healthy: true, failure_reason: 'No failures', response_code: 200 });
  });

  it('records the recovery of both, with an empty reason', async () => {
    events.length = 0;
    a.status = 200;
    await until('two recovery events', () => (events.length >= 2 ? true : undefined));
    expect(events.map((e) => [e.eventSource, e.oldHealth, e.newHealth, e.reason])).toEqual([
      ['origin', 'unhealthy', 'healthy', ''],
      ['pool', 'unhealthy', 'healthy', ''],
    ]);
  });

  it('rolls the event back when a listener throws, and records it once the listener works again', async () => {
    events.length = 0;
    const before = recorded().length;
    throwing = true;
    b.status = 500;
    await until('a listener call', () => (inTransaction.length > 4 ? true : undefined));
    await new Promise((r) => setTimeout(r, 1200));
    expect(recorded().length).toBe(before);
    const [pool] = (await api.call('GET', `/accounts/${api.accountId}/load_balancers/pools`)).json.result as { id: string; healthy: boolean; origins: { healthy: boolean }[] }[];
    // Neither the origin's state nor the pool's moved: the edge is still ahead.
    expect([pool!.healthy, pool!.origins[1]!.healthy]).toEqual([true, true]);
    throwing = false;
    await until('the events once the listener works', () => (events.length >= 2 ? true : undefined));
    expect(events.map((e) => [e.eventSource, e.origin?.name ?? null, e.newHealth, e.reason])).toEqual([
      ['origin', 'b', 'unhealthy', 'HTTP 500'],
      ['pool', null, 'unhealthy', '1 healthy origin, fewer than minimum_origins (2)'],
    ]);
    expect(recorded().length).toBe(before + 2);
    b.status = 200;
    await until('recovery', () => (events.length >= 4 ? true : undefined));
  });

  it('applies a monitor edit at the next probe (expected_codes narrowed: every origin fails)', async () => {
    events.length = 0;
    const [m] = (await api.call('GET', `/accounts/${api.accountId}/load_balancers/monitors`)).json.result as { id: string }[];
    await api.client().loadBalancers.monitors.edit(m!.id, { account_id: api.accountId, expected_codes: '204' } as never);
    await until('both origins down', () => (events.filter((e) => e.eventSource === 'origin').length >= 2 ? true : undefined));
    expect(events.filter((e) => e.eventSource === 'origin').map((e) => e.reason)).toEqual(['HTTP 200', 'HTTP 200']);
    await api.client().loadBalancers.monitors.edit(m!.id, { account_id: api.accountId, expected_codes: '2xx' } as never);
    await until('recovery', () => (events.filter((e) => e.eventSource === 'pool').length >= 2 ? true : undefined));
  });
});

describe('damping, TCP origins and restarts', () => {
  let tcp: TcpServer;
  let tcpPort: number;
  const listen = async (port = 0) => {
    tcp = createTcpServer((s) => s.destroy());
    await new Promise<void>((r) => tcp.listen(port, '127.0.0.1', r));
    tcpPort = (tcp.address() as AddressInfo).port;
  };
  beforeAll(async () => listen());
  afterAll(() => tcp.close());

  it('flips a TCP origin only after consecutive_down failures, and a restarted server records no event while health holds', async () => {
    let api = await startApi(FAST);
    const dataDir = api.dataDir;
    const events: HealthEvent[] = [];
    api.services.loadBalancing.store.onHealthEvent((e) => events.push(e));
    const sdk = api.client();
    const m = await sdk.loadBalancers.monitors.create({ account_id: api.accountId, type: 'tcp', port: tcpPort, interval: 1, timeout: 1, consecutive_down: 3 } as never);
    const pool = await sdk.loadBalancers.pools.create({ account_id: api.accountId, name: 'db', monitor: m.id, origins: [{ name: 'db-1', address: '127.0.0.1' }] });
    const poolHealthy = async (t: TestApi) => ((await t.call('GET', `/accounts/${t.accountId}/load_balancers/pools/${pool.id}`)).json.result as { healthy?: boolean }).healthy;
    await until('healthy', async () => ((await poolHealthy(api)) === true ? true : undefined));

    // Down: three consecutive failures (about 3 s at 1 s intervals) before the edge.
    const downAt = Date.now();
    await new Promise((r) => tcp.close(r));
    await until('the origin down', () => (events.length >= 1 ? true : undefined));
    expect(Date.now() - downAt).toBeGreaterThanOrEqual(1900);
    expect(events.map((e) => [e.eventSource, e.newHealth, e.reason])).toEqual([
      ['origin', 'unhealthy', 'connection refused'],
      ['pool', 'unhealthy', '0 healthy origins, fewer than minimum_origins (1)'],
    ]);

    // Restart while the origin is still down: health unknown until the first result, and no event (the state was reloaded).
    const { key, email, accountId } = api;
    await api.stop();
    api = await startApi({ ...FAST, dataDir, email, key, accountId });
    const after: HealthEvent[] = [];
    api.services.loadBalancing.store.onHealthEvent((e) => after.push(e));
    expect(await poolHealthy(api)).toBeUndefined();
    await until('a result after the restart', async () => ((await poolHealthy(api)) === false ? true : undefined));
    await new Promise((r) => setTimeout(r, 1500));
    expect(after).toEqual([]);

    // Up again on the same port: a real edge, recorded once, from the reloaded unhealthy state.
    await listen(tcpPort);
    await until('recovery', () => (after.length >= 2 ? true : undefined));
    expect(after.map((e) => [e.eventSource, e.oldHealth, e.newHealth])).toEqual([
      ['origin', 'unhealthy', 'healthy'],
      ['pool', 'unhealthy', 'healthy'],
    ]);

    // Restart while healthy: no unknown -> healthy event, and none at all.
    await api.stop();
    api = await startApi({ ...FAST, dataDir, email, key, accountId });
    const third: HealthEvent[] = [];
    api.services.loadBalancing.store.onHealthEvent((e) => third.push(e));
    await until('healthy after the restart', async () => ((await poolHealthy(api)) === true ? true : undefined));
    await new Promise((r) => setTimeout(r, 1500));
    expect(third).toEqual([]);
    expect(api.services.loadBalancing.store.healthEvents(accountId).length).toBe(4);
    await api.dispose();
  });
});

describe('stopping', () => {
  it('does not wait for a probe in flight (an origin that never answers: 3 tries of 5 s)', async () => {
    const silent = createHttpServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const api = await startApi(FAST);
    try {
      const sdk = api.client();
      const m = await sdk.loadBalancers.monitors.create({ account_id: api.accountId, interval: 5, timeout: 5, retries: 2 });
      await sdk.loadBalancers.pools.create({ account_id: api.accountId, name: 'slow', monitor: m.id, origins: [{ name: 's', address: '127.0.0.1', port: (silent.address() as AddressInfo).port }] });
      await until('the probe to start', () => (api.services.healthMonitor.statistics().samples > 0 ? true : undefined), 15_000);
      const started = Date.now();
      await api.stop();
      expect(Date.now() - started).toBeLessThan(2000);
    } finally {
      await api.dispose();
      silent.closeAllConnections();
      silent.close();
    }
  }, 60_000);
});
