// `moat replay`: run capture files through the packet path (decode, GeoIP and
// lists, the network_transit rulesets) and report, and optionally write, what
// passed and what was dropped.

import { closeSync, openSync, statSync, writeSync } from 'node:fs';
import type { Command } from 'commander';
import { PacketBatch, PcapReader, PcapWriter, fdSink } from '../../capture/index.js';
import { BundleError, loadBundle, PacketPath, type Evaluator, type UndecodablePolicy } from '../../engine/index.js';
import { MoatError, quoteInput } from '../../errors/index.js';
import { CliError, formatWarning, reportError, type Output } from '../output.js';

interface ReplayFlags {
  rules: string[];
  managed: string[];
  list: string[];
  geoip?: string;
  asn?: string;
  pass?: string;
  drop?: string;
  verdicts?: string;
  json?: boolean;
  coloName?: string;
  coloRegion?: string;
  undecodable: string;
  progress: boolean;
  strict?: boolean;
}

const collect = (v: string, all: string[]): string[] => [...all, v];

/** Registers `moat replay` on the program. */
export function registerReplay(program: Command, out: Output): void {
  program
    .command('replay')
    .description('judge the packets of pcap/pcapng files with network_transit rulesets and report the verdicts')
    .argument('<capture...>', 'pcap or pcapng files, read in order')
    .requiredOption('--rules <file>', 'ruleset JSON as the API returns it (object or v4 envelope); give it twice for account then zone', collect, [])
    .option('--managed <file>', 'a managed ruleset (JSON with its id) that execute rules of the rulesets run (repeatable)', collect, [])
    .option('--list <name=file>', 'contents of a list: svc.malware=file, office_blocklist=file (repeatable)', collect, [])
    .option('--geoip <file>', 'country database (MaxMind DB: GeoLite2/GeoIP2 Country or City, DB-IP country)')
    .option('--asn <file>', 'AS number database (MaxMind DB: GeoLite2 ASN, DB-IP ASN)')
    .option('--pass <file>', 'write the packets that pass to this pcap file')
    .option('--drop <file>', 'write the dropped packets to this pcap file')
    .option('--verdicts <file>', 'write one JSON line per packet with its verdict and rule')
    .option('--json', 'print the summary as JSON')
    .option('--colo-name <name>', 'value of cf.colo.name')
    .option('--colo-region <region>', 'value of cf.colo.region')
    .option('--undecodable <policy>', 'what to do with frames whose IP header cannot be read: pass or drop', 'pass')
    .option('--no-progress', 'no progress bar on a terminal')
    .option('--strict', 'a rule reading a country or AS number with no --geoip/--asn, or a list with no --list, is an error (code 5011), not a warning')
    .action((captures: string[], flags: ReplayFlags) => replay(captures, flags, out));
}

