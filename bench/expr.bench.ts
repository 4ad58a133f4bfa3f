// Parse, compile and execute benchmarks of the rules language over
// production-shaped filters (wirefilter's three groups). The execute group runs
// both backends (closures, generated code) and is compared in the same run with
// a hand-written JS function doing the same test (the floor a compiler could
// reach) and with a naive tree-walking evaluator.

import { checkExpression, compileExpression, parse, type Filter } from '../src/expr/index.js';
import { formatIpv4 } from '../src/net/index.js';
import { TRANSIT_SCHEME } from '../src/packet/index.js';
import { Rng } from '../test/support/random.js';
import { refEval, type RefPacket } from '../test/support/reference-eval.js';
import { measure, report, type Figure } from './harness.js';

const rng = new Rng(42);

// 1,000 IPv4 /24s and /32s scattered over the address space, plus some IPv6 prefixes.
const ipSetItems: string[] = [];
for (let i = 0; i < 1000; i++) {
  const a = (rng.int(223) + 1) * 2 ** 24 + rng.int(2 ** 16) * 256;
  ipSetItems.push(i % 3 === 0 ? `${formatIpv4(a)}/24` : formatIpv4(a + rng.int(256)));
}
const ports = [20, 21, 22, 23, 25, 53, 80, 110, 123, 135, 137, 138, 139, 143, 161, 389, 443, 445, 465, 514, 587, 636, 993, 995, 1433, 1521, 2049, 3306, 3389, 5432, 5900, 6379, 8080, 8443, 9200, 11211, 27017];
const countries = ['CN', 'RU', 'KP', 'IR', 'SY', 'CU', 'VE', 'BY', 'MM', 'SD', 'AF', 'IQ', 'LY', 'SO', 'YE', 'ZW', 'NI', 'ER'];

export const FILTERS: Array<{ name: string; expr: string }> = [
  { name: 'ip set 1000', expr: `ip.src in {${ipSetItems.join(' ')}}` },
  { name: 'port set 37 + ranges', expr: `tcp.dstport in {${ports.join(' ')} 6000..6063 49152..65535}` },
  { name: 'country set 18', expr: `ip.src.country in {${countries.map((c) => `"${c}"`).join(' ')}}` },
  {
    name: '20-term rule',
    expr: [
      '(ip.proto == "tcp" and tcp.dstport in {22 23 3389} and not ip.src in {10.0.0.0/8 192.168.0.0/16})',
      'or (ip.proto == "udp" and udp.dstport in {53 123 161 1900 11211} and ip.len > 512)',
      'or (tcp.flags.syn and not tcp.flags.ack and ip.ttl < 5)',
      'or (ip.src.country in {"CN" "RU" "KP"} and ip.dst.asnum == 13335)',
      'or (icmp.type == 8 and ip.len > 1000) or (tcp.flags & 0x29 and tcp.dstport == 80)',
      'or ip.src in $svc.malware or ip.dst in {198.51.100.0/24} or (ip.hdr_len > 5 and ip.opt.type == 130)',
    ].join(' '),
  },
];

// Packets: a realistic mix, mostly not matching (the common case for block rules).
interface Pkt {
  ref: RefPacket;
}
function makePackets(n: number): Pkt[] {
  const out: Pkt[] = [];
  for (let i = 0; i < n; i++) {
    const tcp = rng.chance(0.7);
    const ref: RefPacket = {
      'ip.src': formatIpv4((rng.int(223) + 1) * 2 ** 24 + rng.int(2 ** 24)),
      'ip.dst': formatIpv4((rng.int(223) + 1) * 2 ** 24 + rng.int(2 ** 24)),
      'ip.proto': tcp ? 'tcp' : 'udp',
      'ip.len': 40 + rng.int(1400),
      'ip.hdr_len': 5,
      'ip.ttl': rng.pick([64, 128, 255, 3]),
      'ip.src.country': rng.pick(['US', 'DE', 'GB', 'FR', 'CN', 'JP', 'BR']),
      'ip.dst.country': 'US',
      'ip.dst.asnum': rng.pick([13335, 15169, 16509]),
    };
    if (tcp) {
      ref['tcp.srcport'] = 1024 + rng.int(60000);
      ref['tcp.dstport'] = rng.pick([80, 443, 443, 443, 22, 8080, 3389, 12345]);
      ref['tcp.flags'] = rng.pick([0x02, 0x10, 0x18, 0x12]);
      ref['tcp.flags.syn'] = (ref['tcp.flags'] & 2) !== 0;
      ref['tcp.flags.ack'] = (ref['tcp.flags'] & 16) !== 0;
    } else {
      ref['udp.srcport'] = 1024 + rng.int(60000);
      ref['udp.dstport'] = rng.pick([53, 443, 123, 5000]);
    }
    out.push({ ref });
  }
  return out;
}

