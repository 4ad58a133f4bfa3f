// `moat serve --monitor-min-interval` as a real process: the operator's
// shortest monitor interval is what the API accepts (a 1 s monitor probes a
// real origin within seconds), and a bad value is a coded usage error.
import { type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, moat } from '../support/cli.js';
import { printedCredentials as credentials, sdkClient as client, serveProcess } from '../support/api.js';

const children: ChildProcess[] = [];
const dirs: string[] = [];
let origin: Server;

beforeAll(async () => {
  await ensureBuilt();
  origin = createServer((_req, res) => res.writeHead(200).end('ok'));
  await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
}, 120_000);
afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  origin.close();
});

describe('moat serve --monitor-min-interval', () => {
  it('accepts monitors down to the given interval and probes with them; the default (10 s) refuses 1 s', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-serve-mon-'));
    dirs.push(dir);
    const s = await serveProcess(dir, ['--monitor-min-interval', '1']);
    children.push(s.child);
    const { email, key, accountId: account_id } = credentials(s);
    const sdk = client(s.url, { email, key });
    const m = await sdk.loadBalancers.monitors.create({ account_id, interval: 1, timeout: 1 });
    const port = (origin.address() as AddressInfo).port;
    const pool = await sdk.loadBalancers.pools.create({ account_id, name: 'p', monitor: m.id, origins: [{ name: 'o', address: '127.0.0.1', port }] });
    let healthy: boolean | undefined;
    for (let i = 0; i < 100 && healthy === undefined; i++) {
      await new Promise((r) => setTimeout(r, 100));
      healthy = ((await sdk.loadBalancers.pools.get(pool.id!, { account_id })) as { healthy?: boolean }).healthy;
    }
    expect(healthy).toBe(true);
    s.child.kill('SIGTERM');
    await s.exited;

    const d2 = mkdtempSync(join(tmpdir(), 'moat-serve-mon-'));
    dirs.push(d2);
    const def = await serveProcess(d2);
    children.push(def.child);
    const c2 = credentials(def);
    const err = (await client(def.url, { email: c2.email, key: c2.key })
      .loadBalancers.monitors.create({ account_id: c2.accountId, interval: 1, timeout: 1 })
      .then(
        () => undefined,
        (e: unknown) => e,
      )) as { status: number; errors: { code: number; message: string }[] };
    expect([err.status, err.errors[0]!.code]).toEqual([400, 7013]);
    expect(err.errors[0]!.message).toBe("interval must be an integer from 10 to 3600 (this server's minimum is 10 s: moat serve --monitor-min-interval)");
    def.child.kill('SIGTERM');
    await def.exited;
  }, 60_000);

  it('refuses a bad value with a coded usage error', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-serve-mon-'));
    dirs.push(dir);
    expect(await moat('serve', '--data-dir', dir, '--listen', '127.0.0.1:0', '--monitor-min-interval', '0')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'moat: error 5010: --monitor-min-interval "0": expected a whole number from 1 to 3600',
    });
  });
});
