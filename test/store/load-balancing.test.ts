// The store of pools, monitors and health (a real SQLite file): a batch of
// probe results is one transaction where each probe is its own savepoint (a
// listener that throws rolls back its probe only), a deleted pool records
// nothing, and API writes keep synchronous=FULL after a batch.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Database, LoadBalancingStore, newId, type ProbeRecord } from '../../src/store/index.js';
import { probeDown } from '../support/store-contract.js';

let dir: string;
let db: Database;
let lb: LoadBalancingStore;
const account = newId();

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'moat-lb-store-'));
  db = Database.open(dir);
  lb = new LoadBalancingStore(db);
});
afterEach(() => {
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

function pool(name: string) {
  return lb.createPool(account, name, null, { name, origins: [{ name: 'a', address: '192.0.2.1', enabled: true }], minimum_origins: 1, notification_email: '', notification_filter: null });
}

/** A probe that turns origin "a" of `poolId` unhealthy, with one origin event. */
const down = (poolId: string): ProbeRecord => probeDown(account, poolId);

describe('recording probes', () => {
  it('rolls back only the probe whose listener throws, and returns its error in its place', () => {
    const [p1, p2, p3] = [pool('p1'), pool('p2'), pool('p3')];
    lb.onHealthEvent((e) => {
      if (e.pool.id === p2.id) throw new Error('outbox full');
    });
    const results = lb.recordProbes([down(p1.id), down(p2.id), down(p3.id)]);
    expect(results.map((r) => (r instanceof Error ? r.message : r.length))).toEqual([1, 'outbox full', 1]);
    expect(lb.healthEvents(account).map((e) => e.pool_id).sort()).toEqual([p1.id, p3.id].sort());
    expect([lb.poolHealth(p1.id), lb.poolHealth(p2.id), lb.poolHealth(p3.id)]).toEqual(['unhealthy', null, 'unhealthy']);
    expect(lb.originHealth(p2.id).size).toBe(0);
  });

  it('records nothing for a pool deleted since its probe began', () => {
    const p = pool('gone');
    lb.deletePool(account, p.id);
    expect(lb.recordProbes([down(p.id)])).toEqual([[]]);
    expect(lb.healthEvents(account)).toEqual([]);
  });

  it('leaves the connection at synchronous=FULL for the API\'s writes', () => {
    const p = pool('p');
    lb.recordProbes([down(p.id)]);
    expect(db.db.pragma('synchronous', { simple: true })).toBe(2);
  });
});
