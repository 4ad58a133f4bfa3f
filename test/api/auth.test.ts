// Authentication and authorisation of the API: X-Auth-Email/X-Auth-Key checked
// before any route answers, revocation effective on the next request, and one
// user never reaching another account's or zone's rulesets; on each store.
import { PermissionDeniedError } from 'cloudflare';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/store/index.js';
import { PHASE, rejection, written, type TestApi, type TestUser } from '../support/api.js';
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

  describe('credentials', () => {
    it('answers 400/6003 when X-Auth-Email or X-Auth-Key is missing or empty', async () => {
      const path = `/accounts/${api.accountId}/rulesets`;
      const variants: Record<string, string | undefined>[] = [
        { 'X-Auth-Email': undefined, 'X-Auth-Key': undefined },
        { 'X-Auth-Email': undefined },
        { 'X-Auth-Key': undefined },
        { 'X-Auth-Key': '' },
      ];
      for (const headers of variants) {
        const r = await api.call('GET', path, undefined, headers);
        expect(r.status, JSON.stringify(headers)).toBe(400);
        expect(r.json.success).toBe(false);
        expect(r.json.errors[0].code, JSON.stringify(headers)).toBe(6003);
      }
    });

    it('answers 400/6003 for a malformed key or email, naming the header', async () => {
      const path = `/accounts/${api.accountId}/rulesets`;
      const shortKey = await api.call('GET', path, undefined, { 'X-Auth-Key': 'short' });
      expect(shortKey.status).toBe(400);
      expect(shortKey.json.errors).toEqual([{ code: 6003, message: 'Invalid request headers', error_chain: [{ code: 6103, message: 'Invalid format for X-Auth-Key header' }] }]);
      const oddKey = await api.call('GET', path, undefined, { 'X-Auth-Key': 'has spaces in it, long enough' });
      expect(oddKey.json.errors[0].code).toBe(6003);
      const email = await api.call('GET', path, undefined, { 'X-Auth-Email': 'not-an-email' });
      expect(email.status).toBe(400);
      expect(email.json.errors).toEqual([{ code: 6003, message: 'Invalid request headers', error_chain: [{ code: 6102, message: 'Invalid format for X-Auth-Email header' }] }]);
    });

    it('answers 403/9103 for a wrong key or an unknown email, as the SDK\'s PermissionDeniedError', async () => {
      const wrong = await rejection(api.client(api.email, 'wrongkey' + newId()).rulesets.get(newId(), { account_id: api.accountId }));
      expect(wrong).toBeInstanceOf(PermissionDeniedError);
      expect(wrong.status).toBe(403);
      expect(wrong.errors).toEqual([{ code: 9103, message: 'Unknown X-Auth-Key or X-Auth-Email' }]);
      const nobody = await api.call('GET', `/accounts/${api.accountId}/rulesets`, undefined, { 'X-Auth-Email': 'nobody@example.com' });
      expect(nobody.status).toBe(403);
      expect(nobody.json.errors[0].code).toBe(9103);
    });

    it('refuses a revoked key on the very next request, while another key of the user keeps working', async () => {
      const accountId = newId();
      const email = 'revoked@example.com';
      const { key, user } = await api.services.store.users.create({ email, accounts: [accountId] });
      const second = await api.services.store.users.addKey(email);
      const path = `/accounts/${accountId}/rulesets`;
      const as = (k: string) => ({ 'X-Auth-Email': email, 'X-Auth-Key': k });
      expect((await api.call('GET', path, undefined, as(key))).status).toBe(200);
      expect((await api.call('GET', path, undefined, as(second))).status).toBe(200);
      // Revoke only the first key (the server remembered it as verified).
      expect(await api.services.store.users.revoke(email, user.keys[0]!.id)).toBe(1);
      const after = await api.call('GET', path, undefined, as(key));
      expect(after.status).toBe(403);
      expect(after.json.errors[0].code).toBe(9103);
      expect((await api.call('GET', path, undefined, as(second))).status).toBe(200);
      // Revoking everything stops the second key too.
      expect(await api.services.store.users.revoke(email)).toBe(1);
      expect((await api.call('GET', path, undefined, as(second))).status).toBe(403);
    });

    it('answers an unknown route without credentials with 400/6003, not with what routes exist', async () => {
      const r = await api.call('GET', '/secret/admin/path', undefined, { 'X-Auth-Email': undefined, 'X-Auth-Key': undefined });
      expect(r.status).toBe(400);
      expect(r.json.errors.map((e: { code: number }) => e.code)).toEqual([6003]);
      expect(r.text).not.toContain('secret');
      expect(r.text).not.toContain('route');
      // The same with a wrong key.
      const wrong = await api.call('GET', '/secret/admin/path', undefined, { 'X-Auth-Key': 'wrongkey' + newId() });
      expect(wrong.status).toBe(403);
      expect(wrong.text).not.toContain('secret');
    });
  });

  describe('accounts and zones', () => {
    let other: TestUser;
    let mine: { rulesetId: string; zoneRulesetId: string };

    beforeAll(async () => {
      other = await api.addUser('other@example.com');
      const client = api.client();
      const rs = await written(client.rulesets.create({ account_id: api.accountId, name: 'private', kind: 'custom', phase: PHASE, rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] }));
      const zrs = await written(client.rulesets.create({ zone_id: api.zoneId, name: 'private zone', kind: 'zone', phase: PHASE, rules: [] }));
      mine = { rulesetId: rs.id, zoneRulesetId: zrs.id };
    });

    const asOther = (method: string, path: string, body?: unknown) => other.call(method, path, body);

    it('answers 403/10000 to another user on every route of the first account and of its zone', async () => {
      const acct = `/accounts/${api.accountId}/rulesets`;
      const zone = `/zones/${api.zoneId}/rulesets`;
      const attempts: [string, string, unknown][] = [
        ['GET', acct, undefined],
        ['POST', acct, { name: 'intruder', kind: 'custom', phase: 'network_transit', rules: [] }],
        ['GET', `${acct}/${mine.rulesetId}`, undefined],
        ['PUT', `${acct}/${mine.rulesetId}`, { rules: [] }],
        ['DELETE', `${acct}/${mine.rulesetId}`, undefined],
        ['GET', `${acct}/${mine.rulesetId}/versions`, undefined],
        ['POST', `${acct}/${mine.rulesetId}/rules`, { action: 'block', expression: 'tcp.dstport == 1' }],
        ['GET', `${acct}/phases/network_transit/entrypoint`, undefined],
        ['PUT', `${acct}/phases/network_transit/entrypoint`, { rules: [] }],
        ['GET', zone, undefined],
        ['GET', `${zone}/${mine.zoneRulesetId}`, undefined],
        ['DELETE', `${zone}/${mine.zoneRulesetId}`, undefined],
      ];
      for (const [method, path, body] of attempts) {
        const r = await asOther(method, path, body);
        expect(r.status, `${method} ${path}`).toBe(403);
        expect(r.json.errors, `${method} ${path}`).toEqual([{ code: 10000, message: 'Authentication error' }]);
      }
      const owner = api.client();
      expect((await owner.rulesets.get(mine.rulesetId, { account_id: api.accountId })).version).toBe('1');
      expect((await owner.rulesets.get(mine.zoneRulesetId, { zone_id: api.zoneId })).version).toBe('1');
      expect((await owner.rulesets.phases.versions.list(PHASE, { account_id: api.accountId })).result).toEqual([]);
    });

    it('answers 404 when another user names the ruleset id through its own account or zone', async () => {
      for (const [method, path] of [
        ['GET', `/accounts/${other.accountId}/rulesets/${mine.rulesetId}`],
        ['PUT', `/accounts/${other.accountId}/rulesets/${mine.rulesetId}`],
        ['DELETE', `/accounts/${other.accountId}/rulesets/${mine.rulesetId}`],
        ['GET', `/accounts/${other.accountId}/rulesets/${mine.rulesetId}/versions/1`],
        ['GET', `/zones/${other.zoneId}/rulesets/${mine.zoneRulesetId}`],
        ['GET', `/zones/${other.zoneId}/rulesets/${mine.rulesetId}`],
      ] as const) {
        const r = await asOther(method, path, method === 'PUT' ? { rules: [] } : undefined);
        expect(r.status, `${method} ${path}`).toBe(404);
        expect(r.json.errors[0].code, `${method} ${path}`).toBe(7200);
      }
      const list = await asOther('GET', `/accounts/${other.accountId}/rulesets`);
      expect(list.json.result.map((r: { id: string }) => r.id)).not.toContain(mine.rulesetId);
      expect((await api.client().rulesets.get(mine.rulesetId, { account_id: api.accountId })).version).toBe('1');
    });

    it('answers 403/10000 for a well-formed zone id nobody has', async () => {
      const r = await api.call('GET', `/zones/${newId()}/rulesets`);
      expect(r.status).toBe(403);
      expect(r.json.errors[0].code).toBe(10000);
    });

    it('lets a user of an account reach that account\'s zones without a zone grant', async () => {
      const email = 'colleague@example.com';
      const { key } = await api.services.store.users.create({ email, accounts: [api.accountId] });
      const r = await api.call('GET', `/zones/${api.zoneId}/rulesets/${mine.zoneRulesetId}`, undefined, { 'X-Auth-Email': email, 'X-Auth-Key': key });
      expect(r.status).toBe(200);
      expect(r.json.result.id).toBe(mine.zoneRulesetId);
    });

    it('answers 400/7003 for an account or zone id that is not 32 hex characters', async () => {
      for (const path of [`/accounts/not-hex/rulesets`, `/accounts/${api.accountId.toUpperCase()}/rulesets`, `/zones/123/rulesets`]) {
        const r = await api.call('GET', path);
        expect(r.status, path).toBe(400);
        expect(r.json.errors[0].code, path).toBe(7003);
      }
    });
  });
});
