// `moat users create|list|revoke|add-key` on a real database: a generated key
// is printed once and works against a running server, only hints are listed,
// revocation takes effect on the server's next request, and bad input exits 1
// (usage errors 2) with a message.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Database, newId } from '../../src/store/index.js';
import { startApi, type TestApi } from '../support/api.js';
import { moat } from '../support/cli.js';

let dataDir: string;
let api: TestApi;

beforeAll(async () => {
  api = await startApi();
  // The CLI writes to the data directory the server runs on.
  dataDir = api.dataDir;
});

afterAll(async () => {
  await api.dispose();
});

function keyFrom(stdout: string): string {
  const m = /^X-Auth-Key: (\S+) {3}\(shown once; only a hash is stored\)$/m.exec(stdout);
  if (m === null) throw new Error(`no key in: ${stdout}`);
  return m[1]!;
}

const rulesetsOf = (email: string, key: string, accountId: string) =>
  api.call('GET', `/accounts/${accountId}/rulesets`, undefined, { 'X-Auth-Email': email, 'X-Auth-Key': key });

describe('moat users create', () => {
  it('creates a user with a generated key, printed once, that works against the running server', async () => {
    const account = newId();
    const zone = newId();
    const r = await moat('users', 'create', '--data-dir', dataDir, '--email', 'alice@example.com', '--account', account, '--zone', zone);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const lines = r.stdout.split('\n');
    expect(lines[0]).toBe(`created user alice@example.com with access to account(s) ${account} and zone(s) ${zone}`);
    const key = keyFrom(r.stdout);
    expect(key).toMatch(/^[A-Za-z0-9_-]{16,128}$/);
    expect((await rulesetsOf('alice@example.com', key, account)).status).toBe(200);
    const zoneAnswer = await api.call('GET', `/zones/${zone}/rulesets`, undefined, { 'X-Auth-Email': 'alice@example.com', 'X-Auth-Key': key });
    expect(zoneAnswer.status).toBe(200);
    // Listing shows a hint of the key, never the key.
    const list = await moat('users', 'list', '--data-dir', dataDir);
    expect(list.stdout).not.toContain(key);
    expect(list.stdout).toContain(`(…${key.slice(-4)})`);
    expect(list.stdout).toContain(`alice@example.com  accounts: ${account}  zones: ${zone}`);
  });

  it('uses a given key without printing it, and prints JSON with --json', async () => {
    const account = newId();
    const key = 'given_key-' + newId();
    const r = await moat('users', 'create', '--data-dir', dataDir, '--email', 'bob@example.com', '--account', account, '--key', key, '--json');
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain(key);
    const user = JSON.parse(r.stdout);
    expect(user).toMatchObject({ email: 'bob@example.com', accounts: [account], zones: [] });
    expect(user.keys).toHaveLength(1);
    expect(user.keys[0].hint).toBe(key.slice(-4));
    expect(user).not.toHaveProperty('key');
    expect((await rulesetsOf('bob@example.com', key, account)).status).toBe(200);

    const generated = await moat('users', 'create', '--data-dir', dataDir, '--email', 'carol@example.com', '--account', account, '--json');
    const carol = JSON.parse(generated.stdout);
    expect(typeof carol.key).toBe('string');
    expect((await rulesetsOf('carol@example.com', carol.key, account)).status).toBe(200);
  });

  it('gives a user several accounts with repeated --account', async () => {
    const [a, b] = [newId(), newId()].sort();
    const r = await moat('users', 'create', '--data-dir', dataDir, '--email', 'multi@example.com', '--account', a!, '--account', b!);
    const key = keyFrom(r.stdout);
    expect((await rulesetsOf('multi@example.com', key, a!)).status).toBe(200);
    expect((await rulesetsOf('multi@example.com', key, b!)).status).toBe(200);
    expect((await rulesetsOf('multi@example.com', key, newId())).status).toBe(403);
  });

  it('exits 1 with a message for a bad email, a bad account or zone id, a taken email and a bad key', async () => {
    const account = newId();
    const cases: [string[], string][] = [
      [['--email', 'not-an-email', '--account', account], 'moat: error 7400: "not-an-email" is not an email address'],
      [['--email', 'd@example.com', '--account', 'ABC'], 'moat: error 7400: "ABC" is not an id: accounts and zones are 32 lowercase hex characters'],
      [['--email', 'd@example.com', '--account', account, '--zone', 'xyz'], 'moat: error 7400: "xyz" is not an id: accounts and zones are 32 lowercase hex characters'],
      [['--email', 'alice@example.com', '--account', account], 'moat: error 7400: a user with email alice@example.com already exists'],
      [['--email', 'ALICE@example.com', '--account', account], 'moat: error 7400: a user with email ALICE@example.com already exists'],
      [['--email', 'd@example.com', '--account', account, '--key', 'short'], 'moat: error 7400: a key is 16 to 128 characters of A-Z a-z 0-9 _ -'],
    ];
    for (const [args, message] of cases) {
      const r = await moat('users', 'create', '--data-dir', dataDir, ...args);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr, args.join(' ')).toBe(message);
      expect(r.stdout).toBe('');
    }
    const list = JSON.parse((await moat('users', 'list', '--data-dir', dataDir, '--json')).stdout);
    expect(list.map((u: { email: string }) => u.email)).not.toContain('d@example.com');
  });

  it('exits 2 when --email or --account is missing', async () => {
    expect(await moat('users', 'create', '--data-dir', dataDir, '--email', 'e@example.com')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'moat: error 5010: users create: give at least one --account <id>',
    });
    expect((await moat('users', 'create', '--data-dir', dataDir, '--account', newId())).code).toBe(2);
  });
});

