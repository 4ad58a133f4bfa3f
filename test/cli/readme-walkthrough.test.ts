// The README's curl walkthrough works as written: `moat serve` on an empty data
// directory prints a first user, and the README's shell block, with only the
// printed URL, account id and key filled in, deploys a network_transit
// entrypoint (skip one port, block the rest, block a country, block a list).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printedCredentials, serveProcess, type ServeProcess } from '../support/api.js';
import { ensureBuilt, ROOT } from '../support/cli.js';
import { peerTool } from '../support/tools.js';

const curl = peerTool('curl');
const bash = peerTool('bash');

/** The first ```sh block after a heading of the README. */
function readmeBlock(heading: string): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const at = readme.indexOf(heading);
  expect(at, `README has "${heading}"`).toBeGreaterThan(0);
  const m = /```sh\n([\s\S]*?)```/.exec(readme.slice(at));
  return m![1]!;
}

describe.skipIf(curl === undefined || bash === undefined)('the README walkthrough', () => {
  let dir: string;
  let served: ServeProcess | undefined;

  beforeAll(async () => {
    ensureBuilt();
    dir = mkdtempSync(join(tmpdir(), 'moat-readme-'));
    served = await serveProcess(join(dir, 'data'));
  }, 60_000);

  afterAll(() => {
    served?.child.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  });

  it('deploys the entrypoint of the README with the credentials moat serve printed', async () => {
    const { url } = served!;
    const { email, key, accountId: account } = printedCredentials(served!);
    expect(email).toBe('admin@moat.local');
    const script = readmeBlock('### Deploying a first ruleset with curl')
      .replace(/^API=.*$/m, `API=${url}`)
      .replace('<account id>', account)
      .replace('<key>', key);
    const run = spawnSync(bash!, ['-euo', 'pipefail', '-c', script], { encoding: 'utf8', timeout: 30_000 });
    expect(run.status, run.stderr).toBe(0);
    const h = { 'X-Auth-Email': 'admin@moat.local', 'X-Auth-Key': key };
    const entry = (await (await fetch(`${url}/accounts/${account}/rulesets/phases/network_transit/entrypoint`, { headers: h })).json()) as {
      success: boolean;
      result: { version: string; rules: { action: string; expression: string }[] };
    };
    expect(entry.success).toBe(true);
    expect(entry.result.version, run.stdout).toBe('3');
    expect(entry.result.rules.map((r: { action: string; expression: string }) => `${r.action} ${r.expression}`)).toEqual([
      'block ip.geoip.country == "KP"',
      'skip tcp.dstport in {8080}',
      'block tcp.dstport in {1..65535}',
      'block ip.src in $office_blocklist or ip.src in $svc.malware',
    ]);
    // the walkthrough ends by listing the versions: the PUT and the two added rules
    expect(run.stdout).toMatch(/"result":\[\{"id":"[0-9a-f]{32}","name":"default".*"version":"3".*\}\]\}$/);
    const versions = (await (await fetch(`${url}/accounts/${account}/rulesets/phases/network_transit/entrypoint/versions`, { headers: h })).json()) as { result: { version: string }[] };
    expect(versions.result.map((v: { version: string }) => v.version)).toEqual(['1', '2', '3']);
  });
});
