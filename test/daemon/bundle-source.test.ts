// The daemon takes its bundles from a BundleSource and keeps the swap logic:
// a source that tells of a change gets its bundle swapped in between two
// packets, a bad one is rejected while the running one stays, and stopping the
// daemon stops the source. The source here is in process, as the control
// channel will be; FileBundleSource is covered by the daemon's end-to-end tests.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import { describe, expect, it } from 'vitest';
import { validateDaemonConfig } from '../../src/config/index.js';
import { Daemon, FileBundleSource, bundleSourceFor, type BundleLoading, type BundleSource, type ReloadOutcome } from '../../src/daemon/index.js';
import type { LoadedBundle } from '../../src/engine/index.js';
import { MemorySource } from '../support/memory-source.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-bundle-source-'));
const rules = (port: number, version: string) => JSON.stringify({ version, rules: [{ id: `block-${port}`, action: 'block', expression: `tcp.dstport == ${port}` }] });
writeFileSync(join(dir, 'v1.json'), rules(22, '1'));
writeFileSync(join(dir, 'v2.json'), rules(23, '2'));
writeFileSync(join(dir, 'bad.json'), '{ "rules": [{ "action": "block", "expression": "tcp.dstport ==" }] }');
const frame = (port: number) => Buffer.from(buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '192.0.2.2', ttl: 64 }, l4: { kind: 'tcp', srcPort: 1000, dstPort: port, flags: TCP.SYN } }));

/** A source whose bundle is whichever ruleset file the test points it at. */
class PushedSource implements BundleSource {
  readonly name = 'pushed';
  file = join(dir, 'v1.json');
  onChange: ((reason: string) => Promise<ReloadOutcome>) | undefined;
  stopped = 0;
  load(loader: BundleLoading): Promise<LoadedBundle> {
    return loader.load({ rules: [this.file], lists: [] });
  }
  start(onChange: (reason: string) => Promise<ReloadOutcome>, _log: Logger): void {
    this.onChange = onChange;
  }
  stop(): void {
    this.stopped++;
  }
}

describe('the daemon with a bundle source', () => {
  it('swaps in what its source pushes, keeps the running bundle on a bad one, and stops the source', async () => {
    const config = validateDaemonConfig({ mode: 'monitor', interfaces: ['x0'], rules: { account: join(dir, 'unused.json') }, metrics: { enabled: false }, watch: false }, join(dir, 'd.jsonc'));
    const source = new PushedSource();
    let capture: MemorySource | undefined;
    const d = new Daemon(config, pino({ level: 'silent' }), (iface) => (capture = new MemorySource(iface)), source);
    await d.start();
    const counters = d.ports[0]!.counters;
    expect(d.version).toMatch(/^1@/);
    capture!.deliver(frame(22));
    expect(counters.dropped).toBe(1);

    source.file = join(dir, 'v2.json');
    expect(await source.onChange!('pushed')).toMatchObject({ applied: true, rulesetVersions: ['2'] });
    expect([d.version.startsWith('2@'), d.swaps, d.reloadFailures]).toEqual([true, 1, 0]);
    capture!.deliver(frame(22));
    capture!.deliver(frame(23));
    expect(counters.dropped).toBe(2);

    source.file = join(dir, 'bad.json');
    const rejected = await source.onChange!('pushed');
    expect(rejected.applied).toBe(false);
    expect(rejected.applied ? [] : rejected.errors.map((e) => e.pointer)).toEqual(['/rules/0/expression']);
    expect([d.version.startsWith('2@'), d.swaps, d.reloadFailures]).toEqual([true, 1, 1]);
    capture!.deliver(frame(23));
    expect(counters.dropped).toBe(3);

    await d.stop();
    expect(source.stopped).toBe(1);
  });

  it('runs one reload at a time, and changes told meanwhile coalesce into one more that loads the latest', async () => {
    const config = validateDaemonConfig({ mode: 'monitor', interfaces: ['x0'], rules: { account: join(dir, 'unused.json') }, metrics: { enabled: false }, watch: false }, join(dir, 'd.jsonc'));
    const source = new PushedSource();
    const loads: string[] = [];
    const load = source.load.bind(source);
    source.load = (loader) => {
      loads.push(source.file);
      return load(loader);
    };
    const d = new Daemon(config, pino({ level: 'silent' }), (iface) => new MemorySource(iface), source);
    await d.start();
    loads.length = 0;
    source.file = join(dir, 'v2.json');
    const first = source.onChange!('one');
    const second = source.onChange!('two');
    const third = source.onChange!('three');
    source.file = join(dir, 'v1.json');
    const outcomes = await Promise.all([first, second, third]);
    // The first loaded v2 when told; the two told while it ran became one load, of what the source had then (v1).
    expect(loads).toEqual([join(dir, 'v2.json'), join(dir, 'v1.json')]);
    expect(outcomes.map((o) => (o.applied ? o.rulesetVersions[0] : 'rejected'))).toEqual(['2', '1', '1']);
    expect(second).toBe(third);
    expect(d.swaps).toBe(2);
    await d.stop();
  });

  it('is the configuration files by default', () => {
    const config = validateDaemonConfig({ mode: 'monitor', interfaces: ['x0'], rules: { account: join(dir, 'v1.json') }, metrics: { enabled: false }, watch: false }, join(dir, 'd.jsonc'));
    expect(bundleSourceFor(config)).toBeInstanceOf(FileBundleSource);
    expect(new Daemon(config, pino({ level: 'silent' }), (iface) => new MemorySource(iface)).bundles.name).toBe('files');
  });
});
