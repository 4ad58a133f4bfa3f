// Health events become outbox rows in the transaction that records them: one
// per policy email address, per policy webhook, and per legacy pool address
// (as the pool's notification_filter allows), matched on the policies'
// pool_id, new_health and event_source filters; nothing for disabled
// policies, for the first result after a start, or when the transaction rolls
// back. Recovery ends the incident its failure started (same correlation id).
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newId } from '../../src/store/index.js';
import { healthEvent, notifyFixture } from './support.js';

let f: ReturnType<typeof notifyFixture>;
beforeEach(() => {
  f = notifyFixture();
});
afterEach(() => f.dispose());

function webhook(name = 'hook'): string {
  return f.alerting.insertWebhook(f.accountId, { name, url: new URL('https://hooks.example.com/x'), secret: 's3cret' });
}

function policy(body: Record<string, unknown>): string {
  return f.alerting.createPolicy(f.accountId, { name: 'p', alert_type: 'load_balancing_health_alert', enabled: true, mechanisms: {}, ...body });
}

describe('matching health events against policies', () => {
  it('queues one email per address and one webhook per destination of each matching policy', async () => {
    const pool = newId();
    f.pools.add(pool);
    const hook = webhook();
    const p = policy({ mechanisms: { email: [{ id: 'a@example.com' }, { id: 'b@example.com' }], webhooks: [{ id: hook }] } });
    const event = healthEvent(f.accountId, { id: pool, name: 'web' });
    await f.emit(event);
    const rows = f.outbox();
    expect(rows.map((r) => [r.policy_id, r.mechanism_type, r.target, r.event_id, r.status])).toEqual([
      [p, 'email', 'a@example.com', event.id, 'pending'],
      [p, 'email', 'b@example.com', event.id, 'pending'],
      [p, 'webhook', hook, event.id, 'pending'],
    ]);
    const body = JSON.parse(rows[2]!.payload).body;
    expect(body).toEqual({
      name: 'p',
      text: 'Pool web is Unhealthy: HTTP 503 (was Healthy, at 2026-11-24T10:00:00.000000Z).',
      data: {
        account_id: f.accountId,
        pool_id: pool,
        pool_name: 'web',
        event_source: 'pool',
        origin_name: null,
        origin_address: null,
        new_health: 'Unhealthy',
        old_health: 'Healthy',
        reason: 'HTTP 503',
        changed_at: '2026-11-24T10:00:00.000000Z',
      },
      ts: Date.parse('2026-11-24T10:00:00Z') / 1000,
      account_id: f.accountId,
      policy_id: p,
      policy_name: 'p',
      alert_type: 'load_balancing_health_alert',
      alert_correlation_id: event.id,
      alert_event: 'ALERT_STATE_EVENT_START',
    });
  });

  it('honours pool_id, new_health and event_source, and skips disabled policies', async () => {
    const [a, b] = [newId(), newId()];
    f.pools.add(a).add(b);
    const onlyA = policy({ name: 'only a', filters: { pool_id: [a] }, mechanisms: { email: [{ id: 'a@example.com' }] } });
    const downOnly = policy({ name: 'down', filters: { new_health: ['Unhealthy'] }, mechanisms: { email: [{ id: 'down@example.com' }] } });
    const origins = policy({ name: 'origins', filters: { event_source: ['origin'] }, mechanisms: { email: [{ id: 'o@example.com' }] } });
    policy({ name: 'off', enabled: false, mechanisms: { email: [{ id: 'off@example.com' }] } });
    const who = () => f.outbox().splice(0).map((r) => r.policy_id);
    const clear = () => f.store.db.exec('DELETE FROM alert_outbox');

    await f.emit(healthEvent(f.accountId, { id: b }));
    expect(who()).toEqual([downOnly]);
    clear();
    await f.emit(healthEvent(f.accountId, { id: a }, { oldHealth: 'unhealthy', newHealth: 'healthy', reason: '' }));
    expect(who()).toEqual([onlyA]);
    clear();
    await f.emit(healthEvent(f.accountId, { id: b }, { eventSource: 'origin', origin: { name: 'o1', address: '192.0.2.1' } }));
    expect(who().sort()).toEqual([downOnly, origins].sort());
  });

  it('does not notify the first result after a start (old health unknown)', async () => {
    policy({ mechanisms: { email: [{ id: 'a@example.com' }] } });
    await f.emit(healthEvent(f.accountId, { id: newId(), notificationEmail: 'legacy@example.com' }, { oldHealth: null }));
    expect(f.outbox()).toEqual([]);
  });

  it('writes nothing when the transaction recording the event rolls back', async () => {
    policy({ mechanisms: { email: [{ id: 'a@example.com' }] } });
    await expect(
      f.asyncStore.write(async (tx) => {
        await f.notifier.onHealthEvent(healthEvent(f.accountId, { id: newId() }), tx);
        throw new Error('the health side failed after the listener');
      }),
    ).rejects.toThrow(/health side/);
    expect(f.outbox()).toEqual([]);
  });

  it("ignores other accounts' policies", async () => {
    f.alerting.createPolicy(f.otherAccount, { name: 'theirs', alert_type: 'load_balancing_health_alert', enabled: true, mechanisms: { email: [{ id: 't@example.com' }] } });
    await f.emit(healthEvent(f.accountId, { id: newId() }));
    expect(f.outbox()).toEqual([]);
  });

  it('ends the incident its failure started: END carries the START correlation id, and a new failure starts a new one', async () => {
    const hook = webhook();
    policy({ mechanisms: { webhooks: [{ id: hook }] } });
    const pool = newId();
    const down = healthEvent(f.accountId, { id: pool });
    await f.emit(down);
    await f.emit(healthEvent(f.accountId, { id: pool }, { oldHealth: 'unhealthy', newHealth: 'healthy', reason: '' }));
    const again = healthEvent(f.accountId, { id: pool });
    await f.emit(again);
    const bodies = f.outbox().map((r) => JSON.parse(r.payload).body as { alert_event: string; alert_correlation_id: string });
    expect(bodies.map((b) => [b.alert_event, b.alert_correlation_id])).toEqual([
      ['ALERT_STATE_EVENT_START', down.id],
      ['ALERT_STATE_EVENT_END', down.id],
      ['ALERT_STATE_EVENT_START', again.id],
    ]);
  });
});

