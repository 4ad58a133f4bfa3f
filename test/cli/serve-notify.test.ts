// `moat serve`'s notification flags as a real process: webhook destinations on
// loopback are refused (7703) unless --allow-private-webhooks, and a
// malformed --smtp-url is a usage error (5010) before anything starts.
import { type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, moat } from '../support/cli.js';
import { printedCredentials, sdkClient, serveProcess } from '../support/api.js';
import { Receiver } from '../notify/receiver.js';

const children: ChildProcess[] = [];
const dirs: string[] = [];
const receiver = new Receiver('s');

beforeAll(async () => {
  ensureBuilt();
  await receiver.up();
}, 120_000);

afterAll(async () => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
  await receiver.down();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function serve(extra: string[]) {
  const dir = mkdtempSync(join(tmpdir(), 'moat-serve-notify-'));
  dirs.push(dir);
  const s = await serveProcess(dir, extra);
  children.push(s.child);
  const c = printedCredentials(s);
  return { sdk: sdkClient(s.url, c), accountId: c.accountId };
}

describe('moat serve: notification options', () => {
  it('refuses a loopback webhook by default and accepts it with --allow-private-webhooks', async () => {
    const strict = await serve([]);
    const err = (await strict.sdk.alerting.destinations.webhooks.create({ account_id: strict.accountId, name: 'local', url: receiver.url }).then(
      () => undefined,
      (e: unknown) => e,
    )) as { status: number; errors: { code: number; message: string }[] };
    expect([err.status, err.errors[0]!.code]).toEqual([400, 7703]);
    expect(err.errors[0]!.message).toContain('--allow-private-webhooks');
    expect(receiver.received).toHaveLength(0);

    const open = await serve(['--allow-private-webhooks', '--smtp-url', 'smtp://127.0.0.1:2525', '--mail-from', 'alerts@example.com']);
    const { id } = await open.sdk.alerting.destinations.webhooks.create({ account_id: open.accountId, name: 'local', url: receiver.url });
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(receiver.received).toHaveLength(1);
  });

  it('refuses a --notification-lease outside 2 to 3600 seconds with 5010', async () => {
    const r = await moat('serve', '--data-dir', join(tmpdir(), 'moat-never-created'), '--notification-lease', '1');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^moat: error 5010: --notification-lease "1": expected a whole number from 2 to 3600/);
  });

  it('refuses an --smtp-url that is not smtp:// or smtps:// with 5010', async () => {
    const r = await moat('serve', '--data-dir', join(tmpdir(), 'moat-never-created'), '--smtp-url', 'http://mail.example.com');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^moat: error 5010: --smtp-url: expected smtp:\/\//);
  });
});
