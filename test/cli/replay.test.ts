// `moat replay` judges the packets of capture files with the rulesets, lists and
// GeoIP data it is given, writes the pass/drop pcaps and verdict lines asked
// for, and prints a summary; every error names its file.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildPcap, PcapReader } from '../../src/capture/index.js';
import { buildFrame, TCP, type FrameSpec } from '../support/packet-builder.js';
import { ensureBuilt, moat, moatBinary, ROOT } from '../support/cli.js';
import { renderSummary, type Summary } from '../../src/cli/commands/replay.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-replay-'));
const COUNTRY_DB = join(ROOT, 'native-fixtures/geoip/test-country.mmdb');
const ASN_DB = join(ROOT, 'native-fixtures/geoip/test-asn.mmdb');

const tcp = (src: string, dst: string, dport: number, flags = TCP.SYN): FrameSpec => ({
  ip: src.includes(':') ? { version: 6, src, dst, hopLimit: 64 } : { version: 4, src, dst, ttl: 64 },
  l4: { kind: 'tcp', srcPort: 40000, dstPort: dport, flags },
});
const udp = (src: string, dst: string, dport: number): FrameSpec => ({
  ip: { version: 4, src, dst, ttl: 64 },
  l4: { kind: 'udp', srcPort: 5000, dstPort: dport },
});

// Frame i and the rule that must decide it (written from the rules below, by hand).
const FRAMES: Array<[FrameSpec, string]> = [
  [tcp('192.0.2.10', '198.51.100.1', 22), 'pass (account skip; zone does not block 22 from FR)'],
  [tcp('203.0.113.9', '198.51.100.1', 22), 'drop account block-admin'],
  [tcp('203.0.113.9', '198.51.100.1', 443), 'pass'],
  [tcp('81.2.69.10', '198.51.100.1', 443), 'drop account block-gb (GeoIP GB)'],
  [tcp('2001:db8::5', '2001:db8::6', 23), 'drop account block-admin (IPv6)'],
  [udp('10.9.9.9', '198.51.100.1', 53), 'drop account block-malware (list)'],
  [udp('10.8.0.1', '198.51.100.1', 53), 'pass, logged'],
  [tcp('5.9.1.1', '198.51.100.1', 8080), 'drop zone block-asn (AS24940)'],
];
const EXPECT_DROP = [false, true, false, true, true, true, false, true];

const account = {
  success: true, errors: [], messages: [],
  result: {
    id: 'acc', name: 'account entrypoint', kind: 'root', phase: 'network_transit', version: '4',
    rules: [
      { id: 'allow-office-ssh', action: 'skip', action_parameters: { ruleset: 'current' }, expression: 'tcp.dstport == 22 and ip.src in {192.0.2.0/24}' },
      { id: 'block-admin', action: 'block', expression: 'tcp.dstport in {22 23 3389}', description: 'admin ports' },
      { id: 'block-gb', action: 'block', expression: 'ip.src.country == "GB"' },
      { id: 'log-dns', action: 'log', expression: 'udp.dstport == 53' },
      { id: 'block-malware', action: 'block', expression: 'ip.src in $cf.malware' },
      { id: 'off', action: 'block', expression: 'ip.proto == "udp"', enabled: false },
    ],
  },
};
const zone = { phase: 'network_transit', rules: [{ id: 'block-asn', action: 'block', expression: 'ip.src.asnum == 24940' }] };

function files() {
  const pcap = join(dir, 'in.pcap');
  writeFileSync(pcap, buildPcap(FRAMES.map(([spec], i) => ({ data: buildFrame(spec), seconds: 1700000000 + i, nanoseconds: 500 }))));
  writeFileSync(join(dir, 'account.json'), JSON.stringify(account));
  writeFileSync(join(dir, 'zone.json'), JSON.stringify(zone));
  writeFileSync(join(dir, 'malware.txt'), '# test list\n10.9.0.0/16\n2001:db8:dead::/48 # v6\n');
  return { pcap, rules: ['--rules', join(dir, 'account.json'), '--rules', join(dir, 'zone.json')] };
}