describe('legacy pool notification_email', () => {
  it('queues one email per address of the pool for its own events, with no policy', async () => {
    await f.emit(healthEvent(f.accountId, { id: newId(), name: 'api', notificationEmail: 'x@example.com, y@example.com,,X@example.com ' }));
    const rows = f.outbox();
    expect(rows.map((r) => [r.policy_id, r.mechanism_type, r.target])).toEqual([
      [null, 'email', 'x@example.com'],
      [null, 'email', 'y@example.com'],
    ]);
    expect(JSON.parse(rows[0]!.payload)).toMatchObject({ subject: '[Moat] Pool api is Unhealthy', legacy_pool: 'api' });
  });

  it.each([
    ['no filter', null, [true, true, true, true]],
    ['origin events disabled', { origin: { disable: true } }, [true, true, false, false]],
    ['pool: down events only', { pool: { healthy: false } }, [true, false, true, true]],
    ['pool: up events only, origins null (all)', { pool: { healthy: true }, origin: { healthy: null } }, [false, true, true, true]],
  ] as const)('respects notification_filter (%s)', async (_name, filter, expected) => {
    const cases = [
      { eventSource: 'pool', newHealth: 'unhealthy' },
      { eventSource: 'pool', newHealth: 'healthy' },
      { eventSource: 'origin', newHealth: 'unhealthy' },
      { eventSource: 'origin', newHealth: 'healthy' },
    ] as const;
    const sent: boolean[] = [];
    for (const c of cases) {
      f.store.db.exec('DELETE FROM alert_outbox');
      await f.emit(
        healthEvent(
          f.accountId,
          { id: newId(), notificationEmail: 'ops@example.com', notificationFilter: filter as Record<string, unknown> | null },
          { eventSource: c.eventSource, newHealth: c.newHealth, oldHealth: c.newHealth === 'healthy' ? 'unhealthy' : 'healthy', origin: c.eventSource === 'origin' ? { name: 'o', address: '192.0.2.9' } : undefined },
        ),
      );
      sent.push(f.outbox().length === 1);
    }
    expect(sent).toEqual(expected);
  });
});
