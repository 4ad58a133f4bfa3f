// Versions are cached parsed, and a version number can be given twice: once to
// a dry run (rolled back) and again to the real write. The cache must never
// serve the dry run's rules under the real version.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type TestApi } from '../support/api.js';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  await api.dispose();
});

describe('the version cache', () => {
  it('serves the real rules of a version number a dry run used first', async () => {
    const base = `/accounts/${api.accountId}/rulesets`;
    const created = await api.call('POST', base, { name: 'c', kind: 'custom', phase: 'network_transit', rules: [{ action: 'block', expression: 'tcp.dstport == 1' }] });
    expect(created.status).toBe(200);
    const id = created.json.result.id as string;
    const dry = await api.call('POST', `${base}/${id}/rules?dry_run=true`, { action: 'block', expression: 'tcp.dstport == 666', description: 'dry' });
    expect([dry.status, dry.json.result.version]).toEqual([200, '2']);
    // the real version 2 is made by another server process on the same database
    const other = await startApi({ dataDir: api.dataDir, email: api.email, key: api.key, accountId: api.accountId, zoneId: api.zoneId });
    try {
      const real = await other.call('POST', `${base}/${id}/rules`, { action: 'log', expression: 'tcp.dstport == 2', description: 'real' });
      expect(real.json.result.version).toBe('2');
    } finally {
      await other.stop();
    }
    for (const path of [`${base}/${id}`, `${base}/${id}/versions/2`]) {
      const got = await api.call('GET', path);
      expect(got.json.result.rules.map((r: { description: string }) => r.description)).toEqual(['', 'real']);
    }
  });

  it('does not serve a version another connection deleted', async () => {
    const base = `/accounts/${api.accountId}/rulesets`;
    const created = await api.call('POST', base, { name: 'd', kind: 'custom', phase: 'network_transit', rules: [] });
    const id = created.json.result.id as string;
    await api.call('POST', `${base}/${id}/rules`, { action: 'block', expression: 'tcp.dstport == 3' });
    expect((await api.call('GET', `${base}/${id}/versions/2`)).status).toBe(200);
    // delete behind the server's back, as another process would
    api.store.db.prepare('DELETE FROM ruleset_versions WHERE ruleset_id = ? AND version = 2').run(id);
    const gone = await api.call('GET', `${base}/${id}/versions/2`);
    expect([gone.status, gone.json.errors[0].code]).toEqual([404, 7201]);
  });
});
