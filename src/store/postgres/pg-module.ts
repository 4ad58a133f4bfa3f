// The `pg` package, loaded on first use. Importing `pg` reads
// globalThis.Response (its check for Cloudflare's runtime), which makes Node
// load undici and compile its llhttp WebAssembly: ~100 MB of address space and
// a few milliseconds at every start of every `moat` command, PostgreSQL or
// not. `moat replay` under a 2 GiB address-space cap then failed with "Cannot
// allocate Wasm memory" (test/hardening/captures.test.ts). So the store's
// modules import only pg's types, and this loads the package when a
// PostgreSQL store is opened.

import { createRequire } from 'node:module';
import type * as Pg from 'pg';

let loaded: typeof Pg | undefined;

/** The `pg` package (loaded once, on the first call). */
export function pgModule(): typeof Pg {
  loaded ??= createRequire(import.meta.url)('pg') as typeof Pg;
  return loaded;
}
