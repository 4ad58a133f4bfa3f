// `moat serve` processes for one test file (replicas on one database, or
// servers on their own data directories): each started on a new temporary
// data directory, killed with SIGKILL after each test, their directories
// deleted after the file; dist/ is built before the first test.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { serveProcess, type ServeProcess } from './api.js';
import { ensureBuilt } from './cli.js';

export interface ServeReplicas {
  /** Starts `moat serve` with `extra` arguments (and `env`, or under `wrapper`) on a new data directory. */
  start(extra: readonly string[], options?: { env?: NodeJS.ProcessEnv; wrapper?: readonly string[] }): Promise<ServeProcess>;
  /** The processes started by the running test (the hooks kill them after it). */
  readonly running: readonly ServeProcess[];
  /** A new temporary directory, deleted after the file. */
  tempDir(): string;
}

/** Registers the hooks of the calling file; `prefix` names its temporary directories. */
export function useServeReplicas(prefix: string): ServeReplicas {
  const running: ServeProcess[] = [];
  const dirs: string[] = [];
  const tempDir = (): string => {
    const d = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(d);
    return d;
  };
  beforeAll(() => ensureBuilt(), 120_000);
  afterEach(async () => {
    for (const s of running.splice(0)) {
      s.child.kill('SIGKILL');
      await s.exited;
    }
  });
  afterAll(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  return {
    async start(extra, options = {}) {
      const s = await serveProcess(tempDir(), extra, options.env, options.wrapper);
      running.push(s);
      return s;
    },
    running,
    tempDir,
  };
}
