// SIGHUP (and, with "watch", a change of the file) makes a running `moat
// daemon` read its whole configuration file again: a rule naming a list the
// configuration did not have is applied once the configuration adds it, and
// what needs a restart (interfaces, mode, capture, metrics) is refused with
// one log line while the rest applies. A real daemon process, in a namespace.
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt } from '../support/cli.js';
import { createNamespace, destroyAll, exec, ip, requireRoot, spawnIn, type NsProcess } from '../support/netns.js';

const RUN = requireRoot();
const dir = mkdtempSync(join(tmpdir(), 'moat-config-reload-'));
const CONFIG = join(dir, 'daemon.jsonc');
const ACCOUNT = join(dir, 'account.json');

// Replaces a file the way deploy tools and editors do: write another, rename it over.
function replace(file: string, value: unknown): void {
  writeFileSync(`${file}.tmp`, JSON.stringify(value));
  renameSync(`${file}.tmp`, file);
}
/** The capture engine of the describe block running (both engines pass the same tests). */
let engine: 'ring' | 'libpcap' = 'ring';
const config = (extra: Record<string, unknown> = {}) => ({ mode: 'monitor', interfaces: ['ga'], rules: { account: 'account.json' }, capture: { engine }, metrics: { listen: '127.0.0.1:9490' }, watch: false, ...extra });

type Log = { msg: string; code?: number; keys?: string[]; reason?: string; errors?: Array<{ code: number; message: string }> };

describe.runIf(RUN).each(['ring', 'libpcap'] as const)('moat daemon reloads its configuration file (%s engine)', (e) => {
  let daemon: NsProcess;

  beforeAll(async () => {
    engine = e;
    ensureBuilt();
    const ns = await createNamespace();
    await ip(['-n', ns, 'link', 'add', 'ga', 'type', 'veth', 'peer', 'name', 'gb']);
    for (const i of ['ga', 'gb']) await ip(['-n', ns, 'link', 'set', i, 'up']);
    writeFileSync(join(dir, 'office.txt'), '192.0.2.0/24\n');
    writeFileSync(join(dir, 'partners.txt'), '198.51.100.0/24\n');
    replace(ACCOUNT, { version: '1', rules: [{ id: 'ssh', action: 'block', expression: 'tcp.dstport == 22' }] });
    replace(CONFIG, config());
    daemon = spawnIn(ns, process.execPath, [BIN, 'daemon', '--config', CONFIG]);
    const running = await daemon.waitForLine(/"msg":"daemon running"/, 20_000);
    expect(JSON.parse(running).engine).toBe(engine);
  }, 120_000);

  afterAll(() => destroyAll(), 60_000);

  const next = (test: (l: Log) => boolean, from: number) => daemon.waitForJson<Log>(test, 10_000, from);

  it('applies a rule naming a list once the configuration adds it; refuses, with one line, what needs a restart', async () => {
    // The rules name $office, which the running configuration does not have: rejected.
    replace(ACCOUNT, { version: '2', rules: [{ id: 'office', action: 'block', expression: 'ip.src in $office' }] });
    let from = daemon.lines.length;
    daemon.kill('SIGHUP');
    const rejected = await next((l) => l.msg.startsWith('reload rejected'), from);
    expect(rejected.errors?.[0]).toMatchObject({ code: 2006, message: expect.stringContaining('unknown list $office') as unknown });

    // The configuration adds the list, and also changes what needs a restart.
    replace(CONFIG, config({ lists: { office: 'office.txt' }, interfaces: ['ga', 'gb'], metrics: { listen: '127.0.0.1:9491' }, log: { level: 'info', drops: true } }));
    from = daemon.lines.length;
    daemon.kill('SIGHUP');
    const refused = await next((l) => l.code === 5013, from);
    expect(refused.keys).toEqual(['interfaces', 'metrics']);
    expect(refused.msg).toBe(`${CONFIG}: interfaces, metrics changed: they take effect only after a restart; not applied (the rest of the configuration is)`);
    const swapped = await next((l) => l.msg === 'ruleset swapped', from);
    expect(swapped.reason).toBe('SIGHUP');
    expect(daemon.lines.slice(from).some((l) => l.includes('reload rejected'))).toBe(false);
    // Still on its first metrics address and interface.
    const health = await fetchIn(daemon.ns, 'http://127.0.0.1:9490/health');
    expect(health).toMatchObject({ status: 'ok', interfaces: ['ga'] });
    expect((health as { version: string }).version).toMatch(/^2@/);
  }, 60_000);

  it('a configuration that does not validate changes nothing', async () => {
    writeFileSync(CONFIG, '{ "mode": "monitor", "interfaces": ["ga"], "rules": { "account": "account.json" }, "bogus": 1 }');
    const from = daemon.lines.length;
    daemon.kill('SIGHUP');
    const rejected = await next((l) => l.msg.startsWith('reload rejected'), from);
    expect(rejected.msg).toContain('the configuration file is invalid');
    expect(daemon.done).toBe(false);
  }, 30_000);

  it('with "watch" on (applied by a reload), a change of the configuration file reloads it', async () => {
    replace(CONFIG, config({ lists: { office: 'office.txt' }, watch: true }));
    let from = daemon.lines.length;
    daemon.kill('SIGHUP');
    await next((l) => l.msg === 'ruleset swapped', from);
    // Now a rule on a second list, and the configuration file giving it: no signal.
    replace(ACCOUNT, { version: '3', rules: [{ id: 'partners', action: 'block', expression: 'ip.src in $partners' }] });
    from = daemon.lines.length;
    replace(CONFIG, config({ lists: { office: 'office.txt', partners: 'partners.txt' }, watch: true }));
    const swapped = await next((l) => l.msg === 'ruleset swapped' && l.reason === 'file changed', from);
    expect(swapped).toBeDefined();
    expect(((await fetchIn(daemon.ns, 'http://127.0.0.1:9490/health')) as { version: string }).version).toMatch(/^3@/);
  }, 30_000);
});

// GET a JSON URL from inside the namespace.
async function fetchIn(ns: string, url: string): Promise<unknown> {
  const r = await exec(ns, process.execPath, ['-e', `fetch(${JSON.stringify(url)}).then((r) => r.text()).then((t) => process.stdout.write(t))`]);
  return JSON.parse(r.stdout);
}
