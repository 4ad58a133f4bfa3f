// A BundleLoader (the daemon's reloads) keeps the address table across loads
// whose lists and GeoIP databases are byte for byte the same, so that a
// rules-only change costs a compile; it rebuilds the table when any of them
// changes, whatever the files' dates and sizes say; and a rejected load keeps
// nothing of itself.

import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BundleError, BundleLoader, PacketPath, type BundleFiles, type LoadedBundle } from '../../src/engine/index.js';
import { LINKTYPE } from '../../src/packet/index.js';
import { buildCountryMmdb } from '../support/make-mmdb.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'moat-bundle-loader-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const at = (name: string): string => join(dir, name);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function writeRules(...expressions: string[]): void {
  writeFileSync(at('rules.json'), JSON.stringify({ phase: 'network_transit', rules: expressions.map((expression) => ({ action: 'block', expression })) }));
}

function files(lists: readonly string[] = ['bad', 'office']): BundleFiles {
  return { rules: [at('rules.json')], lists: lists.map((name) => ({ name, file: at(`${name}.txt`) })), geoip: at('country.mmdb') };
}

/** Whether the bundle drops a TCP SYN from `src` to port `dport`. */
function drops(b: LoadedBundle, src: string, dport: number): boolean {
  const f = buildFrame({ ip: { version: 4, src, dst: '192.0.2.77', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: dport, flags: TCP.SYN } });
  return new PacketPath(b.evaluator, { table: b.table }).process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
}

