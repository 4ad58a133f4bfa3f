// Test support: runs Wireshark's tshark as an oracle. A private configuration
// directory (WIRESHARK_CONFIG_DIR) holds a profile that disables every protocol
// except frame, eth, ethertype, ip, ipv6, tcp, udp, icmp, icmpv6 and data, so
// port-based dissectors (DNS, VXLAN, Teredo, ...) never add extra ip/tcp layers
// and tshark runs faster. Display filters run as `tshark -n -r file -Y expr
// -T fields -e frame.number`, at most `parallel` processes at a time; a filter
// tshark rejects is a bug in the caller and throws with the filter shown.

import { peerTool } from './tools.js';
import { execFile } from 'node:child_process';

import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BOOL_FIELDS, WS_BOOL, ipFromText, protoName, type FieldValues } from './diff-generator.js';

/** Protocols the differential profile keeps enabled (Wireshark 4.0 has no "disable all but"). */
export const ENABLED_PROTOCOLS: readonly string[] = ['frame', 'eth', 'ethertype', 'ip', 'ipv6', 'tcp', 'udp', 'icmp', 'icmpv6', 'data'];

/**
 * The `preferences` file of a profile: dissection made cheaper without changing
 * any field we filter on (no sequence analysis, reassembly or timestamps), and
 * GeoIP lookups on or off.
 */
export function tsharkPreferences(geoip: boolean): string {
  const prefs = [
    'tcp.analyze_sequence_numbers: FALSE',
    'tcp.calculate_timestamps: FALSE',
    'tcp.desegment_tcp_streams: FALSE',
    'udp.calculate_timestamps: FALSE',
    'ip.defragment: FALSE',
    'ipv6.defragment: FALSE',
    `ip.use_geoip: ${geoip ? 'TRUE' : 'FALSE'}`,
    `ipv6.use_geoip: ${geoip ? 'TRUE' : 'FALSE'}`,
  ];
  return prefs.join('\n') + '\n';
}

/** tshark's warning when run as root; harmless. */
const ROOT_WARNING = /^Running as user "root" and group "root"\. This could be dangerous\.\s*$/;

/** Finds tshark: $TSHARK, else the PATH. */
/** Path of tshark ($TSHARK or PATH); undefined when missing, and under CI=true a missing tshark throws. */
export function findTshark(): string | undefined {
  return peerTool('tshark', 'TSHARK');
}

/** tshark failed or said something unexpected; `expression` is the display filter, if any. */
export class TsharkError extends Error {
  constructor(
    message: string,
    readonly expression: string | undefined,
    readonly stderr: string,
  ) {
    super(message);
    this.name = 'TsharkError';
  }
}

interface RunResult {
  stdout: string;
  stderr: string;
}

function unexpectedStderr(stderr: string): string {
  return stderr
    .split('\n')
    .filter((l) => l.trim() !== '' && !ROOT_WARNING.test(l))
    .join('\n');
}

/** A tshark binary bound to a private configuration directory. */
export class Tshark {
  private constructor(
    readonly path: string,
    readonly configDir: string,
    private readonly parallel: number,
  ) {}

  /**
   * Creates the private profile in `configDir` (created if needed) and returns a runner.
   * @param parallel most tshark processes at once (default 2)
   */
  static async create(path: string, configDir: string, parallel = 2): Promise<Tshark> {
    await mkdir(configDir, { recursive: true });
    const t = new Tshark(path, configDir, parallel);
    const { stdout } = await t.run(['-G', 'protocols'], undefined);
    const keep = new Set(ENABLED_PROTOCOLS);
    const disabled = stdout
      .split('\n')
      .map((line) => line.split('\t')[2]?.trim())
      .filter((name): name is string => !!name && !keep.has(name) && !name.startsWith('_ws.'));
    if (disabled.length < 100) throw new TsharkError(`tshark -G protocols listed only ${disabled.length} protocols`, undefined, '');
    await writeFile(join(configDir, 'disabled_protos'), disabled.join('\n') + '\n');
    await writeFile(join(configDir, 'preferences'), tsharkPreferences(false));
    return t;
  }

  /** tshark's version line, e.g. "TShark (Wireshark) 4.0.17 (...)". */
  async version(): Promise<string> {
    const { stdout } = await this.run(['--version'], undefined);
    return stdout.split('\n')[0] ?? '';
  }

  private run(args: string[], expression: string | undefined): Promise<RunResult> {
    return new Promise((resolve, reject) => {
      execFile(
        this.path,
        args,
        { env: { ...process.env, WIRESHARK_CONFIG_DIR: this.configDir, LC_ALL: 'C' }, maxBuffer: 256 * 1024 * 1024 },
        (err, stdout, stderr) => {
          const extra = unexpectedStderr(stderr);
          if (err || extra) {
            const what = expression === undefined ? `tshark ${args.join(' ')}` : `tshark rejected the display filter\n  ${expression}`;
            reject(new TsharkError(`${what}\n${extra || String(err)}`, expression, stderr));
            return;
          }
          resolve({ stdout, stderr });
        },
      );
    });
  }

  /** 1-based numbers of the frames of `pcap` that match the display filter `expression`. */
  async filter(pcap: string, expression: string): Promise<number[]> {
    const { stdout } = await this.run(['-n', '-r', pcap, '-Y', expression, '-T', 'fields', '-e', 'frame.number'], expression);
    return stdout
      .split('\n')
      .filter((l) => l !== '')
      .map(Number);
  }

