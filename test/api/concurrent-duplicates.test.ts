// Concurrent creations of one unique name (issue #20): eight writers racing
// for one list name, one entrypoint, one daemon name, one user's email. SQLite
// serialises them; PostgreSQL runs them at once, and a unique violation
// (23505) must not escape as a 500: exactly one wins and every other one gets
// the coded error a lone duplicate gets (the serializable check-then-insert
// turns the race into a retry that sees the winner), on each store alike.
import { MoatError } from '../../src/errors/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApi, type TestUser } from '../support/api.js';
import { apiBackends } from '../support/backends.js';

const backends = apiBackends();
const WRITERS = 8;
let api: TestApi;

/** The registry code a settled store call failed with ('ok' when it succeeded). */
function outcome(r: PromiseSettledResult<unknown>): string | number {
  if (r.status === 'fulfilled') return 'ok';
  return r.reason instanceof MoatError ? r.reason.code : String(r.reason);
}

describe.each(backends)('on $name', (backend) => {
  let user: TestUser;
  beforeAll(async () => {
    api = await backend.start();
    user = await api.addUser();
  });
  afterAll(async () => {
    await api.dispose();
  });

  it('answers racing creations of one list name with one 200 and 400/7301 for the rest', async () => {
    const answers = await Promise.all(Array.from({ length: WRITERS }, () => user.call('POST', `/accounts/${user.accountId}/rules/lists`, { name: 'dup', kind: 'ip' })));
    const outcomes = answers.map((r) => (r.status === 200 ? 'ok' : `${r.status}/${r.json.errors[0].code}/${r.json.errors[0].source?.pointer}`)).sort();
    expect(outcomes).toEqual([...Array<string>(WRITERS - 1).fill('400/7301//name'), 'ok']);
    expect((await user.call('GET', `/accounts/${user.accountId}/rules/lists`)).json.result).toHaveLength(1);
  });

  it('makes one entrypoint of racing PUTs to a phase that has none, each a version of it', async () => {
    const answers = await Promise.all(Array.from({ length: WRITERS }, () => user.call('PUT', `/accounts/${user.accountId}/rulesets/phases/network_transit/entrypoint`, { rules: [] })));
    expect(answers.map((r) => r.status)).toEqual(Array<number>(WRITERS).fill(200));
    expect(new Set(answers.map((r) => r.json.result.id)).size).toBe(1);
    expect(answers.map((r) => Number(r.json.result.version)).sort((a, b) => a - b)).toEqual(Array.from({ length: WRITERS }, (_, i) => i + 1));
  });

  it('creates one daemon of a name and refuses the racing others with 7400', async () => {
    const settled = await Promise.allSettled(Array.from({ length: WRITERS }, () => api.services.store.daemons.create({ accountId: user.accountId, name: 'gw' })));
    expect(settled.map(outcome).sort()).toEqual([...Array<number>(WRITERS - 1).fill(7400), 'ok']);
  });

  it('creates one user of an email and refuses the racing others with 7400', async () => {
    const settled = await Promise.allSettled(Array.from({ length: WRITERS }, () => api.services.store.users.create({ email: 'twin@example.com', accounts: [user.accountId] })));
    expect(settled.map(outcome).sort()).toEqual([...Array<number>(WRITERS - 1).fill(7400), 'ok']);
  });
});