function contexts(packets: Pkt[]) {
  return packets.map((p) => {
    const ctx = TRANSIT_SCHEME.newContext();
    for (const [k, v] of Object.entries(p.ref)) {
      const f = TRANSIT_SCHEME.field(k);
      if (f.type === 'int') ctx.setInt(f.slot, v as number);
      else if (f.type === 'ip') ctx.setIp(f.slot, v as string);
      else if (f.type === 'bool') ctx.setBool(f.slot, v as boolean);
      else ctx.setString(f.slot, v as string);
    }
    return ctx;
  });
}

// Hand-written equivalents of two filters: what straight-line code costs.
function handWritten(name: string, packets: Pkt[]): ((i: number) => boolean) | undefined {
  if (name === 'port set 37 + ranges') {
    const set = new Set(ports);
    const vals = packets.map((p) => (p.ref['tcp.dstport'] as number | undefined) ?? NaN);
    return (i) => {
      const v = vals[i]!;
      return set.has(v) || (v >= 6000 && v <= 6063) || (v >= 49152 && v <= 65535);
    };
  }
  if (name === 'country set 18') {
    const set = new Set(countries);
    const vals = packets.map((p) => p.ref['ip.src.country'] as string);
    return (i) => set.has(vals[i]!);
  }
  return undefined;
}

/** Runs the benchmark group and prints its tables. */
export function runExprBench(): void {
  const packets = makePackets(1024);
  const ctxs = contexts(packets);
  const mask = ctxs.length - 1;
  // A 1,000-entry literal set is longer than Cloudflare's 4,096-character limit
  // (such a rule would use a list); the limit is configurable, so raise it here.
  const limits = { maxLength: 1 << 20 };
  const options = { scheme: TRANSIT_SCHEME, lists: new Map(), limits };
  for (const { name, expr } of FILTERS) {
    const figures: Figure[] = [];
    figures.push(measure(`parse`, (n) => { let x = 0; for (let i = 0; i < n; i++) x += parse(expr, { maxLength: 1 << 20, maxDepth: 128 }).span.end; return x; }, { minMs: 100 }));
    figures.push(measure(`check`, (n) => { let x = 0; for (let i = 0; i < n; i++) x += checkExpression(expr, options).fields.length; return x; }, { minMs: 100 }));
    figures.push(measure(`compile`, (n) => { let x = 0; for (let i = 0; i < n; i++) x += compileExpression(expr, options).fields.length; return x; }, { minMs: 100 }));
    const filter: Filter = compileExpression(expr, options);
    const test = filter.test;
    const exec = measure('execute (compiled closures)', (n) => {
      let hits = 0;
      for (let i = 0; i < n; i++) if (test(ctxs[i & mask]!)) hits++;
      return hits;
    });
    figures.push(exec);
    const generated = compileExpression(expr, { ...options, backend: 'codegen' }).test;
    figures.push(measure('execute (generated code)', (n) => {
      let hits = 0;
      for (let i = 0; i < n; i++) if (generated(ctxs[i & mask]!)) hits++;
      return hits;
    }));
    const hand = handWritten(name, packets);
    if (hand !== undefined) {
      figures.push(measure('execute (hand-written JS, reference)', (n) => {
        let hits = 0;
        for (let i = 0; i < n; i++) if (hand(i & mask)) hits++;
        return hits;
      }));
    }
    const ast = parse(expr, { maxLength: 1 << 20, maxDepth: 128 });
    figures.push(measure('execute (naive tree walk, reference)', (n) => {
      let hits = 0;
      for (let i = 0; i < n; i++) if (refEval(ast, packets[i & mask]!.ref)) hits++;
      return hits;
    }, { minMs: 100, rounds: 3 }));
    let hits = 0;
    for (const c of ctxs) if (test(c)) hits++;
    report(`${name} (${expr.length} chars; matches ${hits}/${ctxs.length} packets)`, figures, exec);
  }
}
