// A bundle loaded in one thread crosses to another as data (BundleExporter,
// BundleImporter): through a real MessageChannel, the table's buffers are
// transferred (the sender is left without them, the receiver gets them whole),
// a reused table does not travel again, the constants that are not plain data
// (closures, range sets) are made again from their rules, and the bundle
// judges as the one loaded in thread.

import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MessageChannel, receiveMessageOnPort } from 'node:worker_threads';
import { BundleExporter, BundleImporter, BundleLoader, PacketPath, type BundleFiles, type LoadedBundle, type TransferredBundle } from '../../src/engine/index.js';
import { LINKTYPE } from '../../src/packet/index.js';
import { buildFixtureDatabases } from '../support/make-mmdb.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'moat-bundle-transfer-'));
  const { country, asn } = buildFixtureDatabases();
  writeFileSync(join(dir, 'country.mmdb'), country);
  writeFileSync(join(dir, 'asn.mmdb'), asn);
  writeFileSync(join(dir, 'bad.txt'), '1.1.1.7\n2001:db8:1::/64\n');
  writeFileSync(join(dir, 'office.txt'), '198.51.100.0/25\n');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function writeRules(expressions: readonly string[]): void {
  writeFileSync(join(dir, 'rules.json'), JSON.stringify({ phase: 'network_transit', rules: expressions.map((expression, i) => ({ id: `r${i}`, action: i === 0 ? 'log' : 'block', expression })) }));
}

const files = (): BundleFiles => ({
  rules: [join(dir, 'rules.json')],
  lists: [{ name: 'bad', file: join(dir, 'bad.txt') }, { name: 'office', file: join(dir, 'office.txt') }],
  geoip: join(dir, 'country.mmdb'),
  asn: join(dir, 'asn.mmdb'),
});

/** Rules whose constants include closures (bytes, bit slices, six IPv6 ranges) and a range set, with lists and GeoIP. */
const RULES = [
  'ip.src.country in {"AU" "DE"}',
  'ip.src in $bad and tcp.dstport == 22',
  'tcp.dstport == 23',
  'tcp.dstport in {3389 5900}',
  'tcp.dstport == 25',
  'tcp.dstport == 110',
  'ip.dst.asnum == 13335 and ip.proto == "udp"',
  'ip.src in $office and not ip.dst in {10.0.0.0/8}',
  'ip.src in {2001:db8::1 2001:db8::3 2001:db8::5 2001:db8::7 2001:db8::9 2001:db8::b}',
  'ip.src.asnum in {64496 15169 24940 20712 4200000001}',
  'ip.proto matches "^u" and udp.dstport == 53',
  'bit_slice(tcp, 104, 112) == 0x12',
  'ip.src.country contains "P"',
];

/** Frames from and to the fixtures' networks and lists, other addresses, TCP and UDP, several ports and flags. */
function frames(): Uint8Array[] {
  const addrs = ['1.1.1.7', '1.1.1.8', '5.9.1.1', '8.8.8.8', '133.1.2.3', '192.0.2.200', '198.51.100.5', '198.51.100.200', '203.0.113.70', '198.18.0.1', '100.64.0.1'];
  const addrs6 = ['2001:db8::1', '2001:db8::2', '2001:db8:1::5', '2400:cb00::1', '2a00:1450::9', '2001:200::1', 'fd00::1'];
  const ports = [22, 23, 25, 53, 110, 3389, 5900, 8080];
  const out: Uint8Array[] = [];
  let k = 0;
  for (const [list, version] of [[addrs, 4], [addrs6, 6]] as const) {
    for (const src of list) {
      for (const port of ports) {
        const dst = list[(k++ * 7) % list.length]!;
        const tcp = k % 3 !== 0;
        out.push(buildFrame({
          ip: version === 4 ? { version, src, dst, ttl: 64 } : { version, src, dst, hopLimit: 64 },
          l4: tcp ? { kind: 'tcp', srcPort: 40000 + k, dstPort: port, flags: k % 2 === 0 ? TCP.SYN : TCP.SYN | TCP.ACK } : { kind: 'udp', srcPort: 40000 + k, dstPort: port },
        }));
      }
    }
  }
  return out;
}

/** The verdict and rule of each frame, and the hits of each rule after them all. */
function judge(b: LoadedBundle, fs: readonly Uint8Array[]): { verdicts: string[]; hits: number[] } {
  const p = new PacketPath(b.evaluator, { table: b.table });
  const verdicts = fs.map((f) => `${p.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET) ? 'drop' : 'pass'}:${p.lastRule}`);
  return { verdicts, hits: Array.from(b.evaluator.hitPackets) };
}

