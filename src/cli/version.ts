// The version `moat --version` prints: package.json's, read at run time from
// the package this file belongs to (src/cli/ under tests, dist/src/cli/ when
// built, so the file is found by walking up rather than at a fixed depth).

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The version field of Moat's package.json. */
export function moatVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === 'moat' && typeof pkg.version === 'string') return pkg.version;
    } catch {
      // No package.json here (or not ours): keep walking up.
    }
    const up = dirname(dir);
    if (up === dir) return 'unknown';
    dir = up;
  }
}
