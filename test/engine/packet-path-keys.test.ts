// The packet path writes the keys of ip.proto and of the countries (integers
// that generated rules compare) and writes their bytes only when a rule reads
// the bytes: verdicts agree with closures evaluated over a fully decoded
// context, whether a bundle reads keys only, bytes only, or both.
import { describe, expect, it } from 'vitest';
import { compileBundle, PacketPath, tableLists, toRuleset } from '../../src/engine/index.js';
import { compileExpression } from '../../src/expr/index.js';
import { parseIp, rangeListFromStrings } from '../../src/net/index.js';
import { AddressTable } from '../../src/table/index.js';
import { decode, FULL_PLAN, LINKTYPE, PacketInfo, TRANSIT_SCHEME as S } from '../../src/packet/index.js';
import { buildFrame, TCP, type FrameSpec } from '../support/packet-builder.js';
import { Rng } from '../support/random.js';

// Countries by /8: 10.x CN, 20.x RU, 30.x a code longer than 6 bytes (no key), 40.x none; IPv6 2001:db8::/32 RU.
const codes = ['CN', 'RU', 'LONGCODE'];
const v4 = (a: string) => parseIp(a)!.words[0]!;
const table = AddressTable.build({
  country: {
    codes,
    v4First: Uint32Array.from([v4('10.0.0.0'), v4('20.0.0.0'), v4('30.0.0.0')]),
    v4Last: Uint32Array.from([v4('10.255.255.255'), v4('20.255.255.255'), v4('30.255.255.255')]),
    v4Value: Int32Array.from([0, 1, 2]),
    v6First: Uint32Array.from([0x20010db8, 0, 0, 0]),
    v6Last: Uint32Array.from([0x20010db8, 0xffffffff, 0xffffffff, 0xffffffff]),
    v6Value: Int32Array.from([1]),
    v6Aliases: [],
  },
  lists: [{ name: 'office', ranges: rangeListFromStrings(['20.0.0.0/9']) }],
});

function country(ip: string): string | null {
  const a = parseIp(ip)!;
  if (a.family === 4) {
    const c = table.country4[table.lookup4(a.words[0]!)]!;
    return c < 0 ? null : codes[c]!;
  }
  const c = table.country6[table.lookup6(a.words[0]!, a.words[1]!, a.words[2]!, a.words[3]!)]!;
  return c < 0 ? null : codes[c]!;
}

function randomFrame(rng: Rng): { frame: Uint8Array; src: string; dst: string } {
  const six = rng.chance(0.25);
  const addr = () => (six ? rng.pick(['2001:db8::1', '2001:db9::2']) : `${rng.pick([10, 20, 30, 40])}.${rng.int(256)}.0.${rng.int(256)}`);
  const src = addr();
  const dst = addr();
  const kind = rng.pick(['tcp', 'udp', 'icmp', 'gre', 'esp'] as const);
  const l4: FrameSpec['l4'] =
    kind === 'tcp' ? { kind: 'tcp', srcPort: 1000, dstPort: rng.pick([22, 80]), flags: TCP.SYN }
    : kind === 'udp' ? { kind: 'udp', srcPort: 1000, dstPort: 53, payload: new Uint8Array(8) }
    : { kind: 'udp', srcPort: 1, dstPort: 2, payload: new Uint8Array(4) };
  const proto = kind === 'gre' ? 47 : kind === 'esp' ? 50 : undefined;
  const ip: FrameSpec['ip'] = six
    ? { version: 6, src, dst, hopLimit: 64, ...(proto === undefined ? {} : { nextHeader: proto }) }
    : { version: 4, src, dst, ttl: 64, ...(proto === undefined ? {} : { protocol: proto }) };
  const spec: FrameSpec = kind === 'icmp' ? { ip, l4: { kind: 'icmp', type: 8, code: 0 } as FrameSpec['l4'] } : { ip, l4 };
  return { frame: buildFrame(spec), src, dst };
}

const bundles: Array<{ rules: string[]; protoBytes: boolean; bytesFields: string[] }> = [
  // Keys only: no bytes written.
  { rules: ['ip.proto == "gre" or ip.proto == "esp"', 'ip.src.country in {"CN" "RU"} and tcp.dstport == 22', 'ip.dst.country == "RU" and ip.proto == "udp"'], protoBytes: false, bytesFields: [] },
  { rules: ['ip.geoip.country == "CN"', 'ip.proto in {"ipv6-icmp" "icmp"}', 'ip.dst.country != "CN"'], protoBytes: false, bytesFields: [] },
  // Bytes read too (ordering, matches, a literal without a key): written, and keys still right.
  { rules: ['ip.proto matches "^(gr|es)"', 'ip.src.country == "LONGCODE"', 'ip.dst.country == "RU" and ip.proto == "udp"'], protoBytes: true, bytesFields: ['ip.proto', 'ip.src.country'] },
  { rules: ['ip.geoip.country != "RU" and ip.proto == "tcp"', 'ip.src in $office and ip.proto >= "u"'], protoBytes: true, bytesFields: ['ip.dst.country', 'ip.proto', 'ip.src.country'] },
];

describe('the packet path on keyed fields', () => {
  for (const [n, b] of bundles.entries()) {
    it(`gives the closures' verdicts, writing bytes only when read (bundle ${n}: ${b.rules.join('; ')})`, () => {
      const ev = compileBundle({
        account: toRuleset({ name: 'a', phase: 'network_transit', rules: b.rules.map((expression) => ({ action: 'log', expression })) }),
        lists: tableLists(table),
      });
      expect(ev.plan.protoBytes).toBe(b.protoBytes);
      expect(ev.bytesFields).toEqual(b.bytesFields);
      const path = new PacketPath(ev, { table });
      const filters = b.rules.map((e) => compileExpression(e, { scheme: S, lists: tableLists(table) }));
      const ref = S.newContext();
      const info = new PacketInfo();
      const rng = new Rng(7_000 + n);
      for (let i = 0; i < 600; i++) {
        const { frame, src, dst } = randomFrame(rng);
        path.process(frame, 0, frame.length, frame.length, LINKTYPE.ETHERNET);
        const got = new Set(Array.from(ev.logged.subarray(0, ev.loggedCount)));
        ref.reset();
        info.reset();
        decode(frame, 0, frame.length, LINKTYPE.ETHERNET, ref, info, FULL_PLAN);
        const cs = country(src);
        const cd = country(dst);
        if (cs !== null) ref.setString(S.field('ip.src.country').slot, cs);
        if (cd !== null) ref.setString(S.field('ip.dst.country').slot, cd);
        const a = parseIp(src)!;
        ref.setInt(S.field('ip.src.lists').slot, a.family === 4 ? table.lists4[table.lookup4(a.words[0]!)]! : 0);
        for (const [r, f] of filters.entries()) {
          expect(got.has(r), `${b.rules[r]} on ${src} -> ${dst} proto ${info.protocol}`).toBe(f.execute(ref));
        }
      }
    });
  }
});
