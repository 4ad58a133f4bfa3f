// The Lists API over real HTTP on loopback, driven by Cloudflare's official SDK
// where it has a call and by plain fetch for the rest: lists, items, bulk
// operations and their status, cursor pages, validation with JSON pointers,
// account isolation, and a restart that keeps data and resumes queued work;
// on each store.
import Cloudflare from 'cloudflare';
import { afterEach, describe, expect, it } from 'vitest';
import { ERRORS } from '../../src/errors/index.js';
import { Database, newId, nowStamp } from '../../src/store/index.js';
import { type StartApiOptions, type TestApi } from '../support/api.js';
import { apiBackends, type ApiBackend } from '../support/backends.js';
import { databaseOf } from '../support/postgres.js';

const running: TestApi[] = [];
const backends = apiBackends();

async function startOn(backend: ApiBackend, options: StartApiOptions = {}): Promise<TestApi> {
  const api = await backend.start(options);
  running.push(api);
  return api;
}

/** Runs one SQL statement (`?` placeholders) in the server's database, whichever store it is; returns the rows. */
async function sql(backend: ApiBackend, api: TestApi, text: string, params: unknown[] = []): Promise<unknown[]> {
  if (api.database === undefined) {
    const db = Database.open(api.dataDir);
    try {
      const statement = db.db.prepare(text);
      return statement.reader ? statement.all(...params) : (statement.run(...params), []);
    } finally {
      db.close();
    }
  }
  let n = 0;
  return backend.cluster!().admin(text.replace(/\?/g, () => `$${++n}`), params, databaseOf(api.database));
}

afterEach(async () => {
  for (const api of running.splice(0).reverse()) await api.dispose();
});

/** Polls the status endpoint until the operation is over. */
async function settle(cf: Cloudflare, accountId: string, operationId: string): Promise<{ status: string; error?: string; completed?: string }> {
  for (let i = 0; i < 200; i++) {
    const op = (await cf.rules.lists.bulkOperations.get(operationId, { account_id: accountId })) as { status: string; error?: string };
    if (op.status === 'completed' || op.status === 'failed') return op;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`operation ${operationId} did not finish`);
}

async function allItems(cf: Cloudflare, accountId: string, listId: string, perPage = 100): Promise<{ id: string; ip: string; comment?: string }[]> {
  const out: { id: string; ip: string; comment?: string }[] = [];
  for await (const item of cf.rules.lists.items.list(listId, { account_id: accountId, per_page: perPage })) out.push(item as { id: string; ip: string });
  return out;
}