describe('a bundle loader', () => {
  beforeEach(() => {
    writeFileSync(at('bad.txt'), '10.0.0.1\n');
    writeFileSync(at('office.txt'), '10.9.0.0/16\n');
    writeFileSync(at('country.mmdb'), buildCountryMmdb('network,iso_code\n1.1.1.0/24,AU\n'));
  });

  it('keeps the address table when only the rules change, and judges with the new rules', () => {
    const loader = new BundleLoader();
    writeRules('ip.src in $bad and tcp.dstport == 22');
    const a = loader.load(files());
    writeRules('ip.src in $bad and tcp.dstport == 23');
    const b = loader.load(files());
    expect(a.tableReused).toBe(false);
    expect(b.tableReused).toBe(true);
    expect(b.table).toBe(a.table);
    expect(b.digest).not.toBe(a.digest);
    expect([drops(a, '10.0.0.1', 22), drops(a, '10.0.0.1', 23)]).toEqual([true, false]);
    expect([drops(b, '10.0.0.1', 22), drops(b, '10.0.0.1', 23), drops(b, '10.0.0.2', 23)]).toEqual([false, true, false]);
  });

  it('gives the same digest for the same files, and keeps the table', () => {
    const loader = new BundleLoader();
    writeRules('ip.src in $office');
    const a = loader.load(files());
    const b = loader.load(files());
    expect(b.digest).toBe(a.digest);
    expect(b.digest).toMatch(/^[0-9a-f]{64}$/);
    expect(b.table).toBe(a.table);
  });

  it('does not read unchanged list and database files again once they are older than the racy window', async () => {
    const loader = new BundleLoader({ racyMs: 20 });
    writeRules('ip.src in $bad');
    await sleep(60);
    loader.load(files());
    expect(loader.filesRead).toBe(3);
    writeRules('ip.src in $office');
    const b = loader.load(files());
    expect(loader.filesRead).toBe(3);
    expect(b.tableReused).toBe(true);
  });

  it('reads a file again while it may still change unseen (modified within the racy window of its read)', () => {
    const loader = new BundleLoader({ racyMs: 60_000 });
    writeRules('ip.src in $bad');
    loader.load(files());
    const b = loader.load(files());
    expect(loader.filesRead).toBe(6);
    expect(b.tableReused).toBe(true);
  });

  it('rebuilds the table when a list changes, even with the same size and dates', async () => {
    const loader = new BundleLoader({ racyMs: 20 });
    writeRules('ip.src in $bad');
    // A whole second, which utimes sets exactly (a Date has only milliseconds).
    const then = new Date('2026-01-01T00:00:00Z');
    utimesSync(at('bad.txt'), then, then);
    await sleep(60);
    const a = loader.load(files());
    const before = statSync(at('bad.txt'), { bigint: true });
    writeFileSync(at('bad.txt'), '10.0.0.2\n');
    utimesSync(at('bad.txt'), then, then);
    const after = statSync(at('bad.txt'), { bigint: true });
    expect([after.size, after.mtimeNs, after.ino]).toEqual([before.size, before.mtimeNs, before.ino]);
    const b = loader.load(files());
    // Only the changed list is read again (its change time moved); the rebuild
    // takes the other list and the database as parsed for the last table.
    expect(loader.filesRead).toBe(4);
    expect(b.tableReused).toBe(false);
    expect(b.table === a.table).toBe(false); // (not .not.toBe: vitest would print the tables, 2 MiB screens included)
    expect(b.digest).not.toBe(a.digest);
    expect([drops(a, '10.0.0.1', 80), drops(a, '10.0.0.2', 80)]).toEqual([true, false]);
    expect([drops(b, '10.0.0.1', 80), drops(b, '10.0.0.2', 80)]).toEqual([false, true]);
  });

  it('rebuilds the table when the lists are given in another order (their bits change)', () => {
    const loader = new BundleLoader();
    writeRules('ip.src in $bad', 'ip.src in $office');
    const a = loader.load(files(['bad', 'office']));
    const b = loader.load(files(['office', 'bad']));
    expect(b.tableReused).toBe(false);
    expect(b.table.listNames).toEqual(['office', 'bad']);
    expect([drops(b, '10.0.0.1', 80), drops(b, '10.9.1.1', 80), drops(b, '10.0.0.3', 80)]).toEqual([true, true, false]);
    expect(a.table.listNames).toEqual(['bad', 'office']);
  });

  it('rebuilds the table when the GeoIP database changes, with the lists as they were', async () => {
    const loader = new BundleLoader({ racyMs: 20 });
    writeRules('ip.src.country == "NZ"', 'ip.src in $office');
    await sleep(60);
    const a = loader.load(files());
    writeFileSync(at('country.mmdb'), buildCountryMmdb('network,iso_code\n1.1.1.0/24,NZ\n'));
    const b = loader.load(files());
    expect(b.tableReused).toBe(false);
    expect(loader.filesRead).toBe(4);
    expect([drops(a, '1.1.1.1', 80), drops(a, '10.9.1.1', 80)]).toEqual([false, true]);
    expect([drops(b, '1.1.1.1', 80), drops(b, '10.9.1.1', 80)]).toEqual([true, true]);
  });

  it('gives a table rebuilt for a list update the value screens of the last one, and not after a GeoIP change', () => {
    const loader = new BundleLoader();
    writeRules('ip.src.country == "AU"', 'ip.src in $bad');
    const a = loader.load(files());
    const au = [a.table.countryCodes.indexOf('AU')];
    expect(drops(a, '1.1.1.1', 80)).toBe(true); // builds a's screens (PacketPath)
    const screenA = a.table.valueScreen(4, au, []);
    writeFileSync(at('bad.txt'), '10.0.0.7\n');
    const b = loader.load(files());
    expect(b.tableReused).toBe(false);
    expect(b.table.valueScreen(4, au, []) === screenA).toBe(true);
    expect([drops(b, '1.1.1.1', 80), drops(b, '1.1.2.1', 80), drops(b, '10.0.0.7', 80)]).toEqual([true, false, true]);
    writeFileSync(at('country.mmdb'), buildCountryMmdb('network,iso_code\n1.1.2.0/24,AU\n'));
    const c = loader.load(files());
    expect(c.table.valueScreen(4, [c.table.countryCodes.indexOf('AU')], []) === screenA).toBe(false);
    expect([drops(c, '1.1.1.1', 80), drops(c, '1.1.2.1', 80)]).toEqual([false, true]);
  });

  it('keeps nothing of a rejected load: the next load compares with the last good one', () => {
    const loader = new BundleLoader();
    writeRules('ip.src in $bad');
    const a = loader.load(files());
    // A bad rule with unchanged lists: rejected, and the kept table is still a's.
    writeRules('ip.src in $bad and no.such.field == 1');
    expect(() => loader.load(files())).toThrow(BundleError);
    writeRules('ip.src in $bad and tcp.dstport == 80');
    const b = loader.load(files());
    expect(b.table).toBe(a.table);
    // A bad rule with a changed list: the table built for it is not kept.
    writeFileSync(at('bad.txt'), '10.0.0.5\n');
    writeRules('ip.src in $nosuchlist');
    expect(() => loader.load(files())).toThrow(BundleError);
    writeFileSync(at('bad.txt'), '10.0.0.1\n');
    writeRules('ip.src in $bad');
    const c = loader.load(files());
    expect(c.tableReused).toBe(true);
    expect(c.table).toBe(a.table);
    expect(drops(c, '10.0.0.1', 80)).toBe(true);
  });
});
