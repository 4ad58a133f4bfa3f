// The README's curl walkthrough works as written: `moat serve` on an empty data
// directory prints a first user, and the README's shell block, with only the
// printed URL, account id and key filled in, deploys a network_transit
// entrypoint (skip one port, block the rest, block a country, block a list).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt, ROOT } from '../support/cli.js';
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
  let child: ChildProcess;
  let printed = '';

  beforeAll(async () => {
    ensureBuilt();
    dir = mkdtempSync(join(tmpdir(), 'moat-readme-'));
    child = spawn(process.execPath, [BIN, 'serve', '--data-dir', join(dir, 'data'), '--listen', '127.0.0.1:0', '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (d: Buffer) => {
        printed += d.toString();
        if (printed.includes('try: curl')) resolve();
      });
      child.once('exit', (c) => reject(new Error(`moat serve exited with ${c}: ${printed}`)));
    });
  }, 60_000);

  afterAll(() => {
    child?.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  });

  it('deploys the entrypoint of the README with the credentials moat serve printed', async () => {
    const url = /listening on (http:\/\/\S+)/.exec(printed)![1]!;
    const key = /X-Auth-Key:\s+(\S+)/.exec(printed)![1]!;
    const account = /account id:\s+([0-9a-f]{32})/.exec(printed)![1]!;
    expect(/X-Auth-Email:\s+(\S+)/.exec(printed)![1]).toBe('admin@moat.local');
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
