// Runs the CLI in process and captures what it prints, or runs the built binary.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runCli } from '../../src/cli/index.js';

/** What a CLI run printed and returned. */
export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `moat <argv>` in this process. */
export async function moat(...argv: string[]): Promise<CliRun> {
  const out: string[] = [];
  const err: string[] = [];
  const output = { stdout: (l: string) => out.push(l), stderr: (l: string) => err.push(l), exitCode: 0 };
  const code = await runCli(argv, output);
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const BIN = `${ROOT}dist/src/cli/main.js`;

/** Builds dist/ when it is missing, so the binary can be spawned. */
export function ensureBuilt(): void {
  if (!existsSync(BIN)) execFileSync('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: ROOT, stdio: 'inherit' });
}

/** Runs the built `moat` binary as a child process. */
export function moatBinary(argv: string[], input?: string): CliRun {
  const r = spawnSync(process.execPath, [BIN, ...argv], { cwd: ROOT, input, encoding: 'utf8' });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}
