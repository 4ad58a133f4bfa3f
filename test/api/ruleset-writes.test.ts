// One validation for every way a ruleset is written: POST /rulesets, PUT
// /rulesets/{id}, and PUT of a phase entrypoint (creating it or updating it),
// at account and zone level. Each refuses an over-long name, a name or
// description of the wrong type and an unknown field the same way, and
// writes nothing when it does; on each store.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApi } from '../support/api.js';
import { apiBackends } from '../support/backends.js';

let api: TestApi;
const backends = apiBackends();

describe.each(backends)('on $name', (backend) => {
  beforeAll(async () => {
    api = await backend.start();
  });

  afterAll(async () => {
    await api.dispose();
  });

  const LONG = 'n'.repeat(2_000_000);

  /** The pointers and codes of a refusal. */
  function refusal(r: Awaited<ReturnType<TestApi['call']>>): [string, number][] {
    expect(r.status, r.text.slice(0, 500)).toBe(400);
    expect(r.json.success).toBe(false);
    expect(r.text.length).toBeLessThan(2000);
    return r.json.errors.map((e: { code: number; source?: { pointer: string } }) => [e.source?.pointer, e.code]);
  }

  for (const level of ['accounts', 'zones'] as const) {
    describe(`ruleset writes at ${level} level`, () => {
      const base = () => `/${level}/${level === 'accounts' ? api.accountId : api.zoneId}/rulesets`;
      const kind = level === 'accounts' ? 'root' : 'zone';
      const entrypoint = () => `${base()}/phases/network_transit/entrypoint`;
      const rules = [{ action: 'block', expression: 'ip.src eq 192.0.2.1' }];

      /** Every way of writing a ruleset, given the body's extra fields; `existing` names an existing ruleset for PUT by id. */
      const ways = (existing: string) =>
        [
          ['POST /rulesets', 'POST', base(), { kind: kind === 'root' ? 'custom' : 'zone', phase: 'network_transit', rules }],
          ['PUT /rulesets/{id}', 'PUT', `${base()}/${existing}`, { rules }],
        ] as const;

      it('PUT entrypoint, creating it, refuses an over-long name, an unknown field and a bad description, and creates nothing', async () => {
        const r = await api.call('PUT', entrypoint(), { name: LONG, rules, colour: 'red', description: 7 });
        expect(refusal(r)).toEqual([
          ['/colour', 7013],
          ['/name', 7013],
          ['/description', 7013],
        ]);
        expect((await api.call('GET', entrypoint())).status).toBe(404);
        const phase = await api.call('PUT', entrypoint(), { phase: 'http_request_firewall_custom', rules });
        expect(refusal(phase)).toEqual([['/phase', 7204]]);
        expect((await api.call('GET', entrypoint())).status).toBe(404);
        // Without them it is created, with the default name.
        const ok = await api.call('PUT', entrypoint(), { rules });
        expect(ok.status, ok.text).toBe(200);
        expect(ok.json.result.name).toBe('default');
      });

      it('PUT entrypoint, updating it, refuses the same and adds no version', async () => {
        const before = await api.call('GET', entrypoint());
        expect(before.status).toBe(200);
        expect(refusal(await api.call('PUT', entrypoint(), { name: LONG, rules }))).toEqual([['/name', 7013]]);
        expect(refusal(await api.call('PUT', entrypoint(), { rules, colour: 'red' }))).toEqual([['/colour', 7013]]);
        const after = await api.call('GET', entrypoint());
        expect(after.json.result.version).toBe(before.json.result.version);
      });

      it('POST and PUT by id refuse an over-long name and an unknown field alike', async () => {
        // At zone level the only kind is the entrypoint's, which exists by now: PUT by id writes it.
        const existing =
          kind === 'root'
            ? await api.call('POST', base(), { name: 'r', kind: 'custom', phase: 'network_transit' })
            : await api.call('GET', entrypoint());
        expect(existing.status, existing.text).toBe(200);
        const id = existing.json.result.id as string;
        const version = existing.json.result.version as string;
        const ids = async () => (await api.call('GET', base())).json.result.map((r: { id: string }) => r.id).sort();
        const before = await ids();
        for (const [what, method, path, body] of ways(id)) {
          const name = existing.json.result.name as string;
          expect(refusal(await api.call(method, path, { ...body, name: LONG })), what).toEqual([['/name', 7013]]);
          expect(refusal(await api.call(method, path, { ...body, name, colour: 'red' })), what).toEqual([['/colour', 7013]]);
          expect(refusal(await api.call(method, path, { ...body, name, description: 'd'.repeat(501) })), what).toEqual([['/description', 7013]]);
        }
        expect(await ids()).toEqual(before);
        expect((await api.call('GET', `${base()}/${id}`)).json.result.version).toBe(version);
      });

      it('accepts back what a GET returned (id, version, last_updated are read-only)', async () => {
        const got = (await api.call('GET', entrypoint())).json.result;
        const r = await api.call('PUT', entrypoint(), { ...got, rules });
        expect(r.status, r.text).toBe(200);
      });
    });
  }

  describe('managed rulesets imported by the operator', () => {
    it('are checked like an API body: a lone surrogate (7019 with its pointer) or an over-long name is refused, nothing stored', async () => {
      const rules = [{ action: 'block', expression: 'ip.src eq 192.0.2.1' }];
      const importing = (doc: unknown) => api.services.rulesets.importManaged(doc);
      await expect(importing({ name: 'm', rules: [{ ...rules[0], description: 'x\ud800' }] })).rejects.toThrow(expect.objectContaining({ code: 7019, pointer: '/rules/0/description' }));
      await expect(importing({ name: '\udfff', rules })).rejects.toThrow(expect.objectContaining({ code: 7019, pointer: '/name' }));
      await expect(importing({ name: LONG, rules })).rejects.toThrow(expect.objectContaining({ errors: [expect.objectContaining({ code: 7013, pointer: '/name' })] }));
      expect(await api.services.store.rulesets.managed()).toEqual([]);
      expect((await api.services.rulesets.importManaged({ name: 'm \u{1F600}', rules })).name).toBe('m \u{1F600}');
    });
  });
});