  /** Runs every filter, at most `parallel` tshark processes at a time; results in input order. */
  async filterAll(pcap: string, expressions: readonly string[], onDone?: (done: number) => void): Promise<number[][]> {
    const results: number[][] = new Array(expressions.length);
    let next = 0;
    let done = 0;
    let failed = false;
    const worker = async (): Promise<void> => {
      while (next < expressions.length && !failed) {
        const i = next++;
        try {
          results[i] = await this.filter(pcap, expressions[i]!);
        } catch (err) {
          failed = true; // stop the other workers: one rejected filter fails the run
          throw err;
        }
        onDone?.(++done);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.parallel, expressions.length) }, worker));
    return results;
  }

  /**
   * One pass over `pcap` printing the first occurrence of each field per frame
   * (`-T fields -E occurrence=f -E separator=,`). An absent field is ''.
   */
  async fields(pcap: string, fields: readonly string[]): Promise<Array<Map<string, string>>> {
    const args = ['-n', '-r', pcap, '-T', 'fields', '-E', 'occurrence=f', '-E', 'separator=,'];
    for (const f of fields) args.push('-e', f);
    const { stdout } = await this.run(args, undefined);
    return stdout
      .split('\n')
      .filter((l) => l !== '')
      .map((line) => {
        const values = line.split(',');
        if (values.length !== fields.length) throw new TsharkError(`expected ${fields.length} values, got: ${line}`, undefined, '');
        return new Map(fields.map((f, i) => [f, values[i]!]));
      });
  }
}

/** The Wireshark fields from which {@link moatFieldsFromTshark} derives Moat's field values. */
export const EXTRACT_FIELDS: readonly string[] = [
  'frame.number',
  'ip.src',
  'ip.dst',
  'ipv6.src',
  'ipv6.dst',
  'ip.proto',
  'ipv6.nxt',
  'ip.len',
  'ipv6.plen',
  'ip.hdr_len',
  'ip.ttl',
  'ipv6.hlim',
  'tcp.srcport',
  'tcp.dstport',
  'tcp.flags',
  'tcp.flags.fin',
  'tcp.flags.syn',
  'tcp.flags.reset',
  'tcp.flags.push',
  'tcp.flags.ack',
  'tcp.flags.urg',
  'tcp.flags.ece',
  'tcp.flags.cwr',
  'udp.srcport',
  'udp.dstport',
  'icmp.type',
  'icmp.code',
  'icmpv6.type',
  'icmpv6.code',
];

function num(row: ReadonlyMap<string, string>, field: string): number | undefined {
  const text = row.get(field);
  if (text === undefined || text === '') return undefined;
  const n = Number(text); // decimal, or 0x-hex for tcp.flags
  if (!Number.isInteger(n)) throw new Error(`tshark printed ${field}=${JSON.stringify(text)}, not an integer`);
  return n;
}

function flag(row: ReadonlyMap<string, string>, field: string): boolean | undefined {
  const text = row.get(field);
  if (text === undefined || text === '') return undefined;
  if (text === '1' || text === 'True') return true;
  if (text === '0' || text === 'False') return false;
  throw new Error(`tshark printed ${field}=${JSON.stringify(text)}, not a boolean`);
}

/**
 * Moat's field values for one frame, derived from a row of {@link EXTRACT_FIELDS}
 * with the decisions of the README (The rules language): ip.ttl is the hop limit on IPv6, ip.len
 * is 40 + payload length on IPv6, ip.hdr_len is in 32-bit words (absent on IPv6),
 * ip.proto is a keyword, icmp.* covers ICMPv6, tcp.flags is the 8-bit byte.
 * Fields absent from the frame are absent from the result.
 */
export function moatFieldsFromTshark(row: ReadonlyMap<string, string>): FieldValues {
  const f: FieldValues = {};
  const set = <K extends keyof FieldValues>(k: K, v: FieldValues[K] | undefined): void => {
    if (v !== undefined) f[k] = v;
  };
  if (row.get('ip.src')) {
    f['ip.src'] = ipFromText(row.get('ip.src')!);
    f['ip.dst'] = ipFromText(row.get('ip.dst')!);
    const proto = num(row, 'ip.proto');
    set('ip.proto', proto === undefined ? undefined : protoName(proto));
    set('ip.len', num(row, 'ip.len'));
    const hdrBytes = num(row, 'ip.hdr_len');
    set('ip.hdr_len', hdrBytes === undefined ? undefined : hdrBytes / 4);
    set('ip.ttl', num(row, 'ip.ttl'));
  } else if (row.get('ipv6.src')) {
    f['ip.src'] = ipFromText(row.get('ipv6.src')!);
    f['ip.dst'] = ipFromText(row.get('ipv6.dst')!);
    const next = num(row, 'ipv6.nxt');
    set('ip.proto', next === undefined ? undefined : protoName(next));
    const plen = num(row, 'ipv6.plen');
    set('ip.len', plen === undefined ? undefined : 40 + plen);
    set('ip.ttl', num(row, 'ipv6.hlim'));
  }
  set('tcp.srcport', num(row, 'tcp.srcport'));
  set('tcp.dstport', num(row, 'tcp.dstport'));
  const flags = num(row, 'tcp.flags');
  set('tcp.flags', flags === undefined ? undefined : flags & 0xff);
  for (const b of BOOL_FIELDS) set(b, flag(row, WS_BOOL[b]));
  set('udp.srcport', num(row, 'udp.srcport'));
  set('udp.dstport', num(row, 'udp.dstport'));
  set('icmp.type', num(row, 'icmp.type') ?? num(row, 'icmpv6.type'));
  set('icmp.code', num(row, 'icmp.code') ?? num(row, 'icmpv6.code'));
  return f;
}
