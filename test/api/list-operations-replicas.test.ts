// List bulk operations shared by `moat serve --database` replicas (real
// processes on a throwaway PostgreSQL cluster): a 50,000-item replace started
// through replica A, A killed with SIGKILL while it applies it, is completed
// by replica B, whole and once, readers through B never seeing half a list;
// and two replicas draining one queue apply each operation once, neither
// waiting on the other's operation.
import { describe, expect, it } from 'vitest';
import { printedCredentials, type ServeProcess } from '../support/api.js';
import { useServeReplicas } from '../support/serve-replicas.js';
import { databaseOf, requirePostgres, usePostgres } from '../support/postgres.js';

const run = requirePostgres();
const cluster = usePostgres(run);
const replicas = useServeReplicas('moat-listops-replicas-');

type Creds = { email: string; key: string; accountId: string };

function serve(url: string, extra: readonly string[] = []): Promise<ServeProcess> {
  return replicas.start(['--database', url, ...extra]);
}

/** One v4 call; returns the envelope's result (throws on a failure, with its errors). */
async function call<T>(s: ServeProcess, c: Creds, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${s.url}/accounts/${c.accountId}${path}`, {
    method,
    headers: { 'x-auth-email': c.email, 'x-auth-key': c.key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await res.json()) as { success: boolean; result: T; errors: unknown[] };
  if (!json.success) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json.errors)}`);
  return json.result;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, f: () => Promise<T | undefined>, timeoutMs: number, everyMs = 20): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

const status = (s: ServeProcess, c: Creds, op: string) => call<{ status: string; error?: string }>(s, c, 'GET', `/rules/lists/bulk_operations/${op}`).then((r) => r.status);

/** Every item of a list, page by page (cursor). */
async function allItems(s: ServeProcess, c: Creds, listId: string): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | undefined;
  do {
    const res = await fetch(`${s.url}/accounts/${c.accountId}/rules/lists/${listId}/items?per_page=500${cursor === undefined ? '' : `&cursor=${cursor}`}`, { headers: { 'x-auth-email': c.email, 'x-auth-key': c.key } });
    const json = (await res.json()) as { result: { ip: string }[]; result_info?: { cursors?: { after?: string } } };
    out.push(...json.result.map((i) => i.ip));
    cursor = json.result_info?.cursors?.after;
  } while (cursor !== undefined && cursor !== '');
  return out;
}