describe('moat users add-key and revoke', () => {
  it('adds a second key, revokes one by id and then all, each taking effect on the server\'s next request', async () => {
    const account = newId();
    const email = 'dave@example.com';
    const first = keyFrom((await moat('users', 'create', '--data-dir', dataDir, '--email', email, '--account', account)).stdout);
    const added = await moat('users', 'add-key', '--data-dir', dataDir, '--email', email);
    expect(added.code).toBe(0);
    const second = keyFrom(added.stdout);
    expect(second).not.toBe(first);
    expect((await rulesetsOf(email, first, account)).status).toBe(200);
    expect((await rulesetsOf(email, second, account)).status).toBe(200);

    const user = JSON.parse((await moat('users', 'list', '--data-dir', dataDir, '--json')).stdout).find((u: { email: string }) => u.email === email);
    const firstKeyId = user.keys.find((k: { hint: string }) => k.hint === first.slice(-4)).id;
    const one = await moat('users', 'revoke', '--data-dir', dataDir, '--email', email, '--key-id', firstKeyId);
    expect(one).toEqual({ code: 0, stdout: `revoked 1 key(s) of ${email}`, stderr: '' });
    const refused = await rulesetsOf(email, first, account);
    expect(refused.status).toBe(403);
    expect(refused.json.errors[0].code).toBe(9103);
    expect((await rulesetsOf(email, second, account)).status).toBe(200);

    const again = await moat('users', 'revoke', '--data-dir', dataDir, '--email', email, '--key-id', firstKeyId);
    expect(again.code).toBe(1);
    expect(again.stderr).toBe(`moat: error 7401: user ${email} has no active key ${firstKeyId}`);

    const all = await moat('users', 'revoke', '--data-dir', dataDir, '--email', email);
    expect(all.stdout).toBe(`revoked 1 key(s) of ${email}`);
    expect((await rulesetsOf(email, second, account)).status).toBe(403);
    const listed = JSON.parse((await moat('users', 'list', '--data-dir', dataDir, '--json')).stdout).find((u: { email: string }) => u.email === email);
    expect(listed.keys.map((k: { revoked_on: string | null }) => typeof k.revoked_on)).toEqual(['string', 'string']);
    expect((await moat('users', 'list', '--data-dir', dataDir)).stdout).toMatch(new RegExp(`\\(…${first.slice(-4)}\\) created \\S+, revoked \\S+`));
  });

  it('adds a given key quietly and exits 1 for an unknown user', async () => {
    const account = newId();
    const email = 'erin@example.com';
    await moat('users', 'create', '--data-dir', dataDir, '--email', email, '--account', account);
    const key = 'erin_second_key_' + newId();
    const r = await moat('users', 'add-key', '--data-dir', dataDir, '--email', email, '--key', key);
    expect(r).toEqual({ code: 0, stdout: `added a key to ${email}`, stderr: '' });
    expect((await rulesetsOf(email, key, account)).status).toBe(200);
    const unknown = await moat('users', 'add-key', '--data-dir', dataDir, '--email', 'nobody@example.com');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe('moat: error 7401: no user with email nobody@example.com');
    const revokeUnknown = await moat('users', 'revoke', '--data-dir', dataDir, '--email', 'nobody@example.com');
    expect(revokeUnknown.code).toBe(1);
  });
});

describe('moat users list', () => {
  it('says so when there are no users', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'moat-users-empty-'));
    try {
      Database.open(empty).close();
      expect(await moat('users', 'list', '--data-dir', empty)).toEqual({ code: 0, stdout: 'no users', stderr: '' });
      expect((await moat('users', 'list', '--data-dir', empty, '--json')).stdout).toBe('[]');
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
