// The daemon loads bundles in a worker thread (WorkerLoading, the compiled
// dist/src/daemon/loader-worker.js): a real thread gives the same verdicts as
// loading in thread, over reloads that keep and rebuild the table; the same
// errors (codes, messages, pointers, files) on bad bundles; a worker killed
// during a load rejects it with 6008 and a new one serves the next; and the
// daemon ends the thread when it stops.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateDaemonConfig } from '../../src/config/index.js';
import { Daemon, WorkerLoading } from '../../src/daemon/index.js';
import { BundleError, BundleLoader, PacketPath, type BundleFiles, type LoadedBundle } from '../../src/engine/index.js';
import { MoatError } from '../../src/errors/index.js';
import { LINKTYPE } from '../../src/packet/index.js';
import { ensureBuilt } from '../support/cli.js';
import { buildFixtureDatabases } from '../support/make-mmdb.js';
import { MemorySource } from '../support/memory-source.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const silent = pino({ level: 'silent' });
let dir: string;
const at = (name: string) => join(dir, name);

beforeAll(() => {
  // The worker thread runs JavaScript: the compiled worker of dist/.
  ensureBuilt();
  dir = mkdtempSync(join(tmpdir(), 'moat-worker-loading-'));
  const { country, asn } = buildFixtureDatabases();
  writeFileSync(at('country.mmdb'), country);
  writeFileSync(at('asn.mmdb'), asn);
  writeFileSync(at('bad.txt'), '1.1.1.7\n2001:db8:1::/64\n');
  writeFileSync(at('office.txt'), '198.51.100.0/25\n');
}, 300_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function writeRules(name: string, expressions: readonly string[], version = '1'): string {
  writeFileSync(at(name), JSON.stringify({ phase: 'network_transit', version, rules: expressions.map((expression, i) => ({ id: `r${i}`, action: i === 0 ? 'log' : 'block', expression })) }));
  return at(name);
}

const filesOf = (rules: string): BundleFiles => ({
  rules: [rules],
  lists: [{ name: 'bad', file: at('bad.txt') }, { name: 'office', file: at('office.txt') }],
  geoip: at('country.mmdb'),
  asn: at('asn.mmdb'),
});

const BUNDLES: ReadonlyArray<readonly string[]> = [
  ['ip.src.country in {"AU" "DE"}', 'ip.src in $bad and tcp.dstport == 22', 'tcp.dstport == 23', 'tcp.dstport in {3389 5900}', 'tcp.dstport == 25', 'tcp.dstport == 110', 'ip.dst.asnum == 13335 and ip.proto == "udp"'],
  ['ip.src in $office', 'ip.src in $office and not ip.dst in {10.0.0.0/8}', 'ip.src in {2001:db8::1 2001:db8::3 2001:db8::5 2001:db8::7 2001:db8::9 2001:db8::b}', 'ip.src.asnum in {64496 15169 24940 20712 4200000001}'],
  ['tcp.flags.syn', 'ip.proto matches "^u" and udp.dstport == 53', 'bit_slice(tcp, 104, 112) == 0x12', 'ip.dst.country in {"JP" "US" "AU"} and tcp.dstport < 1024', 'ip.src in $bad or ip.dst in $bad'],
];

const frames: Uint8Array[] = (() => {
  const v4 = ['1.1.1.7', '1.1.1.8', '5.9.1.1', '8.8.8.8', '133.1.2.3', '192.0.2.200', '198.51.100.5', '198.51.100.200', '198.18.0.1', '100.64.0.1'];
  const v6 = ['2001:db8::1', '2001:db8::2', '2001:db8:1::5', '2400:cb00::1', '2a00:1450::9', 'fd00::1'];
  const out: Uint8Array[] = [];
  let k = 0;
  for (const [addrs, version] of [[v4, 4], [v6, 6]] as const) {
    for (const src of addrs) {
      for (const port of [22, 23, 25, 53, 110, 443, 3389, 5900]) {
        const dst = addrs[(k++ * 7) % addrs.length]!;
        const ip = version === 4 ? { version, src, dst, ttl: 64 } as const : { version, src, dst, hopLimit: 64 } as const;
        out.push(buildFrame({ ip, l4: k % 3 === 0 ? { kind: 'udp', srcPort: 40000 + k, dstPort: port } : { kind: 'tcp', srcPort: 40000 + k, dstPort: port, flags: k % 2 === 0 ? TCP.SYN : TCP.SYN | TCP.ACK } }));
      }
    }
  }
  return out;
})();

function verdicts(b: LoadedBundle): string[] {
  const p = new PacketPath(b.evaluator, { table: b.table });
  return frames.map((f) => `${p.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET) ? 'drop' : 'pass'}:${p.lastRule}`);
}

/** What an error says, as a user or the channel sees it. */
function said(err: unknown): unknown {
  const moat = (e: MoatError) => ({ code: e.code, message: e.message, pointer: e.pointer, file: e.file, span: e.span, line: e.line, hint: e.hint });
  if (err instanceof BundleError) return { kind: 'BundleError', message: err.message, errors: err.errors.map(moat) };
  if (err instanceof MoatError) return { kind: 'MoatError', ...moat(err) };
  return { kind: 'Error', message: (err as Error).message };
}

describe('loading bundles in a worker thread', () => {
  it('judges as loading in thread, over reloads that keep the table, change the rules and change a list', async () => {
    const loading = new WorkerLoading(silent);
    const loader = new BundleLoader();
    try {
      const seen: string[][] = [];
      for (const [i, rules] of BUNDLES.entries()) {
        const files = filesOf(writeRules('rules.json', rules, String(i)));
        const [a, b] = [loader.load(files), await loading.load(files)];
        expect([b.digest, b.tableReused, b.missing.length]).toEqual([a.digest, a.tableReused, a.missing.length]);
        expect(verdicts(b)).toEqual(verdicts(a));
        seen.push(verdicts(a));
      }
      // A list change: the worker builds a new table and sends it.
      writeFileSync(at('bad.txt'), '1.1.1.7\n2001:db8:1::/64\n198.51.100.200\n');
      const files = filesOf(at('rules.json'));
      const [a, b] = [loader.load(files), await loading.load(files)];
      expect([b.tableReused, a.tableReused]).toEqual([false, false]);
      expect(verdicts(b)).toEqual(verdicts(a));
      seen.push(verdicts(a));
      // The comparison means something: each bundle drops some frames and passes others, and the bundles differ.
      for (const v of seen) expect([v.some((x) => x.startsWith('drop')), v.some((x) => x.startsWith('pass'))]).toEqual([true, true]);
      expect(new Set(seen.map((v) => v.join())).size).toBe(seen.length);
      expect(loading.started).toBe(1);
    } finally {
      await loading.stop();
    }
  });

  it('rejects a bad bundle with the errors loading in thread gives: codes, messages, pointers, files', async () => {
    const loading = new WorkerLoading(silent);
    const good = writeRules('good.json', ['tcp.dstport == 22']);
    writeFileSync(at('syntax.json'), '{ "rules": [\n  { "action": "block", "expression": "tcp.dstport ==" },\n  { "action": "block", "expression": "ip.src.nope == 1" }\n] }');
    writeFileSync(at('json.json'), '{ "rules": [ }');
    writeFileSync(at('shape.json'), '{ "rules": {} }');
    writeFileSync(at('list-entry.txt'), '10.0.0.1\nnot-an-address\n');
    writeFileSync(at('geo.mmdb'), 'not a database');
    writeFileSync(at('managed.json'), JSON.stringify({ rules: [] }));
    const cases: Array<[string, BundleFiles]> = [
      ['no rules file', { rules: [at('missing.json')] }],
      ['bad JSON', { rules: [at('json.json')] }],
      ['bad shape', { rules: [at('shape.json')] }],
      ['two bad expressions', { rules: [at('syntax.json')] }],
      ['a bad list entry', { rules: [good], lists: [{ name: 'x', file: at('list-entry.txt') }] }],
      ['no list file', { rules: [good], lists: [{ name: 'x', file: at('nope.txt') }] }],
      ['a bad list name', { rules: [good], lists: [{ name: 'Bad Name', file: at('bad.txt') }] }],
      ['too many lists', { rules: [good], lists: Array.from({ length: 33 }, (_, i) => ({ name: `l${i}`, file: at('bad.txt') })) }],
      ['a bad GeoIP database', { rules: [good], geoip: at('geo.mmdb') }],
      ['missing data as an error', { rules: [writeRules('needs.json', ['tcp.dstport == 1', 'ip.src in $cf.botnetcc', 'ip.src.country == "AU"'])], missingData: 'error' }],
      ['a managed ruleset without an id', { rules: [good], managed: [at('managed.json')] }],
      ['three rules files', { rules: [good, good, good] }],
    ];
    try {
      const codes: unknown[] = [];
      for (const [what, files] of cases) {
        let local: unknown;
        try {
          new BundleLoader().load(files);
        } catch (err) {
          local = err;
        }
        const remote = await loading.load(files).then(() => undefined, (err: unknown) => err);
        expect(local, what).toBeDefined();
        expect([what, said(remote)]).toEqual([what, said(local)]);
        expect(remote?.constructor, what).toBe(local?.constructor);
        codes.push(local instanceof BundleError ? local.errors.map((e) => e.code) : local instanceof MoatError ? local.code : 'Error');
      }
      // The cases are what their names say (expected codes written out, not taken from the loader).
      expect(codes).toEqual([6001, 6001, 6002, [1014, 2001], 4001, 4002, 4001, 6005, 4003, [5011, 5011], 6002, 'Error']);
      // The worker survived them all, and still loads a good bundle.
      expect((await loading.load({ rules: [good] })).evaluator.rules).toHaveLength(1);
      expect(loading.started).toBe(1);
    } finally {
      await loading.stop();
    }
  });

  it('rejects the load of a worker that dies with 6008, and starts a new worker for the next', async () => {
    const loading = new WorkerLoading(silent);
    try {
      const files = filesOf(writeRules('die.json', BUNDLES[0]!));
      const load = loading.load(files);
      // Killed while it starts and loads (a worker's start alone takes tens of milliseconds).
      const killed = loading.thread!.terminate();
      const err = await load.then(() => undefined, (e: unknown) => e);
      await killed;
      expect(err).toBeInstanceOf(MoatError);
      expect((err as MoatError).code).toBe(6008);
      expect((err as MoatError).message).toMatch(/worker thread stopped during the load/);
      expect(loading.thread).toBeUndefined();
      const b = await loading.load(files);
      expect(verdicts(b)).toEqual(verdicts(new BundleLoader().load(files)));
      expect(loading.started).toBe(2);
    } finally {
      await loading.stop();
    }
  });
  it('makes the worker\'s bundle again over several turns of the event loop, loads asked together each whole and in order', async () => {
    // A zero slice: a turn after every step (the table, each constant made again from its rule).
    const loading = new WorkerLoading(silent, undefined, 0);
    const loader = new BundleLoader();
    try {
      const first = filesOf(writeRules('sliced-1.json', BUNDLES[1]!));
      const second = filesOf(writeRules('sliced-2.json', BUNDLES[2]!));
      // Turns of the event loop while the loads run: the packet loop's turns.
      let turns = 0;
      let pumping = true;
      const pump = () => {
        turns++;
        if (pumping) setImmediate(pump);
      };
      setImmediate(pump);
      // Both asked at once: the second reply reuses the first's table, so it is made only after the first is whole.
      const [a, b] = await Promise.all([loading.load(first), loading.load(second)]);
      pumping = false;
      expect(b.table).toBe(a.table);
      expect(verdicts(a)).toEqual(verdicts(loader.load(first)));
      expect(verdicts(b)).toEqual(verdicts(loader.load(second)));
      // BUNDLES[2]: the table wrapped, then two constants made again from their rules (`matches`, bit_slice): a slice each.
      expect(loading.lastImport.slices).toBe(4);
      expect(turns).toBeGreaterThanOrEqual(loading.lastImport.slices);
    } finally {
      await loading.stop();
    }
  });
});

describe('the daemon loading in a worker thread', () => {
  const config = () =>
    validateDaemonConfig(
      { mode: 'monitor', interfaces: ['x0'], rules: { account: at('daemon.json') }, lists: { bad: at('bad.txt'), office: at('office.txt') }, geoip: { country: at('country.mmdb'), asn: at('asn.mmdb') }, metrics: { enabled: false }, watch: false },
      at('d.jsonc'),
    );
  const probe = (port: number) => Buffer.from(buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '192.0.2.2', ttl: 64 }, l4: { kind: 'tcp', srcPort: 1000, dstPort: port, flags: TCP.SYN } }));

  it('swaps in what the worker loaded, rejects a reload whose worker dies (6008) keeping its bundle, and ends the thread on stop()', async () => {
    writeRules('daemon.json', ['ip.src in $bad', 'tcp.dstport == 22'], '1');
    let capture: MemorySource | undefined;
    const d = new Daemon(config(), silent, (iface) => (capture = new MemorySource(iface)), undefined, { loader: 'worker' });
    await d.start();
    expect(d.loading).toBeInstanceOf(WorkerLoading);
    const loading = d.loading as WorkerLoading;
    const thread = loading.thread!;
    expect(thread).toBeDefined();
    const exited = new Promise<number>((resolve) => thread.once('exit', resolve));
    const counters = d.ports[0]!.counters;
    capture!.deliver(probe(22));
    expect(counters.dropped).toBe(1);

    writeRules('daemon.json', ['ip.src in $bad', 'tcp.dstport == 23'], '2');
    expect(await d.reload('test')).toMatchObject({ applied: true, rulesetVersions: ['2'] });
    capture!.deliver(probe(22));
    capture!.deliver(probe(23));
    expect(counters.dropped).toBe(2);

    // The worker dies during the next reload: rejected with 6008, version 2 still enforced.
    writeRules('daemon.json', ['ip.src in $bad', 'tcp.dstport == 24'], '3');
    // A list of 50,000 addresses changed with it: the load takes the worker long enough to be killed during it.
    writeFileSync(at('office.txt'), Array.from({ length: 50_000 }, (_, i) => `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`).join('\n'));
    const outcome = d.reload('test');
    await new Promise((r) => setImmediate(r));
    await thread.terminate();
    const rejected = await outcome;
    expect(rejected.applied).toBe(false);
    expect(rejected.applied ? [] : rejected.errors.map((e) => e.code)).toEqual([6008]);
    expect([d.version.startsWith('2@'), d.reloadFailures]).toEqual([true, 1]);
    capture!.deliver(probe(23));
    expect(counters.dropped).toBe(3);
    // A new worker takes the next reload.
    expect(await d.reload('test')).toMatchObject({ applied: true, rulesetVersions: ['3'] });
    expect(loading.started).toBe(2);
    const second = loading.thread!;
    const secondExited = new Promise<number>((resolve) => second.once('exit', resolve));

    await d.stop();
    expect(loading.thread).toBeUndefined();
    expect(typeof (await exited)).toBe('number');
    expect(typeof (await secondExited)).toBe('number');
    // A stopped loader loads nothing more.
    expect(await loading.load(filesOf(at('daemon.json'))).then(() => 0, (e: MoatError) => e.code)).toBe(6008);
  });
});