const oldIp = (i: number) => `10.0.${i >> 8}.${i & 255}`;
const newIp = (i: number) => `11.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;


describe.runIf(run)('list bulk operations across replicas', () => {
  it('completes a 50,000-item replace through replica B when replica A is killed with SIGKILL applying it: whole, once, readers never seeing half a list', async () => {
    const url = await cluster().createDatabase('listops');
    const a = await serve(url);
    const creds = printedCredentials(a);
    const b = await serve(url);
    const list = await call<{ id: string }>(a, creds, 'POST', '/rules/lists', { name: 'big', kind: 'ip' });
    const first = await call<{ operation_id: string }>(a, creds, 'PUT', `/rules/lists/${list.id}/items`, Array.from({ length: 1000 }, (_, i) => ({ ip: oldIp(i) })));
    await until('the first replace', async () => ((await status(b, creds, first.operation_id)) === 'completed' ? true : undefined), 20_000);

    const wanted = Array.from({ length: 50_000 }, (_, i) => newIp(i));
    const op = await call<{ operation_id: string }>(a, creds, 'PUT', `/rules/lists/${list.id}/items`, wanted.map((ip) => ({ ip })));
    // Through B: A marks it running, then applies it in one transaction; kill A then.
    await until('A to start the operation', async () => ((await status(b, creds, op.operation_id)) === 'running' ? true : undefined), 20_000, 5);
    a.child.kill('SIGKILL');
    await a.exited;
    const killedAt = Date.now();
    let completedAt = 0;
    expect(await status(b, creds, op.operation_id)).toBe('running');

    // Readers through B see the old list or the new one, never a mix, never a count in between.
    const counts = new Set<number>();
    const mixed: string[][] = [];
    let done = false;
    while (!done) {
      const [st, meta, page] = await Promise.all([
        status(b, creds, op.operation_id),
        call<{ num_items: number }>(b, creds, 'GET', `/rules/lists/${list.id}`),
        call<{ ip: string }[]>(b, creds, 'GET', `/rules/lists/${list.id}/items?per_page=100`),
      ]);
      counts.add(meta.num_items);
      const kinds = new Set(page.map((i) => i.ip.split('.')[0]));
      if (kinds.size !== 1) mixed.push(page.map((i) => i.ip));
      expect(['running', 'completed']).toContain(st);
      done = st === 'completed';
      if (done) completedAt = Date.now();
      if (Date.now() - killedAt > 60_000) throw new Error('the operation was not completed within 60 s of A\'s death');
      await sleep(25);
    }
    console.log(`50,000-item replace completed by B ${completedAt - killedAt} ms after A was killed`);
    expect(mixed).toEqual([]);
    expect([...counts].every((n) => n === 1000 || n === 50_000)).toBe(true);
    expect(counts.has(50_000)).toBe(true);
    // Exactly the request, once (a second application would fail nothing, but duplicates would show in the count).
    const final = await allItems(b, creds, list.id);
    expect(final).toHaveLength(50_000);
    expect(new Set(final)).toEqual(new Set(wanted));
    // Its status is the same through another replica started now.
    const c = await serve(url);
    expect(await status(c, creds, op.operation_id)).toBe('completed');
    expect(await status(b, creds, op.operation_id)).toBe('completed');
  }, 120_000);

  it('applies each queued operation once when two replicas drain one queue, neither waiting on an operation the other applies', async () => {
    const url = await cluster().createDatabase('listq');
    const a = await serve(url, ['--log-level', 'info']);
    const creds = printedCredentials(a);
    const b = await serve(url, ['--log-level', 'info']);
    const lists = await Promise.all([0, 1, 2, 3].map((n) => call<{ id: string }>(a, creds, 'POST', '/rules/lists', { name: `q${n}`, kind: 'ip' })));
    // 16 appends of 3,000 items, queued through both replicas at once (each wakes its own runner).
    const ops: { id: string; list: number; items: string[] }[] = [];
    const waits: string[] = [];
    let sampling = true;
    const db = databaseOf(url);
    const sampler = (async () => {
      while (sampling) {
        // Row locks only (tuple, transactionid): a commit's NOTIFY briefly queues on the notify queue's lock ('object'), which is not this.
        const rows = await cluster().admin<{ query: string }>(
          "SELECT wait_event || ': ' || query AS query FROM pg_stat_activity WHERE datname = $1 AND application_name = 'moat' AND wait_event_type = 'Lock' AND wait_event IN ('tuple', 'transactionid')",
          [db],
        );
        waits.push(...rows.map((r) => r.query));
        await sleep(10);
      }
    })();
    try {
      await Promise.all(
        Array.from({ length: 16 }, async (_, k) => {
          const items = Array.from({ length: 3000 }, (_, i) => `${20 + k}.${i >> 8}.${i & 255}.1`);
          const via = k % 2 === 0 ? a : b;
          const r = await call<{ operation_id: string }>(via, creds, 'POST', `/rules/lists/${lists[k % 4]!.id}/items`, items.map((ip) => ({ ip })));
          ops.push({ id: r.operation_id, list: k % 4, items });
        }),
      );
      await until('every operation completed', async () => {
        const [r] = await cluster().admin<{ n: string }>("SELECT count(*) AS n FROM bulk_operations WHERE status = 'completed'", [], db);
        return Number(r!.n) === 16 ? true : undefined;
      }, 60_000, 100);
    } finally {
      sampling = false;
      await sampler;
    }
    // Applied once: one "finished" line per operation across both replicas; and both replicas worked.
    const finished = [...a.lines, ...b.lines].filter((l) => l.includes('list bulk operation finished')).map((l) => (JSON.parse(l) as { operation: string }).operation);
    expect(finished.sort()).toEqual(ops.map((o) => o.id).sort());
    // Neither replica waited on a lock held by the other's operation.
    expect(waits).toEqual([]);
    for (let n = 0; n < 4; n++) {
      const want = ops.filter((o) => o.list === n).flatMap((o) => o.items);
      const got = await allItems(b, creds, lists[n]!.id);
      expect(got.length).toBe(want.length);
      expect(new Set(got)).toEqual(new Set(want));
    }
  }, 120_000);
});
