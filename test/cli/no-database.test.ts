// Operator commands (users, tokens, daemons, lists, managed, export) never create a
// database: where there is none they exit 1 with error 8005 naming the path and
// how to get one, and leave no file or directory behind. Only `moat serve`
// creates it.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { newId } from '../../src/store/index.js';
import { moat } from '../support/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-nodb-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('operator commands without a database', () => {
  const listFile = join(dir, 'list.txt');
  const managedFile = join(dir, 'managed.json');
  writeFileSync(listFile, '192.0.2.0/24\n');
  writeFileSync(managedFile, JSON.stringify({ name: 'm', rules: [{ id: 'cccccccccccccccccccccccccccccc01', action: 'block', expression: 'tcp.dstport == 23' }] }));
  const commands: Record<string, (data: string) => string[]> = {
    'users list': (d) => ['users', 'list', '--data-dir', d],
    'users create': (d) => ['users', 'create', '--data-dir', d, '--email', 'a@example.com', '--account', newId()],
    'users add-key': (d) => ['users', 'add-key', '--data-dir', d, '--email', 'a@example.com'],
    'users revoke': (d) => ['users', 'revoke', '--data-dir', d, '--email', 'a@example.com'],
    'tokens list': (d) => ['tokens', 'list', '--data-dir', d],
    'tokens create': (d) => ['tokens', 'create', '--data-dir', d, '--email', 'a@example.com', '--name', 'ci'],
    'tokens revoke': (d) => ['tokens', 'revoke', '--data-dir', d, '--id', newId()],
    'daemons create': (d) => ['daemons', 'create', '--data-dir', d, '--account', newId(), '--name', 'gw', '--token-file', join(dir, 'never.token')],
    'daemons list': (d) => ['daemons', 'list', '--data-dir', d],
    'daemons revoke': (d) => ['daemons', 'revoke', 'gw', '--data-dir', d],
    'lists load-managed': (d) => ['lists', 'load-managed', '--data-dir', d, '--name', 'svc.malware', '--file', listFile],
    'managed import': (d) => ['managed', 'import', '--data-dir', d, '--file', managedFile],
    'managed list': (d) => ['managed', 'list', '--data-dir', d],
    export: (d) => ['export', '--data-dir', d, '--account', newId(), '--out', join(dir, 'out')],
  };

  for (const [name, argv] of Object.entries(commands)) {
    it(`moat ${name} exits 1 with error 8005 naming the path, and creates nothing`, async () => {
      const data = join(dir, name.replace(/ /g, '-'));
      const r = await moat(...argv(data));
      expect(r.code, r.stderr).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(
        `moat: error 8005: no database at ${join(data, 'moat.db')}; \`moat serve --data-dir ${data}\` creates it, or point --data-dir (or MOAT_DATA_DIR) at the directory \`moat serve\` uses`,
      );
      expect(existsSync(data)).toBe(false);
      expect(existsSync(join(dir, 'never.token'))).toBe(false);
    });
  }

  it('creates nothing in an existing empty data directory either', async () => {
    const data = join(dir, 'existing');
    mkdirSync(data);
    const r = await moat('users', 'list', '--data-dir', data);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^moat: error 8005: no database at /);
    expect(readdirSync(data)).toEqual([]);
  });
});
