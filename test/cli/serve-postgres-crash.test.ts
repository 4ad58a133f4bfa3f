// The PostgreSQL server killed with SIGKILL under `moat serve --database`
// replicas (real processes) while writes flow through both: every write the
// API acknowledged is there after the server restarts, the replicas answer
// 503 with code 8021 (not 500) while it is down, and they come back by
// themselves (their pools reconnect) without being restarted.
import { describe, expect, it } from 'vitest';
import { printedCredentials, type ServeProcess } from '../support/api.js';
import { useServeReplicas } from '../support/serve-replicas.js';
import { requirePostgres, usePostgres } from '../support/postgres.js';

const run = requirePostgres();
// Durable: fsync on, as in production (a SIGKILL of the server loses nothing committed either way; this makes it so for the right reason).
const cluster = usePostgres(run, { durable: true });
const replicas = useServeReplicas('moat-pg-crash-');

type Creds = { email: string; key: string; accountId: string };

function serve(url: string): Promise<ServeProcess> {
  return replicas.start(['--database', url]);
}

/** One v4 call: its HTTP status and envelope. */
async function call(s: ServeProcess, c: Creds, method: string, path: string, body?: unknown): Promise<{ status: number; json: { success: boolean; result: unknown; errors: { code: number; message: string }[] } }> {
  const res = await fetch(`${s.url}/accounts/${c.accountId}${path}`, {
    method,
    headers: { 'x-auth-email': c.email, 'x-auth-key': c.key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(20_000),
  });
  return { status: res.status, json: (await res.json()) as never };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


describe.runIf(run)('moat serve replicas when the PostgreSQL server is killed', () => {
  it('keeps every acknowledged write through a SIGKILL of the server, answers 503 (8021) while it is down, and serves again after its restart without a replica restart', async () => {
    const url = await cluster().createDatabase('crash');
    const a = await serve(url);
    const creds = printedCredentials(a);
    const b = await serve(url);
    const acked = new Set<string>();
    const failures: { status: number; code: number | undefined; message: string | undefined }[] = [];
    let writing = true;
    let n = 0;
    const writer = async (s: ServeProcess) => {
      while (writing) {
        const name = `w${n++}`;
        try {
          const r = await call(s, creds, 'POST', '/rules/lists', { name, kind: 'ip' });
          if (r.status === 200 && r.json.success) acked.add(name);
          else failures.push({ status: r.status, code: r.json.errors[0]?.code, message: r.json.errors[0]?.message });
        } catch (err) {
          failures.push({ status: 0, code: undefined, message: (err as Error).message });
        }
        await sleep(5);
      }
    };
    const writers = [writer(a), writer(b), writer(a), writer(b)];
    try {
      await sleep(1500);
      const before = acked.size;
      expect(before).toBeGreaterThan(10);
      await cluster().kill();
      await sleep(2500);
      const down = failures.length;
      await cluster().restart();
      // Both replicas write again by themselves.
      const backAt = Date.now();
      const sizeAtRestart = acked.size;
      let firstAck = 0;
      while (acked.size < sizeAtRestart + 20 && Date.now() - backAt < 20_000) {
        if (firstAck === 0 && acked.size > sizeAtRestart) firstAck = Date.now() - backAt;
        await sleep(10);
      }
      console.log(`first acknowledged write ${firstAck} ms after the server's restart; ${sizeAtRestart} acknowledged before`);
      expect(acked.size).toBeGreaterThanOrEqual(sizeAtRestart + 20);
      expect(down).toBeGreaterThan(0);
    } finally {
      writing = false;
      await Promise.all(writers);
    }
    // While it was down: 503 with 8021 (the server cannot be reached), never 500 or a dropped connection.
    expect(failures.length).toBeGreaterThan(0);
    expect(failures.filter((f) => f.status !== 503 || f.code !== 8021)).toEqual([]);
    // Every acknowledged write is there, through each replica.
    for (const s of [a, b]) {
      const r = await call(s, creds, 'GET', '/rules/lists');
      const names = new Set((r.json.result as { name: string }[]).map((l) => l.name));
      expect([...acked].filter((x) => !names.has(x))).toEqual([]);
    }
  }, 120_000);
});
