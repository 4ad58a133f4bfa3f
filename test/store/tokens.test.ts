// API tokens in the store: a token verifies to its user's principal until it
// is revoked, and a revocation through another connection to the same file
// (`moat tokens revoke` in another process) counts from the next turn of the
// event loop, although verified tokens are remembered between commits.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Database, Tokens, Users } from '../../src/store/index.js';

const ACCOUNT = '0123456789abcdef0123456789abcdef';
const dirs: string[] = [];
const stores: Database[] = [];
afterEach(() => {
  for (const s of stores.splice(0)) s.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function open(dir: string): Database {
  const store = Database.open(dir);
  stores.push(store);
  return store;
}

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

describe('API tokens', () => {
  it('stop verifying once revoked, by this connection at once and by another one from the next turn', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-tokens-'));
    dirs.push(dir);
    const store = open(dir);
    const users = new Users(store);
    users.create({ email: 'ops@example.com', accounts: [ACCOUNT] });
    const tokens = new Tokens(store, users);
    const first = tokens.create({ email: 'ops@example.com', name: 'first' });
    expect(tokens.verify(first.token)?.accounts.has(ACCOUNT)).toBe(true);
    expect(tokens.verify(first.token)?.email).toBe('ops@example.com');
    tokens.revoke(first.info.id);
    expect(tokens.verify(first.token)).toBeUndefined();

    const second = tokens.create({ email: 'ops@example.com', name: 'second' });
    expect(tokens.verify(second.token)?.email).toBe('ops@example.com');
    const other = open(dir);
    new Tokens(other, new Users(other)).revoke(second.info.id);
    await nextTurn();
    expect(tokens.verify(second.token)).toBeUndefined();
  });
});