/** Sends what an exporter loaded through a real MessageChannel, its buffers transferred, and receives it. */
function send(out: { bundle: TransferredBundle; transfer: ArrayBuffer[] }): TransferredBundle {
  const { port1, port2 } = new MessageChannel();
  try {
    port1.postMessage(out.bundle, out.transfer);
    return receiveMessageOnPort(port2)!.message as TransferredBundle;
  } finally {
    port1.close();
    port2.close();
  }
}

describe('a bundle handed from one thread to another', () => {
  it('judges every frame as the bundle loaded in thread, closures and range sets made again from their rules', () => {
    writeRules(RULES);
    const local = new BundleLoader().load(files());
    const exported = new BundleExporter().load(files());
    // The constants that are not plain data: the six IPv6 ranges, the AS number set, `matches`, bit_slice, `contains`.
    expect(exported.bundle.recipes.map((r) => [r.rule, r.make]).sort()).toEqual([[10, 'predicate'], [11, 'int-getter'], [12, 'predicate'], [8, 'predicate'], [9, 'int-set']].sort());
    expect(exported.bundle.recipes.every((r) => exported.bundle.constants[r.index] === null)).toBe(true);
    const imported = new BundleImporter().import(send(exported));
    const fs = frames();
    const a = judge(local, fs);
    const b = judge(imported, fs);
    expect(b.verdicts).toEqual(a.verdicts);
    expect(b.hits).toEqual(a.hits);
    // The differential means something: every rule but the log rule's own drop decides some frame, and both verdicts occur.
    expect(new Set(a.verdicts.filter((v) => v.startsWith('drop')).map((v) => Number(v.split(':')[1]))).size).toBeGreaterThanOrEqual(8);
    expect(a.verdicts.some((v) => v.startsWith('pass'))).toBe(true);
    expect(a.hits[0]).toBeGreaterThan(0);
    expect([imported.digest, imported.tableReused, imported.rulesets]).toEqual([local.digest, false, local.rulesets]);
    expect(imported.evaluator.sources).toEqual(local.evaluator.sources);
    expect(imported.evaluator.program === null).toBe(local.evaluator.program === null);
  });

  it('makes the closures of the rules of a managed ruleset, run by an execute rule, again from the expanded rules', () => {
    writeFileSync(join(dir, 'managed.json'), JSON.stringify({
      id: 'm1', name: 'managed', phase: 'network_transit_managed',
      rules: [
        { id: 'm-a', action: 'block', expression: 'ip.proto matches "^t" and tcp.dstport == 25', enabled: true },
        { id: 'm-b', action: 'block', expression: 'bit_slice(tcp, 104, 112) == 0x02', enabled: true },
      ],
    }));
    writeFileSync(join(dir, 'rules.json'), JSON.stringify({ phase: 'network_transit', rules: [{ action: 'execute', expression: 'ip.src.country != "AU"', action_parameters: { id: 'm1' } }, { action: 'block', expression: 'tcp.dstport == 22' }] }));
    const withManaged = { ...files(), managed: [join(dir, 'managed.json')] };
    const local = new BundleLoader().load(withManaged);
    const out = new BundleExporter().load(withManaged);
    expect(out.bundle.recipes.map((r) => [r.rule, r.make])).toEqual([[0, 'predicate'], [1, 'int-getter']]);
    const imported = new BundleImporter().import(send(out));
    const fs = frames();
    const a = judge(local, fs);
    expect(judge(imported, fs)).toEqual(a);
    // Both managed rules and the account ruleset's own rule decide some frames; the gate of the execute rule keeps Australia out.
    expect(new Set(a.verdicts.filter((v) => v.startsWith('drop')).map((v) => v.split(':')[1]))).toEqual(new Set(['0', '1', '2']));
  });

  it('transfers the table: the sender keeps no bytes of it, the receiver gets every array whole', () => {
    writeRules(RULES);
    const exporter = new BundleExporter();
    const out = exporter.load(files());
    const parts = out.bundle.table!;
    const sizes = Object.entries(parts).flatMap(([k, v]) => (ArrayBuffer.isView(v) ? [[k, v.byteLength] as const] : []));
    expect(sizes.length).toBeGreaterThanOrEqual(14);
    for (const [, n] of sizes) expect(n).toBeGreaterThan(0);
    const received = send(out);
    // Moved, not copied: the sender's arrays are detached...
    for (const [k] of sizes) expect([k, (parts as unknown as Record<string, ArrayBufferView>)[k]!.byteLength]).toEqual([k, 0]);
    // ...and the receiver's hold what they held.
    for (const [k, n] of sizes) expect([k, (received.table as unknown as Record<string, ArrayBufferView>)[k]!.byteLength]).toEqual([k, n]);
    const imported = new BundleImporter().import(received);
    expect(imported.table.seg4).toBe(received.table!.seg4);
  });

  it('does not send a reused table again, and the importer keeps it; a list change sends a new one', () => {
    writeRules(RULES);
    const exporter = new BundleExporter();
    const importer = new BundleImporter();
    const first = importer.import(send(exporter.load(files())));
    writeRules([...RULES, 'tcp.dstport == 7']);
    const second = send(exporter.load(files()));
    expect([second.table, second.tableReused, second.sameGeoIp, second.screens.length]).toEqual([null, true, true, 0]);
    const b = importer.import(second);
    expect(b.table).toBe(first.table);
    writeFileSync(join(dir, 'office.txt'), '198.51.100.0/24\n');
    const third = send(exporter.load(files()));
    expect([third.table === null, third.tableReused, third.sameGeoIp]).toEqual([false, false, true]);
    const c = importer.import(third);
    // (Identity compared outside expect: a deep comparison of two tables takes vitest half a minute.)
    expect(c.table === first.table).toBe(false);
    // The value screens the rules need were built by the exporter and shared with the new table, not built again.
    const shared = [...first.table.valueScreens].map(([memo, screen]) => [memo, c.table.valueScreens.get(memo) === screen]);
    expect(shared.length).toBeGreaterThan(0);
    expect(shared).toEqual(shared.map(([memo]) => [memo, true]));
    const f = buildFrame({ ip: { version: 4, src: '198.51.100.200', dst: '192.0.2.1', ttl: 64 }, l4: { kind: 'tcp', srcPort: 1, dstPort: 80, flags: TCP.SYN } });
    expect(new PacketPath(b.evaluator, { table: b.table }).process(f, 0, f.length, f.length, LINKTYPE.ETHERNET)).toBe(false);
    expect(new PacketPath(c.evaluator, { table: c.table }).process(f, 0, f.length, f.length, LINKTYPE.ETHERNET)).toBe(true);
  });

  it('sends the value screens the rules need with the bundle, so the packet loop builds none', () => {
    writeRules(RULES);
    const out = send(new BundleExporter().load(files()));
    // The destination's AS number compared with 13335 (the source's country is read by `contains` too: no screen): one per family.
    expect(out.screens.map(([memo]) => memo).sort()).toEqual(['4||13335,13335', '6||13335,13335']);
    const imported = new BundleImporter().import(out);
    const before = [...imported.table.valueScreens.keys()].sort();
    new PacketPath(imported.evaluator, { table: imported.table });
    expect([...imported.table.valueScreens.keys()].sort()).toEqual(before);
  });
  it('makes a bundle again in slices, one step a slice at a zero budget, judging as in one go, its table kept only after the last', async () => {
    writeRules(RULES);
    const local = judge(new BundleLoader().load(files()), frames());
    const exporter = new BundleExporter();
    const fresh = send(exporter.load(files()));
    writeRules([...RULES, 'tcp.dstport == 7']);
    const reusing = send(exporter.load(files()));
    const importer = new BundleImporter();
    let turns = 0;
    const attempts: string[] = [];
    const sliced = await importer.importSliced(fresh, 0, async () => {
      turns++;
      // Between two slices the importer still has no table: a bundle reusing this one cannot be made yet.
      try {
        importer.import(reusing);
        attempts.push('made');
      } catch (err) {
        attempts.push((err as Error).message);
      }
    });
    // The table wrapped, then each of the five constants' rules: a turn after each step but the last.
    expect(fresh.recipes.length).toBe(5);
    expect([turns, importer.lastTimings.slices]).toEqual([6, 7]);
    expect(new Set(attempts)).toEqual(new Set([`BundleImporter: bundle reuses table ${reusing.tableId}, which was not received`]));
    expect(judge(sliced, frames())).toEqual(local);
    // Once made, the reused table is there.
    expect(importer.import(reusing).table).toBe(sliced.table);
  });

  it('makes a bundle again in one slice when its steps fit the budget', async () => {
    writeRules(RULES);
    const out = send(new BundleExporter().load(files()));
    let turns = 0;
    const importer = new BundleImporter();
    await importer.importSliced(out, 60_000, async () => void turns++);
    expect([turns, importer.lastTimings.slices]).toEqual([0, 1]);
    expect(importer.lastTimings.longestSliceMs).toBeGreaterThan(0);
  });
});