function replay(captures: string[], flags: ReplayFlags, out: Output): void {
  if (flags.rules.length > 2) throw new CliError('--rules takes one or two files: the account entrypoint, then the zone entrypoint');
  if (flags.undecodable !== 'pass' && flags.undecodable !== 'drop') throw new CliError('--undecodable is pass or drop');
  const lists = flags.list.map((spec) => {
    const eq = spec.indexOf('=');
    if (eq <= 0 || eq === spec.length - 1) throw new CliError(`--list takes name=file, not ${quoteInput(spec)}`);
    return { name: spec.slice(0, eq), file: spec.slice(eq + 1) };
  });
  let loaded;
  try {
    loaded = loadBundle({ rules: flags.rules, lists, geoip: flags.geoip, asn: flags.asn, managed: flags.managed, missingData: flags.strict === true ? 'error' : 'warn' });
  } catch (err) {
    if (err instanceof BundleError && reportError(out, err)) return;
    throw err;
  }
  for (const e of loaded.missing) out.stderr(formatWarning(e));
  const path = new PacketPath(loaded.evaluator, {
    table: loaded.table,
    colo: { name: flags.coloName, region: flags.coloRegion },
    undecodable: flags.undecodable as UndecodablePolicy,
  });
  const sinks = new Outputs(flags);
  const batch = new PacketBatch();
  const totalBytes = captures.reduce((n, f) => n + fileSize(f), 0);
  const progress = flags.progress && flags.json !== true ? out.progress : undefined;
  let doneBytes = 0;
  let failure: MoatError | undefined;
  const started = process.hrtime.bigint();
  // Counted in the time below: it is part of what a replay costs (~5 ms for 50 rules).
  path.warmUp();
  let lastDraw = 0;
  try {
    for (const file of captures) {
      const reader = PcapReader.open(file);
      sinks.linkType ??= reader.linkType;
      let index = 0;
      try {
        // Packets a batch at a time (see PcapReader.nextBatch).
        for (let n = reader.nextBatch(batch); n > 0; n = reader.nextBatch(batch)) {
          const data = reader.data;
          const linkType = reader.linkType;
          for (let k = 0; k < n; k++) {
            index++;
            const dropped = path.process(data, batch.offsets[k]!, batch.caplens[k]!, batch.origLens[k]!, linkType);
            sinks.record(batch, k, data, linkType, dropped, path, file, index);
          }
          // Check the clock every 64k packets or so only: hrtime costs more than a packet.
          if (progress !== undefined && (index & 0xffff) < n) {
            const now = Date.now();
            if (now - lastDraw > 200) {
              lastDraw = now;
              progress(bar(doneBytes + reader.fileOffset, totalBytes, path.counters.packets));
            }
          }
        }
      } finally {
        doneBytes += fileSize(file);
        reader.close();
      }
    }
  } catch (err) {
    if (!(err instanceof MoatError)) throw err;
    failure = err;
  } finally {
    sinks.close();
    if (progress !== undefined) progress('');
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const summary = summarize(captures, path, loaded.evaluator, seconds);
  if (flags.json === true) out.stdout(JSON.stringify(summary, null, 2));
  else for (const line of renderSummary(summary)) out.stdout(line);
  if (failure !== undefined) {
    reportError(out, failure);
  }
}

function fileSize(f: string): number {
  try {
    return statSync(f).size;
  } catch {
    return 0;
  }
}

function bar(done: number, total: number, packets: number): string {
  const frac = total > 0 ? Math.min(1, done / total) : 0;
  const width = 30;
  const filled = Math.round(frac * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(frac * 100).toFixed(0).padStart(3)}%  ${packets.toLocaleString('en-US')} packets`;
}

// The files a replay writes: pass and drop pcaps, and verdict lines.
class Outputs {
  private pass: PcapWriter | undefined;
  private drop: PcapWriter | undefined;
  private readonly verdictFd: number | undefined;
  private lines: string[] = [];
  private frame = 0;
  /** The link type of the first capture read: that of a --pass/--drop file no packet went to. */
  linkType: number | undefined;

  constructor(private readonly flags: ReplayFlags) {
    this.verdictFd = flags.verdicts === undefined ? undefined : openOut(flags.verdicts);
  }

  // Packet k of the batch, whose bytes are in `data`.
  record(batch: PacketBatch, k: number, data: Uint8Array, linkType: number, dropped: boolean, path: PacketPath, file: string, index: number): void {
    this.frame++;
    const target = dropped ? this.flags.drop : this.flags.pass;
    if (target !== undefined) {
      let w = dropped ? this.drop : this.pass;
      w ??= this.open(dropped ? 'drop' : 'pass', linkType);
      if (w.linkType !== linkType) {
        throw new MoatError('CAPTURE_WRITE', `${target}: packet ${index} of ${file} has link type ${linkType}, but the file was started with link type ${w.linkType}`, { file: target });
      }
      const at = batch.offsets[k]!;
      w.writePacket(data.subarray(at, at + batch.caplens[k]!), Math.max(0, batch.tsSec[k]!), Math.max(0, batch.tsNsec[k]!), batch.origLens[k]!);
    }
    if (this.verdictFd !== undefined) {
      const ev = path.evaluator;
      const rule = path.lastRule >= 0 ? ev.rules[path.lastRule]! : undefined;
      const logged = [];
      for (let i = 0; i < ev.loggedCount; i++) logged.push(ruleRef(ev, ev.logged[i]!));
      this.lines.push(
        JSON.stringify({
          frame: this.frame,
          file,
          index,
          verdict: dropped ? 'drop' : 'pass',
          ...(rule === undefined ? {} : { rule: ruleRef(ev, path.lastRule), ruleset: rule.level }),
          ...(logged.length > 0 ? { logged } : {}),
        }),
      );
      if (this.lines.length >= 4096) this.flushLines();
    }
  }

  private flushLines(): void {
    if (this.verdictFd === undefined || this.lines.length === 0) return;
    writeSync(this.verdictFd, this.lines.join('\n') + '\n');
    this.lines = [];
  }

  private open(which: 'pass' | 'drop', linkType: number): PcapWriter {
    const w = new PcapWriter(fdSink(openOut(this.flags[which]!), true, this.flags[which]!), { linkType, resolution: 'ns' });
    if (which === 'drop') this.drop = w;
    else this.pass = w;
    return w;
  }

  close(): void {
    this.flushLines();
    if (this.verdictFd !== undefined) closeSync(this.verdictFd);
    // A file no packet went to is still written, header only, as tcpdump does: scripts can open it.
    // Ethernet when no capture could even be opened.
    for (const which of ['pass', 'drop'] as const) {
      if (this.flags[which] !== undefined && this[which] === undefined) this.open(which, this.linkType ?? 1);
    }
    this.pass?.close();
    this.drop?.close();
  }
}

function openOut(file: string): number {
  try {
    return openSync(file, 'w');
  } catch (err) {
    throw new MoatError('CAPTURE_WRITE', `${file}: cannot write: ${(err as NodeJS.ErrnoException).code ?? String(err)}`, { file, cause: err });
  }
}

// A rule's id when it has one, else "account#3".
function ruleRef(ev: Evaluator, i: number): string {
  const r = ev.rules[i]!;
  return r.rule.id ?? `${r.level}#${r.index}`;
}

/** The summary of a replay (`--json` prints it as is). */
export interface Summary {
  files: string[];
  packets: number;
  bytes: number;
  passed: { packets: number; bytes: number };
  dropped: { packets: number; bytes: number };
  undecodable: { packets: number; bytes: number };
  notIp: number;
  damaged: number;
  fragments: number;
  seconds: number;
  packetsPerSecond: number;
  rules: Array<{ ruleset: string; index: number; id: string | null; action: string; enabled: boolean; description: string | null; packets: number; bytes: number }>;
}

function summarize(files: string[], path: PacketPath, ev: Evaluator, seconds: number): Summary {
  const c = path.counters;
  return {
    files,
    packets: c.packets,
    bytes: c.bytes,
    passed: { packets: c.passed, bytes: c.passedBytes },
    dropped: { packets: c.dropped, bytes: c.droppedBytes },
    undecodable: { packets: c.undecodable, bytes: c.undecodableBytes },
    notIp: c.notIp,
    damaged: c.damaged,
    fragments: c.fragments,
    seconds,
    packetsPerSecond: seconds > 0 ? c.packets / seconds : 0,
    rules: ev.rules.map((r, i) => ({
      ruleset: r.level,
      index: r.index,
      id: r.rule.id ?? null,
      action: r.rule.action,
      enabled: r.rule.enabled,
      description: r.rule.description ?? null,
      packets: ev.hitPackets[i]!,
      bytes: ev.hitBytes[i]!,
    })),
  };
}

function n(v: number): string {
  return v.toLocaleString('en-US');
}

/** Below either, a packets-per-second figure measures start-up, not the packet path: it is not printed. */
const RATE_MIN_SECONDS = 0.1;
const RATE_MIN_PACKETS = 1000;

/** The summary as text: aligned columns; a rate only for captures big enough to measure one. */
export function renderSummary(s: Summary): string[] {
  const rate = s.seconds >= RATE_MIN_SECONDS && s.packets >= RATE_MIN_PACKETS ? ` (${n(Math.round(s.packetsPerSecond))} packets/s)` : '';
  const rows: Array<[string, number, number]> = [
    ['passed', s.passed.packets, s.passed.bytes],
    ['dropped', s.dropped.packets, s.dropped.bytes],
    ['undecodable', s.undecodable.packets, s.undecodable.bytes],
  ];
  const ruleRows: Array<[string, number, number]> = s.rules.map((r) => {
    const description = r.description?.trim() ?? '';
    const name = `${r.ruleset}#${r.index}${r.id ? ` ${r.id}` : ''} ${r.action}${r.enabled ? '' : ' (disabled)'}${description === '' ? '' : ` "${description}"`}`;
    return [name, r.packets, r.bytes];
  });
  // One column layout for the totals and the rules: the widest label and count set it.
  const all = [...rows, ...ruleRows];
  const label = Math.max(...all.map((r) => r[0].length));
  const packets = Math.max(...all.map((r) => n(r[1]).length));
  const bytes = Math.max(...all.map((r) => n(r[2]).length));
  const row = ([name, p, b]: [string, number, number]) => `  ${name.padEnd(label)}  ${n(p).padStart(packets)} packets  ${n(b).padStart(bytes)} bytes`;
  return [
    `${n(s.packets)} packets, ${n(s.bytes)} bytes from ${s.files.length} file${s.files.length === 1 ? '' : 's'} in ${s.seconds.toFixed(2)} s${rate}`,
    ...rows.map(row),
    `  (not IP, passed: ${n(s.notIp)}; damaged but judged: ${n(s.damaged)}; non-first fragments: ${n(s.fragments)})`,
    ...(ruleRows.length === 0 ? [] : ['rule hits:', ...ruleRows.map(row)]),
  ];
}
