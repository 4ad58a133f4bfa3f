// The Rulesets API through Cloudflare's official SDK (and plain fetch where the
// SDK has no method): every operation at account and zone level, versions and
// rule identity, positions, dry runs, managed rulesets, error codes, and
// concurrent writers on one ruleset. A real server over a real SQLite file,
// and the same scenarios over a real PostgreSQL database.
import { BadRequestError, NotFoundError, PermissionDeniedError } from 'cloudflare';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_API_LIMITS, RulesetService } from '../../src/api/index.js';
import { newId } from '../../src/store/index.js';
import { PHASE, rejection, written, type Phase, type Ruleset, type TestApi, type TestUser } from '../support/api.js';
import { apiBackends } from '../support/backends.js';

let api: TestApi;
let tenants = 0;
const backends = apiBackends();

/** A user of its own account (and zone), so entrypoints of one test never collide with another's. */
function tenant(): Promise<TestUser> {
  return api.addUser(`tenant${++tenants}@example.com`);
}

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of iterable) out.push(x);
  return out;
}

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    api = await backend.start();
  });

  afterAll(async () => {
    await api.dispose();
  });

  describe('rulesets at account level through the SDK', () => {
    it('creates a ruleset at version "1" with server-given rule ids, and gets it back identical', async () => {
      const t = await tenant();
      const created = await written(t.client.rulesets.create({
        account_id: t.accountId,
        name: 'edge',
        kind: 'root',
        phase: PHASE,
        description: 'transit policy',
        rules: [
          { action: 'block', expression: 'tcp.dstport == 23', description: 'telnet' },
          { action: 'skip', expression: 'ip.src in {10.0.0.0/8}', action_parameters: { ruleset: 'current' } },
        ],
      }));
      expect(created).toMatchObject({ name: 'edge', kind: 'root', phase: 'network_transit', version: '1', description: 'transit policy' });
      expect(created.id).toMatch(/^[0-9a-f]{32}$/);
      expect(created.last_updated).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
      expect(created.rules).toHaveLength(2);
      expect(created.rules[0]).toMatchObject({ version: '1', action: 'block', expression: 'tcp.dstport == 23', description: 'telnet', enabled: true });
      expect(created.rules[0]!.id).toMatch(/^[0-9a-f]{32}$/);
      expect(created.rules[0]!.ref).toBe(created.rules[0]!.id);
      expect(created.rules[1]!.action_parameters).toEqual({ ruleset: 'current' });

      const got = await t.client.rulesets.get(created.id, { account_id: t.accountId });
      expect(got).toEqual(created);
    });

    it('lists rulesets without rules, a page at a time through the cursor', async () => {
      const t = await tenant();
      const names = ['one', 'two', 'three'];
      for (const name of names) await written(t.client.rulesets.create({ account_id: t.accountId, name, kind: 'custom', phase: PHASE, rules: [] }));
      const firstPage = await t.client.rulesets.list({ account_id: t.accountId, per_page: 1 });
      expect(firstPage.result).toHaveLength(1);
      expect(typeof firstPage.result_info.cursor).toBe('string');
      const all = await collect(t.client.rulesets.list({ account_id: t.accountId, per_page: 1 }));
      expect(all.map((r) => r.name)).toEqual(names);
      for (const r of all) expect(r).not.toHaveProperty('rules');
      // The last page has no cursor, which is what stops the SDK.
      const last = await t.call('GET', `/accounts/${t.accountId}/rulesets?per_page=3`);
      expect(last.json.result).toHaveLength(3);
      expect(last.json.result_info.cursor).toBeUndefined();
    });

    it('answers a bad per_page (empty included) or cursor with 400/7014 pointing at the parameter, as the lists endpoints do', async () => {
      const t = await tenant();
      for (const q of ['per_page=', 'per_page=0', 'per_page=abc', 'per_page=1001', 'cursor=abc', 'cursor=a&cursor=b']) {
        const r = await t.call('GET', `/accounts/${t.accountId}/rulesets?${q}`);
        expect(r.status, q).toBe(400);
        expect(r.json.errors[0].code, q).toBe(7014);
        expect(r.json.errors[0].source, q).toEqual({ pointer: q.slice(0, q.indexOf('=')) });
      }
    });

    it('updates with PUT: a new version, the description changed, a rule sent with its id keeps its id', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({
        account_id: t.accountId,
        name: 'edge',
        kind: 'custom',
        phase: PHASE,
        rules: [
          { action: 'block', expression: 'tcp.dstport == 23' },
          { action: 'log', expression: 'udp.dstport == 53' },
        ],
      }));
      const [a, b] = rs.rules;
      const updated = await written(t.client.rulesets.update(rs.id, {
        account_id: t.accountId,
        description: 'second',
        rules: [
          { id: a!.id, action: 'block', expression: 'tcp.dstport == 23' },
          { id: b!.id, action: 'block', expression: 'udp.dstport == 53' },
          { action: 'log', expression: 'icmp.type == 8' },
        ],
      }));
      expect(updated.version).toBe('2');
      expect(updated.description).toBe('second');
      expect(updated.rules.map((r) => r.id).slice(0, 2)).toEqual([a!.id, b!.id]);
      // The unchanged rule keeps its version and timestamp; the changed one moves.
      expect(updated.rules[0]).toMatchObject({ version: '1', last_updated: a!.last_updated });
      expect(updated.rules[1]).toMatchObject({ version: '2', action: 'block' });
      expect(updated.rules[2]!.version).toBe('2');
      expect([a!.id, b!.id]).not.toContain(updated.rules[2]!.id);

      // Reordering is not a definition change: both rules keep version and last_updated.
      const reordered = await written(t.client.rulesets.update(rs.id, {
        account_id: t.accountId,
        // The SDK wants one of its action literals; the actions are sent back unchanged.
        rules: [updated.rules[1], updated.rules[0], updated.rules[2]].map((r) => ({ id: r!.id, action: r!.action as 'block', expression: r!.expression! })),
      }));
      expect(reordered.version).toBe('3');
      expect(reordered.rules.map((r) => [r.id, r.version, r.last_updated])).toEqual([
        [b!.id, '2', updated.rules[1]!.last_updated],
        [a!.id, '1', a!.last_updated],
        [updated.rules[2]!.id, '2', updated.rules[2]!.last_updated],
      ]);
    });

    it('deletes a ruleset with 204, after which it and all its versions answer 404 with code 7200', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'gone', kind: 'custom', phase: PHASE, rules: [] }));
      await written(t.client.rulesets.update(rs.id, { account_id: t.accountId, rules: [{ action: 'block', expression: 'tcp.dstport == 1' }] }));
      const del = await t.call('DELETE', `/accounts/${t.accountId}/rulesets/${rs.id}`);
      expect(del.status).toBe(204);
      expect(del.text).toBe('');
      for (const path of [`/rulesets/${rs.id}`, `/rulesets/${rs.id}/versions`, `/rulesets/${rs.id}/versions/1`, `/rulesets/${rs.id}/versions/2`]) {
        const r = await t.call('GET', `/accounts/${t.accountId}${path}`);
        expect(r.status, path).toBe(404);
        expect(r.json.errors[0].code, path).toBe(7200);
      }
      const err = await rejection(t.client.rulesets.get(rs.id, { account_id: t.accountId }));
      expect(err).toBeInstanceOf(NotFoundError);
      expect(err.status).toBe(404);
      expect(err.errors[0]!.code).toBe(7200);
    });

    it('deletes through the SDK, which resolves on the empty 204', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'x', kind: 'custom', phase: PHASE }));
      await t.client.rulesets.delete(rs.id, { account_id: t.accountId });
      expect((await t.call('GET', `/accounts/${t.accountId}/rulesets/${rs.id}`)).status).toBe(404);
    });
  });

  describe('versions', () => {
    it('numbers versions 1, 2, 3 with one per change, lists them without rules, and gets each', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'v', kind: 'custom', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 1' }] }));
      const v2 = await written(t.client.rulesets.rules.create(rs.id, { account_id: t.accountId, action: 'block', expression: 'tcp.dstport == 2' }));
      const v3 = await written(t.client.rulesets.rules.delete(rs.rules[0]!.id, { ruleset_id: rs.id, account_id: t.accountId }));
      expect([rs.version, v2.version, v3.version]).toEqual(['1', '2', '3']);
      const versions = await collect(t.client.rulesets.versions.list(rs.id, { account_id: t.accountId }));
      expect(versions.map((v) => v.version)).toEqual(['1', '2', '3']);
      for (const v of versions) expect(v).not.toHaveProperty('rules');
      const one = await t.client.rulesets.versions.get('1', { ruleset_id: rs.id, account_id: t.accountId });
      expect(one.rules.map((r) => r.expression)).toEqual(['tcp.dstport == 1']);
      const two = await t.client.rulesets.versions.get('2', { ruleset_id: rs.id, account_id: t.accountId });
      expect(two.rules.map((r) => r.expression)).toEqual(['tcp.dstport == 1', 'tcp.dstport == 2']);
      const latest = await t.client.rulesets.get(rs.id, { account_id: t.accountId });
      expect(latest.version).toBe('3');
      expect(latest.rules.map((r) => r.expression)).toEqual(['tcp.dstport == 2']);
    });

    it('moves latest back when the latest version is deleted, and never reuses its number', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'v', kind: 'custom', phase: PHASE, description: 'd1', rules: [] }));
      await written(t.client.rulesets.update(rs.id, { account_id: t.accountId, description: 'd2', rules: [] }));
      await written(t.client.rulesets.update(rs.id, { account_id: t.accountId, description: 'd3', rules: [] }));
      const deleted = await t.client.rulesets.versions.delete('3', { ruleset_id: rs.id, account_id: t.accountId });
      expect(deleted ?? null).toBeNull();
      const back = await t.client.rulesets.get(rs.id, { account_id: t.accountId });
      expect(back).toMatchObject({ version: '2', description: 'd2' });
      const gone = await rejection(t.client.rulesets.versions.get('3', { ruleset_id: rs.id, account_id: t.accountId }));
      expect(gone.status).toBe(404);
      expect(gone.errors[0]!.code).toBe(7201);
      const next = await written(t.client.rulesets.update(rs.id, { account_id: t.accountId, rules: [] }));
      expect(next.version).toBe('4');
      // A middle version can go too; the rest stay.
      await t.client.rulesets.versions.delete('1', { ruleset_id: rs.id, account_id: t.accountId });
      expect((await collect(t.client.rulesets.versions.list(rs.id, { account_id: t.accountId }))).map((v) => v.version)).toEqual(['2', '4']);
    });

    it('refuses to delete the only version of a ruleset with 400/7210', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'v', kind: 'custom', phase: PHASE, rules: [] }));
      const err = await rejection(t.client.rulesets.versions.delete('1', { ruleset_id: rs.id, account_id: t.accountId }));
      expect(err).toBeInstanceOf(BadRequestError);
      expect(err.errors[0]!.code).toBe(7210);
      expect((await t.client.rulesets.get(rs.id, { account_id: t.accountId })).version).toBe('1');
    });

    it('answers 404/7201 for a version that never existed and for one that is not a number', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'v', kind: 'custom', phase: PHASE }));
      for (const v of ['9', 'abc', '0']) {
        const r = await t.call('GET', `/accounts/${t.accountId}/rulesets/${rs.id}/versions/${v}`);
        expect(r.status, v).toBe(404);
        expect(r.json.errors[0].code, v).toBe(7201);
      }
    });
  });

  describe('rules: add, edit, delete and positions', () => {
    async function threeRules(t: TestUser) {
      const rs = await written(t.client.rulesets.create({
        account_id: t.accountId,
        name: 'pos',
        kind: 'custom',
        phase: PHASE,
        rules: [
          { action: 'block', expression: 'tcp.dstport == 1', description: 'A' },
          { action: 'block', expression: 'tcp.dstport == 2', description: 'B' },
          { action: 'block', expression: 'tcp.dstport == 3', description: 'C' },
        ],
      }));
      return { rs, ids: rs.rules.map((r) => r.id) };
    }
    const order = (rs: { rules: { description?: string }[] }) => rs.rules.map((r) => r.description).join('');

    it('appends by default and places a rule before or after another, at an index, at the top and at the bottom', async () => {
      const t = await tenant();
      const { rs, ids } = await threeRules(t);
      const add = (description: string, position?: object) =>
        written(t.client.rulesets.rules.create(rs.id, { account_id: t.accountId, action: 'log', expression: 'tcp.dstport == 9', description, ...(position === undefined ? {} : { position }) }));
      expect(order(await add('D'))).toBe('ABCD');
      expect(order(await add('E', { before: ids[1] }))).toBe('AEBCD');
      expect(order(await add('F', { after: ids[0] }))).toBe('AFEBCD');
      expect(order(await add('G', { index: 1 }))).toBe('GAFEBCD');
      expect(order(await add('H', { index: 8 }))).toBe('GAFEBCDH');
      expect(order(await add('I', { before: '' }))).toBe('IGAFEBCDH');
      const last = await add('J', { after: '' });
      expect(order(last)).toBe('IGAFEBCDHJ');
      // Version 1 plus seven additions.
      expect(last.version).toBe('8');
      // The added rule answers with the full ruleset, the new rule at version 8.
      expect(last.rules[9]).toMatchObject({ version: '8', action: 'log', description: 'J' });
      expect(last.rules[2]).toMatchObject({ id: ids[0], version: '1' });
    });

    it('edits a rule: a definition change bumps its version, a position-only move does not', async () => {
      const t = await tenant();
      const { rs, ids } = await threeRules(t);
      const edited = await written(t.client.rulesets.rules.edit(ids[1]!, { ruleset_id: rs.id, account_id: t.accountId, action: 'log', expression: 'udp.dstport == 2', description: 'B' }));
      expect(edited.version).toBe('2');
      expect(order(edited)).toBe('ABC');
      expect(edited.rules[1]).toMatchObject({ id: ids[1], version: '2', action: 'log', expression: 'udp.dstport == 2' });
      expect(edited.rules[0]).toMatchObject({ id: ids[0], version: '1' });

      const moved = await written(t.client.rulesets.rules.edit(ids[2]!, { ruleset_id: rs.id, account_id: t.accountId, position: { before: '' } }));
      expect(moved.version).toBe('3');
      expect(order(moved)).toBe('CAB');
      expect(moved.rules[0]).toEqual(edited.rules[2]);

      const movedAfter = await written(t.client.rulesets.rules.edit(ids[2]!, { ruleset_id: rs.id, account_id: t.accountId, position: { after: ids[1] } }));
      expect(order(movedAfter)).toBe('ABC');
      const movedIndex = await written(t.client.rulesets.rules.edit(ids[0]!, { ruleset_id: rs.id, account_id: t.accountId, position: { index: 3 } }));
      expect(order(movedIndex)).toBe('BCA');
      expect(movedIndex.rules.map((r) => r.version)).toEqual(['2', '1', '1']);
    });

    it('deletes a rule with 200 and the full ruleset at a new version', async () => {
      const t = await tenant();
      const { rs, ids } = await threeRules(t);
      const r = await t.call('DELETE', `/accounts/${t.accountId}/rulesets/${rs.id}/rules/${ids[1]}`);
      expect(r.status).toBe(200);
      expect(r.json.success).toBe(true);
      expect(r.json.result.version).toBe('2');
      expect(r.json.result.rules.map((x: { id: string }) => x.id)).toEqual([ids[0], ids[2]]);
    });

    it('rejects bad positions with 400/7208 and a pointer into position', async () => {
      const t = await tenant();
      const { rs, ids } = await threeRules(t);
      const base = { action: 'block', expression: 'tcp.dstport == 4' };
      const cases: [unknown, string][] = [
        [{ index: 5 }, '/position/index'],
        [{ index: 0 }, '/position/index'],
        [{ index: 1.5 }, '/position/index'],
        [{ before: newId() }, '/position/before'],
        [{ after: 7 }, '/position/after'],
        [{ before: ids[0], after: ids[1] }, '/position'],
        [{ middle: ids[0] }, '/position'],
        ['top', '/position'],
      ];
      for (const [position, pointer] of cases) {
        const r = await t.call('POST', `/accounts/${t.accountId}/rulesets/${rs.id}/rules`, { ...base, position });
        expect(r.status, JSON.stringify(position)).toBe(400);
        expect(r.json.errors[0], JSON.stringify(position)).toMatchObject({ code: 7208, source: { pointer } });
      }
      const moved = await t.call('PATCH', `/accounts/${t.accountId}/rulesets/${rs.id}/rules/${ids[0]}`, { position: { index: 4 } });
      expect(moved.status).toBe(400);
      expect(moved.json.errors[0].code).toBe(7208);
      expect((await t.client.rulesets.get(rs.id, { account_id: t.accountId })).version).toBe('1');
    });

    it('answers 404/7202 for PATCH and DELETE of a rule that is not in the ruleset', async () => {
      const t = await tenant();
      const { rs } = await threeRules(t);
      const err = await rejection(written(t.client.rulesets.rules.edit(newId(), { ruleset_id: rs.id, account_id: t.accountId, action: 'block', expression: 'tcp.dstport == 5' })));
      expect(err).toBeInstanceOf(NotFoundError);
      expect(err.errors[0]!.code).toBe(7202);
      const del = await t.call('DELETE', `/accounts/${t.accountId}/rulesets/${rs.id}/rules/${newId()}`);
      expect(del.status).toBe(404);
      expect(del.json.errors[0].code).toBe(7202);
    });

    it('requires the expression on PATCH (20125) and the action when action_parameters are sent (7211)', async () => {
      const t = await tenant();
      const { rs, ids } = await threeRules(t);
      const noExpr = await t.call('PATCH', `/accounts/${t.accountId}/rulesets/${rs.id}/rules/${ids[0]}`, { action: 'log' });
      expect(noExpr.status).toBe(400);
      expect(noExpr.json.errors).toEqual([{ code: 20125, message: "'' is not a valid value for expression because the expression cannot be blank", source: { pointer: '/expression' } }]);
      const noAction = await t.call('PATCH', `/accounts/${t.accountId}/rulesets/${rs.id}/rules/${ids[0]}`, {
        expression: 'tcp.dstport == 1',
        action_parameters: { ruleset: 'current' },
      });
      expect(noAction.status).toBe(400);
      expect(noAction.json.errors[0]).toMatchObject({ code: 7211, message: 'action is required for action parameters', source: { pointer: '/action' } });
    });
  });

  describe('phase entrypoints', () => {
    it('answers 404/10003 for a missing entrypoint and [] for its versions', async () => {
      const t = await tenant();
      const err = await rejection(t.client.rulesets.phases.get(PHASE, { account_id: t.accountId }));
      expect(err).toBeInstanceOf(NotFoundError);
      expect(err.errors).toEqual([{ code: 10003, message: 'could not find entrypoint ruleset in the network_transit phase' }]);
      const versions = await collect(t.client.rulesets.phases.versions.list(PHASE, { account_id: t.accountId }));
      expect(versions).toEqual([]);
      const version = await rejection(t.client.rulesets.phases.versions.get('1', { ruleset_phase: PHASE, account_id: t.accountId }));
      expect(version.status).toBe(404);
      expect(version.errors[0]!.code).toBe(10003);
    });

    it('creates the entrypoint with PUT when it is missing, then updates it, and reads its versions', async () => {
      const t = await tenant();
      const first = await written(t.client.rulesets.phases.update(PHASE, { account_id: t.accountId, rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] }));
      expect(first).toMatchObject({ kind: 'root', phase: 'network_transit', version: '1' });
      const second = await written(t.client.rulesets.phases.update(PHASE, {
        account_id: t.accountId,
        rules: [{ id: first.rules[0]!.id, action: 'block', expression: 'tcp.dstport == 23' }, { action: 'log', expression: 'udp.dstport == 53' }],
      }));
      expect(second.id).toBe(first.id);
      expect(second.version).toBe('2');
      expect(second.rules[0]).toEqual(first.rules[0]);
      const got = await t.client.rulesets.phases.get(PHASE, { account_id: t.accountId });
      expect(got).toEqual(second);
      const versions = await collect(t.client.rulesets.phases.versions.list(PHASE, { account_id: t.accountId }));
      expect(versions.map((v) => v.version)).toEqual(['1', '2']);
      const v1 = await t.client.rulesets.phases.versions.get('1', { ruleset_phase: PHASE, account_id: t.accountId });
      expect(v1).toEqual(first);
      // magic_transit is an alias of network_transit.
      const alias = await t.client.rulesets.phases.get('magic_transit', { account_id: t.accountId });
      expect(alias.id).toBe(first.id);
    });

    it('refuses a second root ruleset for a phase with 400/20217 pointing at /kind, also through the magic_transit alias', async () => {
      const t = await tenant();
      await written(t.client.rulesets.create({ account_id: t.accountId, name: 'first', kind: 'root', phase: PHASE, rules: [] }));
      for (const phase of ['network_transit', 'magic_transit']) {
        const err = await rejection(written(t.client.rulesets.create({ account_id: t.accountId, name: 'second', kind: 'root', phase: phase as Phase, rules: [] })));
        expect(err).toBeInstanceOf(BadRequestError);
        expect(err.status).toBe(400);
        expect(err.errors[0]).toMatchObject({ code: 20217, source: { pointer: '/kind' } });
        expect(err.errors[0]!.message).toContain("'root' is not a valid value for kind because exceeded maximum number of root rulesets");
      }
      // A custom ruleset of the same phase is fine.
      const custom = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'custom', kind: 'custom', phase: PHASE, rules: [] }));
      expect(custom.kind).toBe('custom');
    });

    it('answers 400/7204 for an unknown phase on every entrypoint route', async () => {
      const t = await tenant();
      for (const [method, path, body] of [
        ['GET', 'phases/http_request_firewall_custom/entrypoint', undefined],
        ['PUT', 'phases/nope/entrypoint', { rules: [] }],
        ['GET', 'phases/nope/entrypoint/versions', undefined],
      ] as const) {
        const r = await t.call(method, `/accounts/${t.accountId}/rulesets/${path}`, body);
        expect(r.status, path).toBe(400);
        expect(r.json.errors[0].code, path).toBe(7204);
      }
    });
  });

  describe('zone level', () => {
    it('runs the same operations under /zones/{zone_id} with kind zone, separate from the account', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ zone_id: t.zoneId, name: 'z', kind: 'zone', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] }));
      expect(rs.kind).toBe('zone');
      const added = await written(t.client.rulesets.rules.create(rs.id, { zone_id: t.zoneId, action: 'log', expression: 'tcp.dstport == 24', position: { index: 1 } }));
      expect(added.rules.map((r) => r.expression)).toEqual(['tcp.dstport == 24', 'tcp.dstport == 23']);
      const edited = await written(t.client.rulesets.rules.edit(added.rules[0]!.id, { ruleset_id: rs.id, zone_id: t.zoneId, action: 'block', expression: 'tcp.dstport == 25' }));
      expect(edited.version).toBe('3');
      const afterDelete = await written(t.client.rulesets.rules.delete(added.rules[1]!.id, { ruleset_id: rs.id, zone_id: t.zoneId }));
      expect(afterDelete.rules.map((r) => r.expression)).toEqual(['tcp.dstport == 25']);
      const updated = await written(t.client.rulesets.update(rs.id, { zone_id: t.zoneId, rules: [] }));
      expect(updated.version).toBe('5');
      expect((await collect(t.client.rulesets.versions.list(rs.id, { zone_id: t.zoneId }))).map((v) => v.version)).toEqual(['1', '2', '3', '4', '5']);
      expect((await t.client.rulesets.versions.get('2', { ruleset_id: rs.id, zone_id: t.zoneId })).rules).toHaveLength(2);
      await t.client.rulesets.versions.delete('1', { ruleset_id: rs.id, zone_id: t.zoneId });

      // The zone's entrypoint is the zone-kind ruleset; the account has none.
      expect((await t.client.rulesets.phases.get(PHASE, { zone_id: t.zoneId })).id).toBe(rs.id);
      expect((await rejection(t.client.rulesets.phases.get(PHASE, { account_id: t.accountId }))).errors[0]!.code).toBe(10003);
      expect((await collect(t.client.rulesets.phases.versions.list(PHASE, { zone_id: t.zoneId }))).map((v) => v.version)).toEqual(['2', '3', '4', '5']);
      expect((await t.client.rulesets.phases.versions.get('3', { ruleset_phase: PHASE, zone_id: t.zoneId })).rules[0]!.expression).toBe('tcp.dstport == 25');
      const put = await written(t.client.rulesets.phases.update(PHASE, { zone_id: t.zoneId, rules: [{ action: 'block', expression: 'tcp.dstport == 26' }] }));
      expect(put).toMatchObject({ id: rs.id, version: '6' });

      // Zone rulesets are not listed at the account, and not reachable through it.
      const zoneList = await collect(t.client.rulesets.list({ zone_id: t.zoneId }));
      expect(zoneList.map((r) => r.id)).toEqual([rs.id]);
      expect(await collect(t.client.rulesets.list({ account_id: t.accountId }))).toEqual([]);
      expect((await t.call('GET', `/accounts/${t.accountId}/rulesets/${rs.id}`)).status).toBe(404);

      await t.client.rulesets.delete(rs.id, { zone_id: t.zoneId });
      expect((await t.call('GET', `/zones/${t.zoneId}/rulesets/${rs.id}`)).json.errors[0].code).toBe(7200);
    });

    it('allows only kind zone at zone level and only root or custom at account level (7203), never managed', async () => {
      const t = await tenant();
      const cases: [string, string][] = [
        [`/zones/${t.zoneId}/rulesets`, 'root'],
        [`/zones/${t.zoneId}/rulesets`, 'managed'],
        [`/accounts/${t.accountId}/rulesets`, 'zone'],
        [`/accounts/${t.accountId}/rulesets`, 'managed'],
      ];
      for (const [path, kind] of cases) {
        const r = await t.call('POST', path, { name: 'k', kind, phase: 'network_transit', rules: [] });
        expect(r.status, `${path} ${kind}`).toBe(400);
        expect(r.json.errors[0], `${path} ${kind}`).toMatchObject({ code: 7203, source: { pointer: '/kind' } });
      }
    });
  });

  describe('dry runs', () => {
    it('validates every write and answers with the ruleset it would have written, but persists nothing (204 stays 204)', async () => {
      const t = await tenant();
      const acct = `/accounts/${t.accountId}`;
      const dryCreate = await written(t.client.rulesets.create({ account_id: t.accountId, dry_run: true, name: 'dry', kind: 'root', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 9' }] }));
      expect(dryCreate).toMatchObject({ name: 'dry', kind: 'root', phase: 'network_transit', version: '1' });
      expect(dryCreate.rules.map((r) => [r.action, r.expression, r.version])).toEqual([['block', 'tcp.dstport == 9', '1']]);
      expect(await collect(t.client.rulesets.list({ account_id: t.accountId }))).toEqual([]);
      expect((await rejection(t.client.rulesets.get(dryCreate.id, { account_id: t.accountId }))).status).toBe(404);
      expect(await written(t.client.rulesets.phases.update(PHASE, { account_id: t.accountId, dry_run: true, rules: [] }))).toMatchObject({ kind: 'root', version: '1', rules: [] });
      expect((await rejection(t.client.rulesets.phases.get(PHASE, { account_id: t.accountId }))).status).toBe(404);

      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'wet', kind: 'custom', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 1' }] }));
      await written(t.client.rulesets.update(rs.id, { account_id: t.accountId, rules: rs.rules.map((r) => ({ id: r.id, action: 'block' as const, expression: r.expression! })) }));
      const ruleId = rs.rules[0]!.id;
      const before = await t.client.rulesets.get(rs.id, { account_id: t.accountId });
      expect(await written(t.client.rulesets.update(rs.id, { account_id: t.accountId, dry_run: true, rules: [] }))).toMatchObject({ id: rs.id, version: '3', rules: [] });
      const added = await written(t.client.rulesets.rules.create(rs.id, { account_id: t.accountId, dry_run: true, action: 'log', expression: 'tcp.dstport == 2' }));
      expect([added.id, added.version, added.rules.map((r) => r.expression)]).toEqual([rs.id, '3', ['tcp.dstport == 1', 'tcp.dstport == 2']]);
      const edited = await written(t.client.rulesets.rules.edit(ruleId, { ruleset_id: rs.id, account_id: t.accountId, dry_run: true, action: 'log', expression: 'tcp.dstport == 3' }));
      expect(edited.rules.map((r) => [r.id, r.action, r.expression])).toEqual([[ruleId, 'log', 'tcp.dstport == 3']]);
      expect(await written(t.client.rulesets.rules.delete(ruleId, { ruleset_id: rs.id, account_id: t.accountId, dry_run: true }))).toMatchObject({ id: rs.id, version: '3', rules: [] });
      const delVersion = await t.call('DELETE', `${acct}/rulesets/${rs.id}/versions/1?dry_run=true`);
      expect(delVersion.status).toBe(204);
      const delRuleset = await t.call('DELETE', `${acct}/rulesets/${rs.id}?dry_run=true`);
      expect(delRuleset.status).toBe(204);
      const after = await t.client.rulesets.get(rs.id, { account_id: t.accountId });
      expect(after).toEqual(before);
      expect((await collect(t.client.rulesets.versions.list(rs.id, { account_id: t.accountId }))).map((v) => v.version)).toEqual(['1', '2']);
      // Version numbers were not consumed by the dry runs either.
      expect((await written(t.client.rulesets.update(rs.id, { account_id: t.accountId, rules: [] }))).version).toBe('3');
    });

    it('reports the same errors in a dry run as in a real write', async () => {
      const t = await tenant();
      const r = await t.call('POST', `/accounts/${t.accountId}/rulesets?dry_run=true`, { name: 'dry', kind: 'root', phase: 'network_transit', rules: [{ action: 'block', expression: 'nope == 1' }] });
      expect(r.status).toBe(400);
      expect(r.json.errors[0]).toMatchObject({ code: 2001, source: { pointer: '/rules/0/expression' } });
    });

    it('rejects a dry_run that is neither true nor false with 400/7014', async () => {
      const t = await tenant();
      const r = await t.call('POST', `/accounts/${t.accountId}/rulesets?dry_run=yes`, { name: 'dry', kind: 'custom', phase: 'network_transit', rules: [] });
      expect(r.status).toBe(400);
      expect(r.json.errors[0].code).toBe(7014);
      expect(await collect(t.client.rulesets.list({ account_id: t.accountId }))).toEqual([]);
    });
  });

  describe('validation errors', () => {
    const post = (t: TestUser, rules: unknown[], extra: Record<string, unknown> = {}) =>
      t.call('POST', `/accounts/${t.accountId}/rulesets`, { name: 'bad', kind: 'custom', phase: 'network_transit', rules, ...extra });

    it('rejects a blank expression with 400/20125, Cloudflare\'s message and a pointer', async () => {
      const t = await tenant();
      for (const expression of ['', '   ', undefined]) {
        const r = await post(t, [{ action: 'block', expression }]);
        expect(r.status).toBe(400);
        expect(r.json.errors).toEqual([{ code: 20125, message: "'' is not a valid value for expression because the expression cannot be blank", source: { pointer: '/rules/0/expression' } }]);
      }
    });

    it('reports an expression error with the engine\'s code, line:column, a caret and the rule\'s pointer', async () => {
      const t = await tenant();
      const cases: [string, number, string, string][] = [
        ['ip.src == == 1.2.3.4', 1012, '1:11', '            ^'],
        ['nope.field == 1', 2001, '1:1', '  ^^^^^^^^^^'],
        ['ip.src in $missing', 2006, '1:11', '            ^^^^^^^^'],
      ];
      for (const [expression, code, at, caret] of cases) {
        const r = await post(t, [{ action: 'block', expression: 'tcp.dstport == 1' }, { action: 'block', expression }]);
        expect(r.status, expression).toBe(400);
        expect(r.json.errors, expression).toHaveLength(1);
        const e = r.json.errors[0];
        expect(e.code, expression).toBe(code);
        expect(e.source, expression).toEqual({ pointer: '/rules/1/expression' });
        expect(e.message, expression).toContain(`${at}: error ${code}:`);
        expect(e.message.split('\n'), expression).toContain(caret);
      }
    });

    it('reports every bad rule of a request, each with its own pointer', async () => {
      const t = await tenant();
      const r = await post(t, [
        { action: 'block', expression: 'tcp.dstport == 1 and' },
        { action: 'block', expression: 'tcp.dstport == 2' },
        { action: 'frobnicate', expression: 'tcp.dstport == 3' },
        { action: 'block', expression: '' },
      ]);
      expect(r.status).toBe(400);
      expect(r.json.errors.map((e: { code: number; source: { pointer: string } }) => [e.code, e.source.pointer])).toEqual([
        [1014, '/rules/0/expression'],
        [6007, '/rules/2/action'],
        [20125, '/rules/3/expression'],
      ]);
      expect(await collect(t.client.rulesets.list({ account_id: t.accountId }))).toEqual([]);
    });

    it('rejects unknown actions, a skip without ruleset current, and action_parameters without an action', async () => {
      const t = await tenant();
      const unknown = await post(t, [{ action: 'challenge', expression: 'tcp.dstport == 1' }]);
      expect(unknown.json.errors[0]).toMatchObject({ code: 6007, source: { pointer: '/rules/0/action' } });
      for (const action_parameters of [undefined, { ruleset: 'other' }, { rulesets: [newId()] }, { ruleset: 'current', phases: [] }]) {
        const skip = await post(t, [{ action: 'skip', expression: 'tcp.dstport == 1', action_parameters }]);
        expect(skip.status, JSON.stringify(action_parameters)).toBe(400);
        expect(skip.json.errors[0], JSON.stringify(action_parameters)).toMatchObject({ code: 6007, source: { pointer: '/rules/0/action_parameters' } });
      }
      const noAction = await post(t, [{ expression: 'tcp.dstport == 1', action_parameters: { ruleset: 'current' } }]);
      expect(noAction.status).toBe(400);
      expect(noAction.json.errors[0]).toEqual({ code: 7211, message: 'action is required for action parameters', source: { pointer: '/rules/0/action' } });
    });

    it('rejects kind managed (7203) and an unknown phase (7204) on create', async () => {
      const t = await tenant();
      const managed = await post(t, [], { kind: 'managed' });
      expect(managed.status).toBe(400);
      expect(managed.json.errors[0]).toMatchObject({ code: 7203, source: { pointer: '/kind' } });
      const err = await rejection(written(t.client.rulesets.create({ account_id: t.accountId, name: 'p', kind: 'custom', phase: 'http_request_firewall_custom', rules: [] })));
      expect(err).toBeInstanceOf(BadRequestError);
      expect(err.errors[0]).toMatchObject({ code: 7204, source: { pointer: '/phase' } });
    });

    it('refuses to change name, kind or phase with PUT (7205, one error per field)', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'fixed', kind: 'custom', phase: PHASE, rules: [] }));
      const r = await t.call('PUT', `/accounts/${t.accountId}/rulesets/${rs.id}`, { name: 'renamed', kind: 'root', phase: 'network_transit_managed', rules: [] });
      expect(r.status).toBe(400);
      expect(r.json.errors.map((e: { code: number; source: { pointer: string } }) => [e.code, e.source.pointer])).toEqual([
        [7205, '/name'],
        [7205, '/kind'],
        [7205, '/phase'],
      ]);
      // Sending the same values back (as terraform does) is not a change.
      const same = await written(t.client.rulesets.update(rs.id, { account_id: t.accountId, name: 'fixed', kind: 'custom', phase: 'magic_transit', rules: [] }));
      expect(same.version).toBe('2');
    });

    it('refuses a PUT with an id that is not a rule of the ruleset, and a rule id sent twice', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'ids', kind: 'custom', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 1' }] }));
      const stranger = await t.call('PUT', `/accounts/${t.accountId}/rulesets/${rs.id}`, { rules: [{ id: newId(), action: 'block', expression: 'tcp.dstport == 1' }] });
      expect(stranger.status).toBe(404);
      expect(stranger.json.errors[0]).toMatchObject({ code: 7202, source: { pointer: '/rules/0/id' } });
      const id = rs.rules[0]!.id;
      const twice = await t.call('PUT', `/accounts/${t.accountId}/rulesets/${rs.id}`, {
        rules: [
          { id, action: 'block', expression: 'tcp.dstport == 1' },
          { id, action: 'log', expression: 'tcp.dstport == 1' },
        ],
      });
      expect(twice.status).toBe(400);
      expect(twice.json.errors[0]).toMatchObject({ code: 7212, source: { pointer: '/rules/1' } });
    });

    it('answers 400/7003 for a ruleset or rule id that is not 32 hex characters', async () => {
      const t = await tenant();
      const r = await t.call('GET', `/accounts/${t.accountId}/rulesets/not-an-id`);
      expect(r.status).toBe(400);
      expect(r.json.errors[0].code).toBe(7003);
    });

    it('names the SDK error classes with status and errors for 400, 403 and 404', async () => {
      const t = await tenant();
      const bad = await rejection(written(t.client.rulesets.create({ account_id: t.accountId, name: 'x', kind: 'custom', phase: PHASE, rules: [{ action: 'block', expression: '' }] })));
      expect(bad).toBeInstanceOf(BadRequestError);
      expect(bad.status).toBe(400);
      expect(bad.errors).toEqual([{ code: 20125, message: "'' is not a valid value for expression because the expression cannot be blank", source: { pointer: '/rules/0/expression' } }]);
      const missing = await rejection(t.client.rulesets.get(newId(), { account_id: t.accountId }));
      expect(missing).toBeInstanceOf(NotFoundError);
      expect(missing.status).toBe(404);
      expect(missing.errors[0]!.code).toBe(7200);
      const forbidden = await rejection(t.client.rulesets.list({ account_id: api.accountId }).then((p) => p));
      expect(forbidden).toBeInstanceOf(PermissionDeniedError);
      expect(forbidden.status).toBe(403);
      expect(forbidden.errors).toEqual([{ code: 10000, message: 'Authentication error' }]);
    });
  });

  describe('limits', () => {
    let small: TestApi;
    beforeAll(async () => {
      small = await backend.start({ limits: { maxRules: 3, maxExpressionLength: 40 } });
    });
    afterAll(async () => {
      await small.dispose();
    });

    it('refuses more rules than the limit on create, PUT and add (7209)', async () => {
      const client = small.client();
      const rule = (n: number) => ({ action: 'block' as const, expression: `tcp.dstport == ${n}` });
      const tooMany = await rejection(written(client.rulesets.create({ account_id: small.accountId, name: 'big', kind: 'custom', phase: PHASE, rules: [1, 2, 3, 4].map(rule) })));
      expect(tooMany.status).toBe(400);
      expect(tooMany.errors[0]).toMatchObject({ code: 7209, source: { pointer: '/rules' } });
      const full = await written(client.rulesets.create({ account_id: small.accountId, name: 'full', kind: 'custom', phase: PHASE, rules: [1, 2, 3].map(rule) }));
      expect(full.rules).toHaveLength(3);
      const add = await rejection(written(client.rulesets.rules.create(full.id, { account_id: small.accountId, ...rule(4) })));
      expect(add.status).toBe(400);
      expect(add.errors[0]!.code).toBe(7209);
      const put = await rejection(written(client.rulesets.update(full.id, { account_id: small.accountId, rules: [1, 2, 3, 4].map(rule) })));
      expect(put.errors[0]!.code).toBe(7209);
      expect((await client.rulesets.get(full.id, { account_id: small.accountId })).version).toBe('1');
    });

    it('refuses an expression longer than the limit with the engine\'s 1017', async () => {
      const client = small.client();
      const long = 'tcp.dstport == 1 or tcp.dstport == 2 or tcp.dstport == 3';
      expect(long.length).toBeGreaterThan(40);
      const err = await rejection(written(client.rulesets.create({ account_id: small.accountId, name: 'long', kind: 'custom', phase: PHASE, rules: [{ action: 'block', expression: long }] })));
      expect(err.status).toBe(400);
      expect(err.errors[0]).toMatchObject({ code: 1017, source: { pointer: '/rules/0/expression' } });
    });
  });

  describe('managed rulesets', () => {
    let service: RulesetService;
    let managedId: string;
    let ruleIds: string[];
    const MANAGED = {
      name: 'Moat Managed Transit',
      description: 'operator rules',
      phase: 'network_transit_managed',
      rules: [
        { action: 'block', expression: 'tcp.dstport == 23', description: 'telnet', categories: ['scan', 'legacy'] },
        { action: 'block', expression: 'ip.src in $cf.malware', description: 'malware', categories: ['malware'] },
        { action: 'log', expression: 'udp.dstport == 1900', description: 'ssdp', categories: ['scan'], enabled: false },
      ],
    };

    beforeAll(async () => {
      service = new RulesetService(api.services.store, DEFAULT_API_LIMITS);
      const imported = await service.importManaged(MANAGED);
      managedId = imported.id;
      ruleIds = imported.rules!.map((r) => r.id);
      expect(imported).toMatchObject({ kind: 'managed', version: '1' });
      expect(imported.rules!.map((r) => r.categories)).toEqual([['scan', 'legacy'], ['malware'], ['scan']]);
    });

    it('is listed and readable by every customer, with categories and without expressions', async () => {
      const t = await tenant();
      const list = await collect(t.client.rulesets.list({ account_id: t.accountId }));
      expect(list.filter((r) => r.id === managedId).map((r) => [r.kind, r.name])).toEqual([['managed', 'Moat Managed Transit']]);
      const zoneList = await collect(t.client.rulesets.list({ zone_id: t.zoneId }));
      expect(zoneList.map((r) => r.id)).toContain(managedId);
      const got = await t.client.rulesets.get(managedId, { account_id: t.accountId });
      expect(got.rules.map((r) => [r.id, r.description, r.categories])).toEqual([
        [ruleIds[0], 'telnet', ['scan', 'legacy']],
        [ruleIds[1], 'malware', ['malware']],
        [ruleIds[2], 'ssdp', ['scan']],
      ]);
      for (const r of got.rules) expect(r).not.toHaveProperty('expression');
      const v1 = await t.client.rulesets.versions.get('1', { ruleset_id: managedId, account_id: t.accountId });
      for (const r of v1.rules) expect(r).not.toHaveProperty('expression');
    });

    it('cannot be changed or deleted by a customer (403/7206)', async () => {
      const t = await tenant();
      const base = `/accounts/${t.accountId}/rulesets/${managedId}`;
      const attempts: [string, string, unknown][] = [
        ['PUT', base, { rules: [] }],
        ['DELETE', base, undefined],
        ['DELETE', `${base}/versions/1`, undefined],
        ['POST', `${base}/rules`, { action: 'block', expression: 'tcp.dstport == 1' }],
        ['PATCH', `${base}/rules/${ruleIds[0]}`, { action: 'log', expression: 'tcp.dstport == 23' }],
        ['DELETE', `${base}/rules/${ruleIds[0]}`, undefined],
      ];
      for (const [method, path, body] of attempts) {
        const r = await t.call(method, path, body);
        expect(r.status, `${method} ${path}`).toBe(403);
        expect(r.json.errors[0].code, `${method} ${path}`).toBe(7206);
      }
      const err = await rejection(t.client.rulesets.delete(managedId, { account_id: t.accountId }));
      expect(err).toBeInstanceOf(PermissionDeniedError);
      expect((await api.services.store.rulesets.get(managedId))!.latest_version).toBe(1);
    });

    it('is deployed by an execute rule in the entrypoint, with overrides by category and by rule', async () => {
      const t = await tenant();
      const ep = await written(t.client.rulesets.phases.update(PHASE, {
        account_id: t.accountId,
        rules: [
          {
            action: 'execute',
            expression: 'ip.dst in {192.0.2.0/24}',
            action_parameters: {
              id: managedId,
              overrides: { categories: [{ category: 'scan', action: 'log' }], rules: [{ id: ruleIds[2]!, enabled: true, action: 'block' }] },
            },
          },
        ],
      }));
      expect(ep.rules[0]).toMatchObject({ action: 'execute', action_parameters: { id: managedId, overrides: { categories: [{ category: 'scan', action: 'log' }] } } });
      // The zone entrypoint may deploy it too, pinned to a version (the SDK's
      // execute parameters have no "version", so plain fetch).
      const zone = await t.call('PUT', `/zones/${t.zoneId}/rulesets/phases/network_transit/entrypoint`, {
        rules: [{ action: 'execute', expression: 'tcp.dstport == 23', action_parameters: { id: managedId, version: '1' } }],
      });
      expect(zone.status).toBe(200);
      expect(zone.json.result).toMatchObject({ kind: 'zone', rules: [{ action_parameters: { id: managedId, version: '1' } }] });
      const latest = await t.call('PUT', `/accounts/${t.accountId}/rulesets/phases/network_transit/entrypoint`, {
        rules: [{ action: 'execute', expression: 'tcp.dstport == 23', action_parameters: { id: managedId, version: 'latest' } }],
      });
      expect(latest.status).toBe(200);
      expect(latest.json.result.version).toBe('2');
    });

    it('rejects overrides naming an unknown category, rule or ruleset with 6006 and pointers', async () => {
      const t = await tenant();
      const put = (action_parameters: unknown) =>
        t.call('PUT', `/accounts/${t.accountId}/rulesets/phases/network_transit/entrypoint`, { rules: [{ action: 'execute', expression: 'tcp.dstport == 1', action_parameters }] });
      const at = '/rules/0/action_parameters';
      const cases: [unknown, string[]][] = [
        [{ id: managedId, overrides: { categories: [{ category: 'nope', action: 'log' }] } }, [`${at}/overrides/categories/0/category`]],
        [{ id: managedId, overrides: { rules: [{ id: newId(), enabled: true }] } }, [`${at}/overrides/rules/0/id`]],
        [{ id: newId() }, [`${at}/id`]],
        [{ id: managedId, version: '7' }, [`${at}/version`]],
        [{ id: managedId, overrides: { categories: [{ category: 'scan', action: 'drop' }], rules: [{ id: ruleIds[0], colour: 'red' }] } }, [`${at}/overrides/categories/0/action`, `${at}/overrides/rules/0/colour`]],
      ];
      for (const [params, pointers] of cases) {
        const r = await put(params);
        expect(r.status, JSON.stringify(params)).toBe(400);
        expect(r.json.errors.map((e: { code: number; source: { pointer: string } }) => [e.code, e.source.pointer]), JSON.stringify(params)).toEqual(pointers.map((p) => [6006, p]));
      }
      expect(await collect(t.client.rulesets.phases.versions.list(PHASE, { account_id: t.accountId }))).toEqual([]);
    });

    it('refuses execute rules in a custom ruleset', async () => {
      const t = await tenant();
      const r = await t.call('POST', `/accounts/${t.accountId}/rulesets`, {
        name: 'c',
        kind: 'custom',
        phase: 'network_transit',
        rules: [{ action: 'execute', expression: 'tcp.dstport == 1', action_parameters: { id: managedId } }],
      });
      expect(r.status).toBe(400);
      expect(r.json.errors[0]).toMatchObject({ code: 6007, source: { pointer: '/rules/0/action' } });
    });

    it('returns only the rules carrying a tag from by_tag, at account level', async () => {
      const t = await tenant();
      const env = (await t.client.get(`/accounts/${t.accountId}/rulesets/${managedId}/versions/1/by_tag/scan`)) as { success: boolean; result: Ruleset };
      expect(env.success).toBe(true);
      expect(env.result.rules.map((r: { id: string }) => r.id)).toEqual([ruleIds[0], ruleIds[2]]);
      const none = await t.call('GET', `/accounts/${t.accountId}/rulesets/${managedId}/versions/1/by_tag/nothing`);
      expect(none.status).toBe(200);
      expect(none.json.result.rules).toEqual([]);
      const noVersion = await t.call('GET', `/accounts/${t.accountId}/rulesets/${managedId}/versions/5/by_tag/scan`);
      expect(noVersion.status).toBe(404);
      expect(noVersion.json.errors[0].code).toBe(7201);
      // No such route at zone level.
      const zone = await t.call('GET', `/zones/${t.zoneId}/rulesets/${managedId}/versions/1/by_tag/scan`);
      expect(zone.status).toBe(404);
      expect(zone.json.errors[0].code).toBe(7000);
    });

    it('cannot be deleted by the operator while an execute rule deploys it (7207), and can once the rule is gone', async () => {
      const other = await service.importManaged({ name: 'Deletable', rules: [{ action: 'block', expression: 'tcp.dstport == 7', categories: ['x'] }] });
      const t = await tenant();
      await written(t.client.rulesets.phases.update(PHASE, { account_id: t.accountId, rules: [{ action: 'execute', expression: 'tcp.dstport == 7', action_parameters: { id: other.id } }] }));
      let thrown: unknown;
      try {
        await service.deleteManaged(other.id);
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toMatchObject({ code: 7207 });
      expect((await t.client.rulesets.get(other.id, { account_id: t.accountId })).id).toBe(other.id);
      await written(t.client.rulesets.phases.update(PHASE, { account_id: t.accountId, rules: [] }));
      await service.deleteManaged(other.id);
      expect((await t.call('GET', `/accounts/${t.accountId}/rulesets/${other.id}`)).json.errors[0].code).toBe(7200);
    });

    it('re-imports as a new version, keeping rule ids given in the file', async () => {
      const doc = { name: 'Versioned', rules: [{ id: newId(), action: 'block', expression: 'tcp.dstport == 8', categories: ['a'] }] };
      const v1 = await service.importManaged(doc);
      const v2 = await service.importManaged({ ...doc, rules: [{ ...doc.rules[0], categories: ['a', 'b'] }] });
      expect(v2.id).toBe(v1.id);
      expect(v2.version).toBe('2');
      expect(v2.rules![0]).toMatchObject({ id: doc.rules[0]!.id, version: '2', categories: ['a', 'b'], expression: 'tcp.dstport == 8' });
    });
  });

  describe('concurrent writers', () => {
    it('keeps 30 concurrent rule additions linear: versions 1..31, no gaps or duplicates, every rule in the last version', async () => {
      const t = await tenant();
      const rs = await written(t.client.rulesets.create({ account_id: t.accountId, name: 'busy', kind: 'custom', phase: PHASE, rules: [] }));
      const N = 30;
      const results = await Promise.all(
        Array.from({ length: N }, (_, i) => written(t.client.rulesets.rules.create(rs.id, { account_id: t.accountId, action: 'block', expression: `tcp.dstport == ${1000 + i}` }))),
      );
      const answered = results.map((r) => Number(r.version)).sort((a, b) => a - b);
      expect(answered).toEqual(Array.from({ length: N }, (_, i) => i + 2));
      const versions = await collect(t.client.rulesets.versions.list(rs.id, { account_id: t.accountId }));
      expect(versions.map((v) => v.version)).toEqual(Array.from({ length: N + 1 }, (_, i) => String(i + 1)));
      const last = await t.client.rulesets.get(rs.id, { account_id: t.accountId });
      expect(last.rules.map((r) => r.expression).sort()).toEqual(Array.from({ length: N }, (_, i) => `tcp.dstport == ${1000 + i}`).sort());
      // Each answer holds exactly as many rules as its version number says were added.
      for (const r of results) expect(r.rules).toHaveLength(Number(r.version) - 1);
    });
  });
});
