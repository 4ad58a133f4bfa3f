// Finding the real peers the tests compare against (tshark, capinfos, tcpdump).
// Locally a missing tool makes its tests skip; under CI=true it is an error, so
// a missing install step fails the run instead of skipping silently.
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Path of `name` (or of $envVar when set), undefined when missing; throws when missing under CI=true. */
export function peerTool(name: string, envVar?: string): string | undefined {
  const fromEnv = envVar === undefined ? undefined : process.env[envVar];
  let found: string | undefined;
  if (fromEnv) found = existsSync(fromEnv) ? fromEnv : undefined;
  else {
    for (const dir of (process.env.PATH ?? '').split(delimiter)) {
      if (dir && existsSync(join(dir, name))) {
        found = join(dir, name);
        break;
      }
    }
  }
  if (found === undefined && process.env.CI === 'true') {
    throw new Error(`${name} is required when CI=true (the tests compare Moat with it); install it (.ci/run does)`);
  }
  if (found === undefined) console.warn(`${name} is not installed: the tests that compare Moat with it are skipped`);
  return found;
}