describe.each(backends)('on $name', (backend) => {
  const start = (options: StartApiOptions = {}) => startOn(backend, options);

  describe('Lists API', () => {
    it('creates, lists, gets, updates and deletes lists through the SDK', async () => {
      const api = await start();
      const cf = api.client();
      const account_id = api.accountId;
      const created = await cf.rules.lists.create({ account_id, name: 'office_v4', kind: 'ip', description: 'offices' });
      expect(created).toMatchObject({ name: 'office_v4', kind: 'ip', description: 'offices', num_items: 0, num_referencing_filters: 0 });
      expect(created.id).toMatch(/^[0-9a-f]{32}$/);
      expect(created.created_on).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);

      await cf.rules.lists.create({ account_id, name: 'second', kind: 'ip' });
      const names: string[] = [];
      for await (const l of cf.rules.lists.list({ account_id })) names.push(l.name!);
      expect(names).toEqual(['office_v4', 'second']);

      expect(await cf.rules.lists.get(created.id!, { account_id })).toEqual(created);
      const updated = await cf.rules.lists.update(created.id!, { account_id, description: 'all offices' });
      expect(updated.description).toBe('all offices');
      expect((await cf.rules.lists.get(created.id!, { account_id })).description).toBe('all offices');

      expect(await cf.rules.lists.delete(created.id!, { account_id })).toEqual({ id: created.id });
      await expect(cf.rules.lists.get(created.id!, { account_id })).rejects.toMatchObject({ status: 404, errors: [expect.objectContaining({ code: 7300 })] });
    });

    it('applies item writes in the background and reports them on the status endpoint', async () => {
      const api = await start();
      const cf = api.client();
      const account_id = api.accountId;
      const list = await cf.rules.lists.create({ account_id, name: 'blocked', kind: 'ip' });
      const id = list.id!;

      const add = await cf.rules.lists.items.create(id, { account_id, body: [{ ip: '10.0.0.0/8', comment: 'rfc1918' }, { ip: '2001:DB8::/32' }, { ip: '192.0.2.1' }] });
      expect(add.operation_id).toMatch(/^[0-9a-f]{32}$/);
      const done = await settle(cf, account_id, add.operation_id);
      expect(done).toMatchObject({ id: add.operation_id, status: 'completed' });
      expect(done.completed).toMatch(/Z$/);
      let items = await allItems(cf, account_id, id);
      expect(items.map((i) => i.ip)).toEqual(['10.0.0.0/8', '192.0.2.1', '2001:db8::/32']);
      expect(items[0]!.comment).toBe('rfc1918');
      expect((await cf.rules.lists.get(id, { account_id })).num_items).toBe(3);

      const one = await cf.rules.lists.items.get(items[1]!.id, { account_id, list_id: id });
      expect(one).toMatchObject({ id: items[1]!.id, ip: '192.0.2.1' });

      // An equal entry gets its comment overwritten, not a second row.
      await settle(cf, account_id, (await cf.rules.lists.items.create(id, { account_id, body: [{ ip: '10.0.0.0/8', comment: 'private' }] })).operation_id);
      items = await allItems(cf, account_id, id);
      expect(items).toHaveLength(3);
      expect(items[0]).toMatchObject({ ip: '10.0.0.0/8', comment: 'private' });

      const del = await cf.rules.lists.items.delete(id, { account_id, items: [{ id: items[0]!.id }] });
      await settle(cf, account_id, del.operation_id);
      expect((await allItems(cf, account_id, id)).map((i) => i.ip)).toEqual(['192.0.2.1', '2001:db8::/32']);

      const replace = await cf.rules.lists.items.update(id, { account_id, body: [{ ip: '198.51.100.0/24' }] });
      await settle(cf, account_id, replace.operation_id);
      expect((await allItems(cf, account_id, id)).map((i) => i.ip)).toEqual(['198.51.100.0/24']);

      await settle(cf, account_id, (await cf.rules.lists.items.update(id, { account_id, body: [] })).operation_id);
      expect(await allItems(cf, account_id, id)).toEqual([]);
    });

    it('runs operations in the order they were made', async () => {
      const api = await start();
      const cf = api.client();
      const account_id = api.accountId;
      const id = (await cf.rules.lists.create({ account_id, name: 'fifo', kind: 'ip' })).id!;
      // Three operations queued in one transaction (the runner sees none of them
      // before all three), then a fourth through the API, which wakes the runner.
      const queued = await api.services.store.write(async (tx) => [
        await tx.lists.enqueue(account_id, id, 'append', [{ ip: '192.0.2.1' }, { ip: '192.0.2.2' }]),
        await tx.lists.enqueue(account_id, id, 'replace', [{ ip: '192.0.2.3' }]),
        await tx.lists.enqueue(account_id, id, 'append', [{ ip: '192.0.2.4' }]),
      ]);
      expect((await cf.rules.lists.bulkOperations.get(queued[2]!, { account_id })).status).toBe('pending');
      const last = await cf.rules.lists.items.create(id, { account_id, body: [{ ip: '192.0.2.5' }] });
      const finished: string[] = [];
      for (const op of [...queued, last.operation_id]) {
        const done = await settle(cf, account_id, op);
        expect(done.status).toBe('completed');
        finished.push(done.completed!);
      }
      expect([...finished].sort()).toEqual(finished);
      expect((await allItems(cf, account_id, id)).map((i) => i.ip)).toEqual(['192.0.2.3', '192.0.2.4', '192.0.2.5']);
    });

    it('pages items with cursors through the SDK iterator, with search as a prefix match', async () => {
      const api = await start();
      const cf = api.client();
      const account_id = api.accountId;
      const id = (await cf.rules.lists.create({ account_id, name: 'many', kind: 'ip' })).id!;
      const body = Array.from({ length: 57 }, (_, i) => ({ ip: `10.${i % 3}.${i}.0/24` }));
      await settle(cf, account_id, (await cf.rules.lists.items.create(id, { account_id, body })).operation_id);

      const pages: number[] = [];
      for await (const page of (await cf.rules.lists.items.list(id, { account_id, per_page: 10 })).iterPages()) pages.push(page.result.length);
      expect(pages).toEqual([10, 10, 10, 10, 10, 7]);
      const items = await allItems(cf, account_id, id, 10);
      const want = body.map((b) => b.ip).sort((a, b) => {
        const [x, y] = [a, b].map((s) => s.split(/[./]/).slice(0, 4).reduce((n, o) => n * 256 + Number(o), 0));
        return x! - y!;
      });
      expect(items.map((i) => i.ip)).toEqual(want);

      const last = await api.call('GET', `/accounts/${account_id}/rules/lists/${id}/items?per_page=100`);
      expect(last.json.result_info.cursors).toEqual({});
      const first = await api.call('GET', `/accounts/${account_id}/rules/lists/${id}/items?per_page=5`);
      const second = await api.call('GET', `/accounts/${account_id}/rules/lists/${id}/items?per_page=5&cursor=${first.json.result_info.cursors.after}`);
      const back = await api.call('GET', `/accounts/${account_id}/rules/lists/${id}/items?per_page=5&cursor=${second.json.result_info.cursors.before}`);
      expect(back.json.result).toEqual(first.json.result);

      const searched: string[] = [];
      for await (const i of cf.rules.lists.items.list(id, { account_id, search: '10.1.', per_page: 4 })) searched.push((i as { ip: string }).ip);
      expect(searched).toEqual(want.filter((ip) => ip.startsWith('10.1.')));
      expect(searched).toHaveLength(19);

      for (const q of ['per_page=0', 'per_page=', 'per_page=abc', 'per_page=100000', 'cursor=nonsense!']) {
        const r = await api.call('GET', `/accounts/${account_id}/rules/lists/${id}/items?${q}`);
        expect(r.status, q).toBe(400);
        expect(r.json.errors[0].code, q).toBe(7014);
        if (q.startsWith('per_page')) expect(r.json.errors[0].source, q).toEqual({ pointer: 'per_page' });
      }
    });

    it('rejects a body with bad items, pointing at each, and queues nothing', async () => {
      const api = await start();
      const cf = api.client();
      const account_id = api.accountId;
      const id = (await cf.rules.lists.create({ account_id, name: 'strict', kind: 'ip' })).id!;
      const path = `/accounts/${account_id}/rules/lists/${id}/items`;
      const r = await api.call('POST', path, [
        { ip: '192.0.2.1' },
        { ip: '10.0.0.1/8' },
        { ip: '2001:db8::1' },
        { ip: '2001:db8::/80' },
        { ip: '1.0.0.0/7' },
        { ip: 'not-an-ip' },
        { ip: '192.0.2.2', comment: 'x'.repeat(501) },
        { hostname: { url_hostname: 'example.com' } },
        'text',
      ]);
      expect(r.status).toBe(400);
      expect(r.json.success).toBe(false);
      expect(r.json.errors.map((e: { source?: { pointer: string } }) => e.source?.pointer)).toEqual(['/1/ip', '/2/ip', '/3/ip', '/4/ip', '/5/ip', '/6/comment', '/7/hostname', '/7/ip', '/8']);
      expect(r.json.errors[0]).toEqual({ code: 7303, message: '"10.0.0.1/8" has host bits set (did you mean 10.0.0.0/8?)', source: { pointer: '/1/ip' } });
      expect(r.json.errors[1].message).toContain('2001:db8::/64');
      expect(await allItems(cf, account_id, id)).toEqual([]);

      await expect(cf.rules.lists.items.create(id, { account_id, body: [{ ip: '10.0.0.0/33' }] })).rejects.toMatchObject({ status: 400 });
      expect((await api.call('PUT', path, { ip: '192.0.2.1' })).json.errors[0]).toMatchObject({ code: 7013, source: { pointer: '' } });
      expect((await api.call('DELETE', path, { items: [] })).json.errors[0]).toMatchObject({ code: 7013, source: { pointer: '/items' } });
      expect((await api.call('DELETE', path, { items: [{ id: 'nope' }] })).json.errors[0]).toMatchObject({ code: 7303, source: { pointer: '/items/0/id' } });
      const badJson = await api.call('POST', path, '[{"ip": ');
      expect(badJson.status).toBe(400);
      expect(badJson.json.errors[0]).toMatchObject({ code: ERRORS.API_MALFORMED_JSON.code, source: { pointer: '' } });
      // Nothing above was queued: the status table holds no operation at all.
      expect(await sql(backend, api, 'SELECT CAST(count(*) AS INTEGER) AS n FROM bulk_operations')).toEqual([{ n: 0 }]);
    });

    it('validates list bodies: name rule, managed names, kind, lengths, duplicates', async () => {
      const api = await start();
      const cf = api.client();
      const account_id = api.accountId;
      const base = `/accounts/${account_id}/rules/lists`;
      const cases: [unknown, number, string][] = [
        [{ name: 'bad-name', kind: 'ip' }, 7013, '/name'],
        [{ name: 'x'.repeat(51), kind: 'ip' }, 7013, '/name'],
        [{ name: 'ok', kind: 'hostname' }, 7013, '/kind'],
        [{ name: 'ok' }, 7013, '/kind'],
        [{ kind: 'ip' }, 7013, '/name'],
        [{ name: 'ok', kind: 'ip', description: 'd'.repeat(501) }, 7013, '/description'],
        [{ name: 'ok', kind: 'ip', colour: 'red' }, 7013, '/colour'],
        [{ name: 'svc.malware', kind: 'ip' }, 7307, '/name'],
      ];
      for (const [body, code, pointer] of cases) {
        const r = await api.call('POST', base, body);
        expect(r.json.errors[0], JSON.stringify(body)).toMatchObject({ code, source: { pointer } });
      }
      const managed = await api.call('POST', base, { name: 'svc.malware', kind: 'ip' });
      expect(managed.json.errors[0].message).toContain('moat lists load-managed');
      const kind = await api.call('POST', base, { name: 'ok', kind: 'asn' });
      expect(kind.status).toBe(400);
      expect(kind.json.errors[0].message).toContain('IP addresses only');

      const l = await cf.rules.lists.create({ account_id, name: 'dup', kind: 'ip' });
      await expect(cf.rules.lists.create({ account_id, name: 'dup', kind: 'ip' })).rejects.toMatchObject({ status: 400, errors: [expect.objectContaining({ code: 7301 })] });
      expect((await api.call('PUT', `${base}/${l.id}`, { description: 'x', name: 'other' })).json.errors[0]).toMatchObject({ code: 7013, source: { pointer: '/name' } });
      expect((await api.call('PUT', `${base}/${l.id}`, {})).json.errors[0]).toMatchObject({ code: 7013, source: { pointer: '/description' } });
      expect((await api.call('GET', base)).json.result.map((x: { name: string }) => x.name)).toEqual(['dup']);
    });

    it('answers 7003 for malformed ids and 404 for unknown ones', async () => {
      const api = await start();
      const account_id = api.accountId;
      const base = `/accounts/${account_id}/rules/lists`;
      const id = (await api.client().rules.lists.create({ account_id, name: 'ids', kind: 'ip' })).id!;
      for (const path of [`${base}/XYZ`, `${base}/${id}/items/123`, `${base}/bulk_operations/zz`, `/accounts/short/rules/lists`]) {
        const r = await api.call('GET', path);
        expect(r.status, path).toBe(400);
        expect(r.json.errors[0].code, path).toBe(7003);
      }
      expect((await api.call('GET', `${base}/${newId()}`)).json.errors[0].code).toBe(7300);
      expect((await api.call('GET', `${base}/${id}/items/${newId()}`)).json.errors[0].code).toBe(7304);
      expect((await api.call('GET', `${base}/bulk_operations/${newId()}`)).json.errors[0].code).toBe(7305);
      expect((await api.call('POST', `${base}/${newId()}/items`, [{ ip: '192.0.2.1' }])).status).toBe(404);
    });

    it('keeps accounts apart: another user can neither read nor change them', async () => {
      const api = await start();
      const account_id = api.accountId;
      const a = api.client();
      const list = await a.rules.lists.create({ account_id, name: 'private', kind: 'ip' });
      await settle(a, account_id, (await a.rules.lists.items.create(list.id!, { account_id, body: [{ ip: '192.0.2.1' }] })).operation_id);
      const item = (await allItems(a, account_id, list.id!))[0]!;

      const otherAccount = newId();
      const { key } = await api.services.store.users.create({ email: 'b@example.com', accounts: [otherAccount] });
      const b = api.client('b@example.com', key);
      const denied = { status: 403, errors: [expect.objectContaining({ code: 10000 })] };
      await expect(b.rules.lists.list({ account_id })).rejects.toMatchObject(denied);
      await expect(b.rules.lists.get(list.id!, { account_id })).rejects.toMatchObject(denied);
      await expect(b.rules.lists.delete(list.id!, { account_id })).rejects.toMatchObject(denied);
      await expect(b.rules.lists.items.create(list.id!, { account_id, body: [{ ip: '10.0.0.0/8' }] })).rejects.toMatchObject(denied);
      await expect(b.rules.lists.items.get(item.id, { account_id, list_id: list.id! })).rejects.toMatchObject(denied);

      // Through B's own account, A's ids do not exist.
      await expect(b.rules.lists.get(list.id!, { account_id: otherAccount })).rejects.toMatchObject({ status: 404 });
      await expect(b.rules.lists.items.delete(list.id!, { account_id: otherAccount, items: [{ id: item.id }] })).rejects.toMatchObject({ status: 404 });
      const bList = await b.rules.lists.create({ account_id: otherAccount, name: 'private', kind: 'ip' });
      await expect(b.rules.lists.items.get(item.id, { account_id: otherAccount, list_id: bList.id! })).rejects.toMatchObject({ status: 404 });
      expect((await allItems(a, account_id, list.id!)).map((i) => i.ip)).toEqual(['192.0.2.1']);
    });

    it('refuses to delete a list that a ruleset uses', async () => {
      const api = await start();
      const account_id = api.accountId;
      const cf = api.client();
      const list = await cf.rules.lists.create({ account_id, name: 'office', kind: 'ip' });
      const put = await api.call('PUT', `/accounts/${account_id}/rulesets/phases/network_transit/entrypoint`, { rules: [{ action: 'block', expression: 'ip.src in $office' }] });
      expect(put.status, put.text).toBe(200);
      const rs = put.json.result.id as string;
      expect((await cf.rules.lists.get(list.id!, { account_id })).num_referencing_filters).toBe(1);
      const r = await api.call('DELETE', `/accounts/${account_id}/rules/lists/${list.id}`);
      expect(r.status).toBe(400);
      expect(r.json.errors[0]).toMatchObject({ code: 7302 });
      expect(r.json.errors[0].message).toContain(rs);
    });

    it('fails an operation that would pass the item cap, with Cloudflare\'s message, and changes nothing', async () => {
      const api = await start({ limits: { maxListItems: 3 } });
      const cf = api.client();
      const account_id = api.accountId;
      const id = (await cf.rules.lists.create({ account_id, name: 'small', kind: 'ip' })).id!;
      await settle(cf, account_id, (await cf.rules.lists.items.create(id, { account_id, body: [{ ip: '192.0.2.1' }, { ip: '192.0.2.2' }] })).operation_id);
      const op = await cf.rules.lists.items.create(id, { account_id, body: [{ ip: '192.0.2.3' }, { ip: '192.0.2.4' }] });
      expect(await settle(cf, account_id, op.operation_id)).toMatchObject({ status: 'failed', error: 'This list is at the maximum number of items' });
      expect((await allItems(cf, account_id, id)).map((i) => i.ip)).toEqual(['192.0.2.1', '192.0.2.2']);
    });

    it('keeps lists and items across a restart and resumes an operation left pending', async () => {
      const first = await backend.start();
      const { dataDir, email, key, accountId, zoneId } = first;
      let second: TestApi | undefined;
      try {
        let cf = first.client();
        const id = (await cf.rules.lists.create({ account_id: accountId, name: 'durable', kind: 'ip', description: 'kept' })).id!;
        await settle(cf, accountId, (await cf.rules.lists.items.create(id, { account_id: accountId, body: [{ ip: '192.0.2.1', comment: 'c' }] })).operation_id);
        await first.stop();

        // A crash after the API answered but before the runner got to it: the
        // operation is in the table, pending, with its payload.
        const opId = newId();
        await sql(backend, first, "INSERT INTO bulk_operations (id, account_id, list_id, op, payload, status, created_on) VALUES (?, ?, ?, 'append', ?, 'pending', ?)", [
          opId, accountId, id, JSON.stringify([{ ip: '2001:db8::/48' }]), nowStamp(),
        ]);

        second = await backend.start({ dataDir, email, key, accountId, zoneId, database: first.database });
        cf = second.client();
        expect(await settle(cf, accountId, opId)).toMatchObject({ status: 'completed' });
        const list = await cf.rules.lists.get(id, { account_id: accountId });
        expect(list).toMatchObject({ name: 'durable', description: 'kept', num_items: 2 });
        expect((await allItems(cf, accountId, id)).map((i) => [i.ip, i.comment])).toEqual([
          ['192.0.2.1', 'c'],
          ['2001:db8::/48', undefined],
        ]);
      } finally {
        await second?.stop();
        await first.dispose();
      }
    });
  });
});
