// IP list files: entries, comments and whitespace; every kind of bad entry is
// reported with the file and the line; the fast parser accepts exactly what
// parseIpRange (the language's `ip.src in {...}`) accepts.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { MoatError } from '../../src/errors/index.js';
import { formatIpv4, formatIpv6, parseIpRange } from '../../src/net/index.js';
import { loadListFile, loadListFileSync, parseListText, rangeListFromStrings, type IpRangeList } from '../../src/net/list-file.js';

const tmp = mkdtempSync(join(tmpdir(), 'moat-list-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** The entries of a list as `first-last` text, IPv4 then IPv6. */
function entries(l: IpRangeList): string[] {
  const out: string[] = [];
  for (let i = 0; i < l.v4First.length; i++) out.push(`${formatIpv4(l.v4First[i]!)}-${formatIpv4(l.v4Last[i]!)}`);
  for (let i = 0; i < l.v6First.length / 4; i++) {
    const f = l.v6First.subarray(i * 4, i * 4 + 4);
    const t = l.v6Last.subarray(i * 4, i * 4 + 4);
    out.push(`${formatIpv6(f[0]!, f[1]!, f[2]!, f[3]!)}-${formatIpv6(t[0]!, t[1]!, t[2]!, t[3]!)}`);
  }
  return out;
}

/** What parseIpRange says of one entry, in the same form (or its error). */
function viaParseIpRange(text: string): string {
  const r = parseIpRange(text);
  if (typeof r === 'string') return `error: ${r}`;
  if (r.family === 4) return `${formatIpv4(r.first[0]!)}-${formatIpv4(r.last[0]!)}`;
  return `${formatIpv6(r.first[0]!, r.first[1]!, r.first[2]!, r.first[3]!)}-${formatIpv6(r.last[0]!, r.last[1]!, r.last[2]!, r.last[3]!)}`;
}

function viaList(text: string): string {
  try {
    const l = parseListText(text, 'x');
    expect(l.count).toBe(1);
    return entries(l)[0]!;
  } catch (err) {
    if (!(err instanceof MoatError)) throw err;
    return `error: ${err.message.replace(/^x:1: /, '')}`;
  }
}

function listError(text: string, file = 'blocklist.txt'): MoatError {
  try {
    parseListText(text, file);
  } catch (err) {
    expect(err).toBeInstanceOf(MoatError);
    return err as MoatError;
  }
  throw new Error('expected a list error');
}

describe('parseListText', () => {
  it('reads addresses, CIDRs and ranges of both families', () => {
    const l = parseListText(
      ['192.0.2.1', '10.0.0.0/8', '198.51.100.10..198.51.100.20', '0.0.0.0/0', '2001:db8::1', '2001:db8::/32', '2001:db8::1..2001:db8::ff', '::/0', '::ffff:1.2.3.4'].join('\n'),
      'l.txt',
    );
    expect(l.count).toBe(9);
    expect(entries(l)).toEqual([
      '192.0.2.1-192.0.2.1',
      '10.0.0.0-10.255.255.255',
      '198.51.100.10-198.51.100.20',
      '0.0.0.0-255.255.255.255',
      '2001:db8::1-2001:db8::1',
      '2001:db8::-2001:db8:ffff:ffff:ffff:ffff:ffff:ffff',
      '2001:db8::1-2001:db8::ff',
      '::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
      '::ffff:102:304-::ffff:102:304',
    ]);
  });

  it('skips comments, trailing comments, blank lines, whitespace, CRLF and a BOM', () => {
    const text = '\ufeff# header comment\r\n\r\n  192.0.2.1  \r\n\t10.0.0.0/8\t# corp\r\n   # indented comment\n2001:db8::/32#no space\n\n';
    const l = parseListText(text, 'l.txt');
    expect(entries(l)).toEqual(['192.0.2.1-192.0.2.1', '10.0.0.0-10.255.255.255', '2001:db8::-2001:db8:ffff:ffff:ffff:ffff:ffff:ffff']);
  });

  it('keeps entries in file order, overlaps and duplicates included', () => {
    const l = parseListText('10.0.0.5\n10.0.0.0/24\n10.0.0.5\n', 'l.txt');
    expect(Array.from(l.v4First, formatIpv4)).toEqual(['10.0.0.5', '10.0.0.0', '10.0.0.5']);
  });

  it('reads an empty file as an empty list', () => {
    expect(parseListText('', 'e.txt').count).toBe(0);
    expect(parseListText('# nothing\n\n', 'e.txt').count).toBe(0);
  });

  it('reports host bits with the network that was meant, naming file and line', () => {
    const e = listError('# list\n10.0.0.0/8\r\n\r\n10.1.2.3/8 # typo\n');
    expect(e.code).toBe(4001);
    expect(e.errorName).toBe('LIST_BAD_ENTRY');
    expect(e.file).toBe('blocklist.txt');
    expect(e.line).toBe(4);
    expect(e.message).toBe('blocklist.txt:4: CIDR "10.1.2.3/8" has host bits set (did you mean 10.0.0.0/8?)');
    expect(listError('2001:db8::1/32').message).toBe('blocklist.txt:1: CIDR "2001:db8::1/32" has host bits set (did you mean 2001:db8::/32?)');
  });

  it('reports bad addresses, prefix lengths, reversed and mixed ranges', () => {
    const cases: Array<[string, string]> = [
      ['1.2.3', 'invalid IP address "1.2.3"'],
      ['1.2.3.256', 'invalid IP address "1.2.3.256"'],
      ['01.2.3.4', 'invalid IP address "01.2.3.4"'],
      ['example.com', 'invalid IP address "example.com"'],
      ['1.2.3.4 5.6.7.8', 'invalid IP address "1.2.3.4 5.6.7.8"'],
      ['2001:db8:::1', 'invalid IP address "2001:db8:::1"'],
      ['fe80::1%eth0', 'invalid IP address "fe80::1%eth0"'],
      ['10.0.0.0/33', 'invalid prefix length in "10.0.0.0/33"'],
      ['10.0.0.0/', 'invalid prefix length in "10.0.0.0/"'],
      ['2001:db8::/129', 'invalid prefix length in "2001:db8::/129"'],
      ['10.0.0.0/08', 'invalid prefix length in "10.0.0.0/08"'],
      ['10.0.0.9..10.0.0.1', 'IP range "10.0.0.9..10.0.0.1" ends before it starts'],
      ['2001:db8::9..2001:db8::1', 'IP range "2001:db8::9..2001:db8::1" ends before it starts'],
      ['10.0.0.1..2001:db8::1', 'IP range "10.0.0.1..2001:db8::1" mixes IPv4 and IPv6'],
      ['10.0.0.1..', 'invalid IP range "10.0.0.1.."'],
    ];
    for (const [entry, why] of cases) {
      const e = listError(`192.0.2.1\n\n${entry}  # note\n`, 'l.txt');
      expect(e.message, entry).toBe(`l.txt:3: ${why}`);
      expect(e.line).toBe(3);
    }
  });

  it('accepts exactly the entries parseIpRange accepts, with the same bounds', () => {
    const v4 = fc.oneof(fc.ipV4(), fc.ipV4Extended());
    const v6 = fc.ipV6();
    const len = fc.integer({ min: 0, max: 130 }).map(String);
    const entry = fc.oneof(
      v4,
      v6,
      fc.tuple(v4, len).map(([a, l]) => `${a}/${l}`),
      fc.tuple(v6, len).map(([a, l]) => `${a}/${l}`),
      fc.tuple(v4, v4).map(([a, b]) => `${a}..${b}`),
      fc.tuple(v6, v6).map(([a, b]) => `${a}..${b}`),
      fc.tuple(v4, v6).map(([a, b]) => `${a}..${b}`),
      fc.string({ unit: fc.constantFrom(...'0123456789abcdefABCDEF:./'.split('')), minLength: 1, maxLength: 24 }),
    );
    fc.assert(
      fc.property(entry, (text) => {
        expect(viaList(text)).toBe(viaParseIpRange(text));
      }),
      { numRuns: 5000 },
    );
  });

  it('reads the IPv6 forms with :: at either end, in the middle and with 7 groups', () => {
    for (const text of ['::', '::1', '1::', '1:2:3:4:5:6:7::', '::2:3:4:5:6:7:8', '1::8', 'FFFF:abcd::', '1:2:3:4:5:6:7:8', '2001:db8::/48', '2001:db8::..2001:db8::ffff']) {
      expect(viaList(text), text).toBe(viaParseIpRange(text));
    }
    for (const text of ['1:2:3:4:5:6:7:8::', ':1::', '1:::2', '12345::', '1:2:3:4:5:6:7', '::1:2:3:4:5:6:7:8', '1::2::3']) {
      expect(viaList(text), text).toMatch(/^error: /);
    }
  });

  it('parses a million lines of both families', () => {
    const lines: string[] = [];
    let x = 12345;
    for (let i = 0; i < 1_000_000; i++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      if (i % 10 < 7) lines.push(formatIpv4(x));
      else if (i % 10 < 9) lines.push(`${formatIpv4(x & 0xffffff00)}/24 # c`);
      else lines.push(`2001:db8:${(x >>> 16).toString(16)}:${(x & 0xffff).toString(16)}::/64`);
    }
    const text = lines.join('\r\n');
    const l = parseListText(text, 'big.txt');
    expect(l.count).toBe(1_000_000);
    expect(l.v6First.length / 4).toBe(100_000);
  });
});

describe('rangeListFromStrings', () => {
  it('treats each string as a line and names its 1-based index in errors', () => {
    const l = rangeListFromStrings(['10.0.0.0/8', '', ' 2001:db8::1 # x']);
    expect(entries(l)).toEqual(['10.0.0.0-10.255.255.255', '2001:db8::1-2001:db8::1']);
    try {
      rangeListFromStrings(['10.0.0.0/8', '10.0.0.1/8'], 'api:list/abc');
      expect.fail('expected an error');
    } catch (err) {
      expect((err as MoatError).message).toBe('api:list/abc:2: CIDR "10.0.0.1/8" has host bits set (did you mean 10.0.0.0/8?)');
      expect((err as MoatError).line).toBe(2);
    }
  });
});

describe('loadListFile', () => {
  it('reads a file, synchronously or not', async () => {
    const path = join(tmp, 'ok.txt');
    writeFileSync(path, '# ok\n192.0.2.0/24\n2001:db8::/32\n');
    expect(entries(await loadListFile(path))).toEqual(entries(loadListFileSync(path)));
    expect((await loadListFile(path)).count).toBe(2);
  });

  it('names the file and line of a bad entry', async () => {
    const path = join(tmp, 'bad.txt');
    writeFileSync(path, '192.0.2.0/24\n192.0.2.300\n');
    await expect(loadListFile(path)).rejects.toMatchObject({ code: 4001, file: path, line: 2, message: `${path}:2: invalid IP address "192.0.2.300"` });
  });

  it('reports a missing file or a directory with 4002', async () => {
    const missing = join(tmp, 'missing.txt');
    await expect(loadListFile(missing)).rejects.toMatchObject({ code: 4002, errorName: 'LIST_READ', file: missing, message: `cannot read list file ${missing}: no such file` });
    expect(() => loadListFileSync(tmp)).toThrow(/cannot read list file .*: it is a directory/);
  });
});