describe('moat replay', () => {
  beforeAll(() => ensureBuilt(), 120_000);

  it('drops exactly the frames the rules block and counts per rule', async () => {
    const { pcap, rules } = files();
    const r = await moat('replay', pcap, ...rules, '--list', `svc.malware=${join(dir, 'malware.txt')}`, '--geoip', COUNTRY_DB, '--asn', ASN_DB, '--json',
      '--pass', join(dir, 'pass.pcap'), '--drop', join(dir, 'drop.pcap'), '--verdicts', join(dir, 'v.jsonl'));
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s.packets).toBe(8);
    expect(s.dropped.packets).toBe(EXPECT_DROP.filter(Boolean).length);
    const hits = Object.fromEntries(s.rules.map((x: { id: string; packets: number }) => [x.id, x.packets]));
    expect(hits).toEqual({ 'allow-office-ssh': 1, 'block-admin': 2, 'block-gb': 1, 'log-dns': 2, 'block-malware': 1, off: 0, 'block-asn': 1 });

    const verdicts = readFileSync(join(dir, 'v.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(verdicts.map((v) => v.verdict === 'drop')).toEqual(EXPECT_DROP);
    expect(verdicts[3]).toMatchObject({ frame: 4, verdict: 'drop', rule: 'block-gb', ruleset: 'account' });
    expect(verdicts[7]).toMatchObject({ rule: 'block-asn', ruleset: 'zone' });
    expect(verdicts[6]).toMatchObject({ verdict: 'pass', logged: ['log-dns'] });

    // The output captures hold the frames, byte for byte, with their timestamps.
    const read = (f: string) => {
      const out: Array<[string, number]> = [];
      const rd = PcapReader.open(f);
      while (rd.next()) out.push([Buffer.from(rd.data.subarray(rd.offset, rd.offset + rd.caplen)).toString('hex'), rd.tsSec]);
      rd.close();
      return out;
    };
    const frames = FRAMES.map(([spec], i) => [Buffer.from(buildFrame(spec)).toString('hex'), 1700000000 + i]);
    expect(read(join(dir, 'drop.pcap'))).toEqual(frames.filter((_, i) => EXPECT_DROP[i]));
    expect(read(join(dir, 'pass.pcap'))).toEqual(frames.filter((_, i) => !EXPECT_DROP[i]));
  });

  it('prints a readable summary with packets per second and hits per rule', async () => {
    const { pcap, rules } = files();
    const r = await moat('replay', pcap, ...rules, '--list', `svc.malware=${join(dir, 'malware.txt')}`, '--geoip', COUNTRY_DB, '--asn', ASN_DB);
    expect(r.code).toBe(0);
    // Eight packets: too few for a meaningful rate, so none is printed.
    expect(r.stdout.split('\n')[0]).toMatch(/^8 packets, \d+ bytes from 1 file in [\d.]+ s$/);
    expect(r.stdout).toMatch(/dropped\s+5 packets/);
    expect(r.stdout).toMatch(/account#1 block-admin block "admin ports"\s+2 packets/);
    // Totals and rule hits share one column layout.
    const rows = r.stdout.split('\n').filter((l) => / packets .* bytes$/.test(l));
    expect(rows.length).toBe(3 + 7);
    expect(new Set(rows.map((l) => l.indexOf(' packets '))).size).toBe(1);
    expect(new Set(rows.map((l) => l.length)).size).toBe(1);
  });

  it('leaves out empty descriptions and prints a rate only for a capture big enough to measure one', async () => {
    const { pcap } = files();
    writeFileSync(join(dir, 'desc.json'), JSON.stringify({ rules: [{ id: 'r1', action: 'block', expression: 'tcp.dstport == 22', description: '' }] }));
    const r = await moat('replay', pcap, '--rules', join(dir, 'desc.json'));
    expect(r.stdout).toMatch(/account#0 r1 block\s+2 packets/);
    expect(r.stdout).not.toContain('""');
    const summary: Summary = {
      files: ['a.pcap'], packets: 5000, bytes: 300000, passed: { packets: 5000, bytes: 300000 }, dropped: { packets: 0, bytes: 0 },
      undecodable: { packets: 0, bytes: 0 }, notIp: 0, damaged: 0, fragments: 0, seconds: 0.5, packetsPerSecond: 10000, rules: [],
    };
    expect(renderSummary(summary)[0]).toBe('5,000 packets, 300,000 bytes from 1 file in 0.50 s (10,000 packets/s)');
    expect(renderSummary({ ...summary, seconds: 0.05 })[0]).toBe('5,000 packets, 300,000 bytes from 1 file in 0.05 s');
    expect(renderSummary({ ...summary, packets: 999 })[0]).toBe('999 packets, 300,000 bytes from 1 file in 0.50 s');
  });

  it('warns, naming the rule, about country and ASN rules without databases and lists not given; --strict makes it an error', async () => {
    const { pcap, rules } = files();
    const warn = await moat('replay', pcap, ...rules, '--geoip', COUNTRY_DB);
    expect(warn.code).toBe(0);
    expect(warn.stderr.split('\n')).toEqual([
      'moat: warning 5011: account ruleset, rule 4 (block-malware): reads $svc.malware but that list is not given (lists; replay: --list NAME=FILE): the rule never matches as written',
      'moat: warning 5011: zone ruleset, rule 0 (block-asn): reads ip.src.asnum but no GeoIP ASN database is given (geoip.asn; replay: --asn): the rule never matches as written',
    ]);
    expect(warn.stdout).toMatch(/^8 packets/);
    const strict = await moat('replay', pcap, ...rules, '--geoip', COUNTRY_DB, '--strict');
    expect(strict.code).toBe(1);
    expect(strict.stderr.split('\n').map((l) => l.replace(/ \(.*$/, ''))).toEqual(['moat: error 5011: account ruleset, rule 4', 'moat: error 5011: zone ruleset, rule 0']);
    expect(strict.stdout).toBe('');
    // Everything given: silent, and --strict accepts it.
    const all = await moat('replay', pcap, ...rules, '--strict', '--list', `svc.malware=${join(dir, 'malware.txt')}`, '--geoip', COUNTRY_DB, '--asn', ASN_DB);
    expect([all.code, all.stderr]).toEqual([0, '']);
  });

  it('writes a valid empty capture for --drop and --pass when no packet went there, as tcpdump does', async () => {
    const { pcap } = files();
    writeFileSync(join(dir, 'none.json'), JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 9' }] }));
    writeFileSync(join(dir, 'all.json'), JSON.stringify({ rules: [{ action: 'block', expression: 'ip.src == 0.0.0.0 or not ip.src == 0.0.0.0' }] }));
    const count = (f: string) => {
      const rd = PcapReader.open(f);
      let k = 0;
      while (rd.next()) k++;
      const linkType = rd.linkType;
      rd.close();
      return { k, linkType, size: readFileSync(f).length };
    };
    for (const f of ['e-drop.pcap', 'e-pass.pcap']) rmSync(join(dir, f), { force: true });
    expect((await moat('replay', pcap, '--rules', join(dir, 'none.json'), '--drop', join(dir, 'e-drop.pcap'))).code).toBe(0);
    expect(count(join(dir, 'e-drop.pcap'))).toEqual({ k: 0, linkType: 1, size: 24 });
    expect((await moat('replay', pcap, '--rules', join(dir, 'all.json'), '--pass', join(dir, 'e-pass.pcap'), '--drop', join(dir, 'e-drop.pcap'))).code).toBe(0);
    expect(count(join(dir, 'e-pass.pcap'))).toEqual({ k: 0, linkType: 1, size: 24 });
    expect(count(join(dir, 'e-drop.pcap')).k).toBe(8);
    // An empty input capture gives empty outputs too.
    writeFileSync(join(dir, 'empty-in.pcap'), buildPcap([]));
    expect((await moat('replay', join(dir, 'empty-in.pcap'), '--rules', join(dir, 'none.json'), '--pass', join(dir, 'e-pass.pcap'))).code).toBe(0);
    expect(count(join(dir, 'e-pass.pcap'))).toEqual({ k: 0, linkType: 1, size: 24 });
  });

  it('rejects a bundle with an unknown list, naming the rule, and reads no packet', async () => {
    const { pcap } = files();
    writeFileSync(join(dir, 'bad.json'), JSON.stringify({ rules: [{ action: 'block', expression: 'ip.src in $office' }, { action: 'block', expression: 'tcp.dstport in {1, 2}' }] }));
    const r = await moat('replay', pcap, '--rules', join(dir, 'bad.json'));
    expect(r.code).toBe(1);
    expect(r.stderr.split('\n')).toEqual([
      `moat: error 2006: ${join(dir, 'bad.json')}:1:53: account ruleset, rule 0: unknown list $office (hint: create the list first, or check its name)`,
      `moat: error 1011: ${join(dir, 'bad.json')}:1:112: account ruleset, rule 1: set items are separated by spaces, not commas (hint: write {80 443}, not {80, 443})`,
    ]);
    expect(r.stdout).toBe('');
  });

  it('names the file and line of a bad list entry', async () => {
    const { pcap, rules } = files();
    writeFileSync(join(dir, 'badlist.txt'), '10.0.0.0/8\n10.1.2.3/16\n');
    const r = await moat('replay', pcap, ...rules, '--list', `svc.malware=${join(dir, 'badlist.txt')}`);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${join(dir, 'badlist.txt')}:2`);
  });

  it('judges every good packet of a damaged capture, then reports the file and offset', async () => {
    const { pcap, rules } = files();
    const whole = readFileSync(pcap);
    const cut = join(dir, 'cut.pcap');
    writeFileSync(cut, whole.subarray(0, whole.length - 10));
    const r = await moat('replay', cut, ...rules, '--json', '--list', `svc.malware=${join(dir, 'malware.txt')}`, '--geoip', COUNTRY_DB, '--asn', ASN_DB);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout).packets).toBe(7);
    expect(r.stderr).toMatch(new RegExp(`^moat: error 300\\d: ${cut}.*byte \\d+`));
  });

  it('names a missing ruleset file and exits non-zero', () => {
    const { pcap } = files();
    const r = moatBinary(['replay', pcap, '--rules', join(dir, 'nope.json')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`moat: error 6001: ${join(dir, 'nope.json')}: cannot read: no such file\n`);
  });
});
