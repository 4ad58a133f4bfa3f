// The origin state machine and the pool rule alone (decide): damping by
// consecutive_up / consecutive_down, edges only, unknown -> healthy silent,
// unknown -> unhealthy recorded with no old health, minimum_origins, and a
// changed address starting over as a new origin.
import { describe, expect, it } from 'vitest';
import { decide, type ProbeResult } from '../../src/health/index.js';
import type { OriginHealthRow } from '../../src/store/index.js';

const pass: ProbeResult = { ok: true, reason: '', timedOut: false, responseCode: 200, rttMs: 1 };
const down: ProbeResult = { ok: false, reason: 'HTTP 503', timedOut: false, responseCode: 503, rttMs: 1 };

function target(minimum = 1, origins = [{ name: 'a', address: '192.0.2.1', enabled: true }]) {
  const pool = {
    id: 'p'.repeat(32),
    accountId: 'c'.repeat(32),
    name: 'web',
    monitorId: 'm'.repeat(32),
    body: { name: 'web', origins, minimum_origins: minimum, notification_email: 'ops@example.com', notification_filter: null },
    createdOn: '',
    modifiedOn: '',
  };
  return { pool, monitor: { id: 'm', accountId: '', body: {}, createdOn: '', modifiedOn: '' }, origin: { name: origins[0]!.name, address: origins[0]!.address, port: 0 } };
}

/** Runs results through decide as the store would keep them; returns each step's [origin health, pool health, events]. */
function run(results: ProbeResult[], up = 0, downs = 0, t = target()) {
  const rows = new Map<string, OriginHealthRow>();
  let pool: 'healthy' | 'unhealthy' | null = null;
  return results.map((r) => {
    const d = decide(t, { consecutive_up: up, consecutive_down: downs }, r, rows, pool);
    pool = d.poolHealth;
    return [d.origin.health, d.poolHealth, d.events.map((e) => `${e.eventSource}:${e.oldHealth ?? 'unknown'}->${e.newHealth}`).join(' ')];
  });
}

describe('the origin state machine', () => {
  it('settles unknown -> healthy without an event, then flips on one failure with consecutive_down 0', () => {
    expect(run([pass, pass, down, pass])).toEqual([
      ['healthy', 'healthy', ''],
      ['healthy', 'healthy', ''],
      ['unhealthy', 'unhealthy', 'origin:healthy->unhealthy pool:healthy->unhealthy'],
      ['healthy', 'healthy', 'origin:unhealthy->healthy pool:unhealthy->healthy'],
    ]);
  });

  it('needs consecutive_down failures in a row (a pass in between starts over), and consecutive_up passes to recover', () => {
    const steps = run([pass, pass, down, pass, down, down, down, pass, pass], 2, 3);
    expect(steps.map((s) => s[0])).toEqual([null, 'healthy', 'healthy', 'healthy', 'healthy', 'healthy', 'unhealthy', 'unhealthy', 'healthy']);
    expect(steps.map((s) => s[2])).toEqual(['', '', '', '', '', '', 'origin:healthy->unhealthy pool:healthy->unhealthy', '', 'origin:unhealthy->healthy pool:unhealthy->healthy']);
  });

  it('records unknown -> unhealthy, with no old health', () => {
    expect(run([down])).toEqual([['unhealthy', 'unhealthy', 'origin:unknown->unhealthy pool:unknown->unhealthy']]);
  });

  it('keeps the pool healthy while healthy enabled origins reach minimum_origins, disabled origins aside', () => {
    const t = target(1, [
      { name: 'a', address: '192.0.2.1', enabled: true },
      { name: 'b', address: '192.0.2.2', enabled: true },
      { name: 'c', address: '192.0.2.3', enabled: false },
    ]);
    const rows = new Map<string, OriginHealthRow>();
    const m = { consecutive_up: 0, consecutive_down: 0 };
    const tb = { ...t, origin: { name: 'b', address: '192.0.2.2', port: 0 } };
    let d = decide(t, m, pass, rows, null);
    expect(d.poolHealth).toBe('healthy');
    d = decide(tb, m, pass, rows, d.poolHealth);
    d = decide(t, m, down, rows, d.poolHealth);
    expect([d.poolHealth, d.events.map((e) => e.eventSource)]).toEqual(['healthy', ['origin']]);
    d = decide(tb, m, down, rows, d.poolHealth);
    expect([d.poolHealth, d.events.map((e) => e.eventSource)]).toEqual(['unhealthy', ['origin', 'pool']]);
    expect(d.events[1]!.reason).toBe('0 healthy origins, fewer than minimum_origins (1)');
  });

  it('treats an origin whose address changed as new (unknown), so no healthy -> healthy across addresses', () => {
    const rows = new Map<string, OriginHealthRow>();
    const m = { consecutive_up: 0, consecutive_down: 0 };
    decide(target(), m, pass, rows, null);
    const moved = target(1, [{ name: 'a', address: '192.0.2.9', enabled: true }]);
    const d = decide(moved, m, down, rows, 'healthy');
    expect(d.events.map((e) => [e.eventSource, e.oldHealth, e.newHealth])).toEqual([
      ['origin', null, 'unhealthy'],
      ['pool', 'healthy', 'unhealthy'],
    ]);
  });
});
