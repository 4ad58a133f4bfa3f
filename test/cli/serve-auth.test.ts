// `moat serve`'s authentication flags as a real process: the first user's
// email chosen with --first-user-email (and the default one warned about on
// every start while it has a live key), the failure limit set with
// --auth-fail-limit and --auth-fail-window, and bad values refused with a code.
import { type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, moat } from '../support/cli.js';
import { printedCredentials as credentials, sdkClient as client, serveProcess, type ServeProcess } from '../support/api.js';

const children: ChildProcess[] = [];
const dirs: string[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'moat-serve-auth-'));
  dirs.push(d);
  return d;
}

async function serve(dataDir: string, extra: readonly string[] = []): Promise<ServeProcess> {
  const s = await serveProcess(dataDir, extra);
  children.push(s.child);
  return s;
}

/** Stops a server with SIGTERM and waits for it. */
async function stop(s: ServeProcess): Promise<void> {
  s.child.kill('SIGTERM');
  await s.exited;
}

/** Waits until the server's standard error holds `text` (it is written after the lines serveProcess waits for), or 5 s. */
async function stderrHolding(s: ServeProcess, text: string): Promise<string> {
  for (let i = 0; i < 100 && !s.stderr().includes(text); i++) await new Promise((r) => setTimeout(r, 50));
  return s.stderr();
}

beforeAll(() => ensureBuilt(), 120_000);

afterEach(async () => {
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      const gone = new Promise((r) => c.once('exit', r));
      c.kill('SIGKILL');
      await gone;
    }
  }
});

afterAll(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const WARNING = 'moat: warning: user admin@moat.local is the default first user, an email anyone can guess';

describe('moat serve: the first user', () => {
  it('creates the first user with the email given by --first-user-email, without the default-email warning', async () => {
    const dir = tempDir();
    const s = await serve(dir, ['--first-user-email', 'ops@example.com']);
    const c = credentials(s);
    expect(c.email).toBe('ops@example.com');
    expect((await client(s.url, c).rulesets.list({ account_id: c.accountId })).result).toEqual([]);
    await stop(s);
    expect(s.stderr()).not.toContain('warning');
    // On a database with users, the flag changes nothing and says so.
    const again = await serve(dir, ['--first-user-email', 'other@example.com']);
    expect(await stderrHolding(again, 'ignored')).toContain('moat: --first-user-email ignored: the database already has users');
    expect((await moat('users', 'list', '--data-dir', dir, '--json')).stdout).not.toContain('other@example.com');
  });

  it('warns on every start while the default admin@moat.local has a live key, and stops once its keys are revoked', async () => {
    const dir = tempDir();
    const s = await serve(dir);
    expect(credentials(s).email).toBe('admin@moat.local');
    const said = await stderrHolding(s, WARNING);
    expect(said).toContain(WARNING);
    expect(said).toContain(`moat users revoke --data-dir ${dir} --email admin@moat.local`);
    await stop(s);
    const again = await serve(dir);
    expect(await stderrHolding(again, WARNING)).toContain(WARNING);
    await stop(again);
    expect((await moat('users', 'revoke', '--data-dir', dir, '--email', 'admin@moat.local')).code).toBe(0);
    const quiet = await serve(dir);
    // Give a warning the time it would take to arrive.
    await new Promise((r) => setTimeout(r, 300));
    expect(quiet.stderr()).not.toContain('warning');
  });

  it('refuses a bad --first-user-email, --auth-fail-limit or --auth-fail-window with a coded usage error', async () => {
    const dir = tempDir();
    expect(await moat('serve', '--data-dir', dir, '--listen', '127.0.0.1:0', '--first-user-email', 'not-an-email')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'moat: error 5010: --first-user-email "not-an-email": not an email address',
    });
    expect(await moat('serve', '--data-dir', dir, '--listen', '127.0.0.1:0', '--auth-fail-limit', 'ten')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'moat: error 5010: --auth-fail-limit "ten": expected a whole number from 0 to 1000000',
    });
    expect(await moat('serve', '--data-dir', dir, '--listen', '127.0.0.1:0', '--auth-fail-window', '0')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'moat: error 5010: --auth-fail-window "0": expected a whole number from 1 to 86400',
    });
  });
});

describe('moat serve: the failure limit', () => {
  it('answers 429 with Retry-After after --auth-fail-limit failures within --auth-fail-window seconds', async () => {
    const s = await serve(tempDir(), ['--first-user-email', 'ops@example.com', '--auth-fail-limit', '2', '--auth-fail-window', '30']);
    const c = credentials(s);
    const url = `${s.url}/accounts/${c.accountId}/rulesets`;
    const wrong = { 'X-Auth-Email': c.email, 'X-Auth-Key': 'wrong'.padEnd(37, 'x') };
    const statuses: number[] = [];
    let last: Response | undefined;
    for (let i = 0; i < 3; i++) {
      last = await fetch(url, { headers: wrong });
      statuses.push(last.status);
    }
    expect(statuses).toEqual([403, 403, 429]);
    expect(Number(last!.headers.get('retry-after'))).toBeGreaterThan(25);
    expect(((await last!.json()) as { errors: { code: number }[] }).errors[0]!.code).toBe(7403);
    expect((await fetch(url, { headers: { 'X-Auth-Email': c.email, 'X-Auth-Key': c.key } })).status).toBe(200);
    // The operator sees it in the log: one warning naming the address.
    for (let i = 0; i < 100 && !s.lines.some((l) => l.includes('too many failed authentications')); i++) await new Promise((r) => setTimeout(r, 50));
    const logged = s.lines.filter((l) => l.includes('too many failed authentications')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: 40, address: '127.0.0.1', failures: 2, windowSeconds: 30 });
  });
});
