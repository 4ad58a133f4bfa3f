// npm ci prints no EBADENGINE: every package the lock file installs accepts the
// oldest Node.js .ci/install accepts (20.19). cookie 2 (through fastify's
// light-my-request) asks for Node 22; package.json's overrides give
// light-my-request cookie 1.1, which has the same stringifySetCookie and
// supports Node 18.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './support/cli.js';

// semver is npm's own range logic (installed with the dev tools).
const semver = createRequire(import.meta.url)('semver') as { satisfies(version: string, range: string): boolean };

interface LockEntry { version?: string; engines?: { node?: string } | string[]; optional?: boolean }

/** The oldest Node.js .ci/install accepts, read from the script. */
function minimumNode(): string {
  const script = readFileSync(join(ROOT, '.ci/install'), 'utf8');
  const major = /^NEED_MAJOR=(\d+)$/m.exec(script)![1]!;
  const minor = /^NEED_MINOR=(\d+)$/m.exec(script)![1]!;
  return `${major}.${minor}.0`;
}

describe('dependencies', () => {
  it('every package in package-lock.json accepts the oldest Node.js .ci/install accepts', () => {
    const node = minimumNode();
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
    const refused = Object.entries(lock.packages)
      .filter(([, p]) => p.optional !== true && p.engines !== undefined && !Array.isArray(p.engines) && p.engines.node !== undefined)
      .filter(([, p]) => !semver.satisfies(node, (p.engines as { node: string }).node))
      .map(([path, p]) => `${path}@${p.version}: node ${(p.engines as { node: string }).node}`);
    expect(refused).toEqual([]);
  });

  it('light-my-request gets a cookie with the stringifySetCookie it calls', () => {
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
    const cookie = lock.packages['node_modules/light-my-request/node_modules/cookie'] ?? lock.packages['node_modules/cookie'];
    expect(cookie?.version).toMatch(/^1\.(1\.\d+|[2-9]\d*\.\d+)$/);
  });
});
