// Differential test of the expression engine against Wireshark's tshark.
//
// A seeded generator builds >= 3,000 varied packets, written to a pcap with
// Moat's pcap writer, and >= 300 random expressions over the subset of the rules
// language Wireshark can express, each printed twice: Cloudflare syntax for
// Moat and an equivalent Wireshark 4.0 display filter (the translation of
// shared/reference/expression-language.md §3.2). Until Moat has its own packet
// decoder the engine is fed the field values tshark extracts in one pass. For
// every expression, the frames where Moat's filter is true must be exactly the
// frames tshark's display filter selects. A reference model of the contract's
// semantics is checked against tshark as well, which tells a translation bug
// (model and Moat agree, tshark differs) from an engine bug (model and tshark
// agree, Moat differs).
//
// Replay a failure: MOAT_DIFF_SEED=<seed> npx vitest run test/expr/tshark-differential.test.ts
// Other knobs: MOAT_DIFF_EXPRESSIONS (default 300), MOAT_DIFF_PACKETS (default 3000),
// MOAT_DIFF_KEEP=1 keeps the temporary directory (pcap, profile).
// Without tshark the test is skipped, except on CI (CI=true) where it fails.

import { randomInt } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPcapFile } from '../../src/capture/index.js';
import { compileExpression, renderError, type Filter } from '../../src/expr/index.js';
import { MoatError } from '../../src/errors/index.js';
import { FULL_PLAN, LINKTYPE, PacketInfo, TRANSIT_SCHEME, decode } from '../../src/packet/index.js';
import {
  BOOL_FIELDS,
  CfPrinter,
  INT_FIELDS,
  IP_FIELDS,
  Rng,
  evaluate,
  exprSize,
  generateCases,
  generatePackets,
  ipFromText,
  ipToText,
  printWireshark,
  shrinkCandidates,
  type DiffCase,
  type Expr,
  type FieldValues,
  type GeneratedPacket,
} from '../support/diff-generator.js';
import { readContext } from '../support/read-context.js';
import { EXTRACT_FIELDS, Tshark, findTshark, moatFieldsFromTshark } from '../support/tshark.js';

const TSHARK = findTshark();
const SEED = process.env.MOAT_DIFF_SEED ? Number(process.env.MOAT_DIFF_SEED) >>> 0 : randomInt(2 ** 32);
const PACKET_COUNT = Number(process.env.MOAT_DIFF_PACKETS ?? 3000);
const EXPRESSION_COUNT = Number(process.env.MOAT_DIFF_EXPRESSIONS ?? 300);
const PARALLEL = 2;
/** tshark runs allowed for shrinking one failing expression. */
const SHRINK_BUDGET = 60;
/** Failing expressions to shrink and report in detail. */
const REPORT_LIMIT = 3;

const SETUP_TIMEOUT = 360_000;
const TEST_TIMEOUT = 120_000;

const replayHint = `replay with MOAT_DIFF_SEED=${SEED} npx vitest run test/expr/tshark-differential.test.ts`;

/** Field values as one readable line, keys sorted. */
function showFields(f: FieldValues): string {
  return Object.entries(f)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${typeof v === 'object' ? ipToText(v) : String(v)}`)
    .join(' ');
}

/** Sets one frame's values into the context, per the README (The rules language); absent fields stay unset. */
class ContextLoader {
  private readonly ctx = TRANSIT_SCHEME.newContext();
  private readonly slot = (name: string): number => TRANSIT_SCHEME.field(name).slot;
  private readonly ints = INT_FIELDS.map((f) => [f, this.slot(f)] as const);
  private readonly ips = IP_FIELDS.map((f) => [f, this.slot(f)] as const);
  private readonly bools = BOOL_FIELDS.map((f) => [f, this.slot(f)] as const);
  private readonly proto = this.slot('ip.proto');

  load(f: FieldValues): typeof this.ctx {
    const ctx = this.ctx;
    ctx.reset();
    for (const [name, slot] of this.ints) {
      const v = f[name];
      if (v !== undefined) ctx.setInt(slot, v);
    }
    for (const [name, slot] of this.ips) {
      const v = f[name];
      if (v !== undefined) ctx.setIp(slot, ipToText(v));
    }
    for (const [name, slot] of this.bools) {
      const v = f[name];
      if (v !== undefined) ctx.setBool(slot, v);
    }
    if (f['ip.proto'] !== undefined) ctx.setString(this.proto, f['ip.proto']);
    return ctx;
  }
}

/** Compiles a Cloudflare expression, turning a compile error into a readable one. */
function compile(cf: string): Filter {
  try {
    return compileExpression(cf, { scheme: TRANSIT_SCHEME });
  } catch (err) {
    const detail = err instanceof MoatError ? renderError(cf, err) : String(err);
    throw new Error(`Moat rejected a generated expression:\n  ${JSON.stringify(cf)}\n${detail}\n${replayHint}`, { cause: err });
  }
}

/** 1-based frames where each filter is true; one context, reset per frame. */
function moatFrames(filters: readonly Filter[], frames: readonly FieldValues[]): number[][] {
  const loader = new ContextLoader();
  const out = filters.map((): number[] => []);
  frames.forEach((f, i) => {
    const ctx = loader.load(f);
    for (let j = 0; j < filters.length; j++) if (filters[j]!.execute(ctx)) out[j]!.push(i + 1);
  });
  return out;
}

function symmetricDifference(a: readonly number[], b: readonly number[]): number[] {
  const sa = new Set(a);
  const sb = new Set(b);
  return [...new Set([...a, ...b])].filter((x) => sa.has(x) !== sb.has(x)).sort((x, y) => x - y);
}

interface State {
  dir: string;
  pcap: string;
  tshark: Tshark;
  tsharkVersion: string;
  packets: GeneratedPacket[];
  rawFlags: Array<string | undefined>;
  frames: FieldValues[];
  cases: DiffCase[];
  attempts: number;
  droppedTrivial: number;
  tsharkFrames: number[][];
  failed: boolean;
}

describe.runIf(!!TSHARK)(`Moat against tshark (seed ${SEED})`, () => {
  const s = {} as State;

  beforeAll(async () => {
    const started = Date.now();
    console.log(`tshark differential: seed ${SEED} (${replayHint})`);
    s.failed = false;
    s.dir = mkdtempSync(join(tmpdir(), 'moat-tshark-diff-'));
    s.pcap = join(s.dir, 'packets.pcap');
    s.tshark = await Tshark.create(TSHARK!, join(s.dir, 'wireshark'), PARALLEL);
    s.tsharkVersion = await s.tshark.version();

    const rng = new Rng(SEED);
    s.packets = generatePackets(rng.fork(), PACKET_COUNT);
    const writer = openPcapFile(s.pcap, { resolution: 'us' });
    s.packets.forEach((p, i) => writer.writePacket(p.frame, 1_700_000_000 + Math.floor(i / 1000), (i % 1000) * 1_000_000));
    writer.close();

    const rows = await s.tshark.fields(s.pcap, EXTRACT_FIELDS);
    s.rawFlags = rows.map((r) => r.get('tcp.flags') || undefined);
    s.frames = rows.map(moatFieldsFromTshark);

    const gen = generateCases(rng.fork(), s.frames, EXPRESSION_COUNT);
    s.cases = gen.cases;
    s.attempts = gen.attempts;
    s.droppedTrivial = gen.droppedTrivial;
    s.tsharkFrames = await s.tshark.filterAll(
      s.pcap,
      s.cases.map((c) => c.ws),
    );
    console.log(
      `tshark differential: ${s.packets.length} packets, ${s.cases.length} expressions ` +
        `(${s.attempts} generated, ${s.droppedTrivial} dropped as 0%/100%); setup ${((Date.now() - started) / 1000).toFixed(1)} s; ${s.tsharkVersion}`,
    );
  }, SETUP_TIMEOUT);

  afterAll(() => {
    if (!s.dir) return;
    if (s.failed || process.env.MOAT_DIFF_KEEP) console.log(`tshark differential: files kept in ${s.dir}`);
    else rmSync(s.dir, { recursive: true, force: true });
  });

  it(
    'tshark decodes every generated packet to the field values the generator intended',
    () => {
      expect(s.frames.length).toBe(s.packets.length);
      const wrong: string[] = [];
      s.frames.forEach((f, i) => {
        const intended = s.packets[i]!.fields;
        if (showFields(f) !== showFields(intended)) {
          wrong.push(`frame ${i + 1}\n  tshark:   ${showFields(f)}\n  intended: ${showFields(intended)}`);
        }
        // The translation compares Wireshark's 12-bit tcp.flags directly: NS must be clear.
        const raw = s.rawFlags[i];
        if (raw !== undefined && Number(raw) > 0xff) wrong.push(`frame ${i + 1}: tcp.flags ${raw} has bits above the flags byte`);
      });
      if (wrong.length > 0) s.failed = true;
      expect(wrong.slice(0, 10), `${wrong.length} frames decoded differently (seed ${SEED})`).toEqual([]);
    },
    TEST_TIMEOUT,
  );

  it(
    "Moat's own decoder reads every generated packet to the same field values as tshark",
    () => {
      // Not the engine's input (that stays tshark's values), but a cheap second oracle for the decoder.
      const ctx = TRANSIT_SCHEME.newContext();
      const info = new PacketInfo();
      const subset = new Set<string>([...INT_FIELDS, ...IP_FIELDS, ...BOOL_FIELDS, 'ip.proto']);
      const wrong: string[] = [];
      s.packets.forEach((p, i) => {
        ctx.reset();
        info.reset();
        decode(p.frame, 0, p.frame.length, LINKTYPE.ETHERNET, ctx, info, FULL_PLAN);
        const decoded: Record<string, unknown> = {};
        for (const [k, v] of Object.entries(readContext(ctx))) {
          if (!subset.has(k)) continue;
          decoded[k] = (IP_FIELDS as readonly string[]).includes(k) ? ipFromText(String(v)) : v;
        }
        // readContext lists only true booleans; an absent bool reads as false.
        const fromTshark = Object.fromEntries(Object.entries(s.frames[i]!).filter(([, v]) => v !== false));
        const a = showFields(decoded as FieldValues);
        const b = showFields(fromTshark as FieldValues);
        if (a !== b) wrong.push(`frame ${i + 1}\n  moat:   ${a}\n  tshark: ${b}`);
      });
      if (wrong.length > 0) s.failed = true;
      expect(wrong.slice(0, 10), `${wrong.length} frames decoded differently by Moat and tshark (seed ${SEED})`).toEqual([]);
    },
    TEST_TIMEOUT,
  );

  it(
    `generates at least ${EXPRESSION_COUNT} expressions, each matching some but not all packets in tshark`,
    () => {
      expect(s.cases.length).toBeGreaterThanOrEqual(EXPRESSION_COUNT);
      const trivial = s.cases
        .filter((_, i) => s.tsharkFrames[i]!.length === 0 || s.tsharkFrames[i]!.length === s.frames.length)
        .map((c) => `${c.cf}  =>  ${c.ws}`);
      expect(trivial, `expressions tshark matched on 0% or 100% of packets (seed ${SEED})`).toEqual([]);
    },
    TEST_TIMEOUT,
  );

  it(
    'tshark agrees with the reference model of the contract on every expression',
    () => {
      const bad: string[] = [];
      s.cases.forEach((c, i) => {
        const diff = symmetricDifference(c.modelFrames, s.tsharkFrames[i]!);
        if (diff.length === 0) return;
        const frames = diff.slice(0, 10).map((n) => `    frame ${n}: tshark=${s.tsharkFrames[i]!.includes(n)} ${showFields(s.frames[n - 1]!)}`);
        bad.push(`#${c.index} ${JSON.stringify(c.cf)}\n  wireshark: ${c.ws}\n  ${diff.length} frames differ:\n${frames.join('\n')}`);
      });
      if (bad.length > 0) {
        s.failed = true;
        console.error(`model/tshark disagreements (a translation bug), seed ${SEED}:\n${bad.slice(0, 10).join('\n')}\n${replayHint}`);
      }
      expect(bad.length, `expressions where the model and tshark disagree (seed ${SEED})`).toBe(0);
    },
    TEST_TIMEOUT,
  );

  it(
    'Moat matches exactly the frames tshark matches, for every expression and every packet',
    async () => {
      const filters = s.cases.map((c) => compile(c.cf));
      const moat = moatFrames(filters, s.frames);
      const failing = s.cases
        .map((c, i) => ({ c, i, diff: symmetricDifference(moat[i]!, s.tsharkFrames[i]!) }))
        .filter((x) => x.diff.length > 0);
      if (failing.length === 0) return;
      s.failed = true;

      const reports: string[] = [];
      for (const { c, i, diff } of failing.slice(0, REPORT_LIMIT)) {
        const moatSet = new Set(moat[i]!);
        const lines = diff.slice(0, 10).map((n) => {
          const f = s.frames[n - 1]!;
          return `    frame ${n}: moat=${moatSet.has(n)} tshark=${!moatSet.has(n)} model=${evaluate(c.expr, f)}  ${showFields(f)}`;
        });
        const shrunk = await shrink(s, c.expr, s.tsharkFrames[i]!, moat[i]!);
        reports.push(
          [
            `#${c.index}: ${diff.length} of ${s.frames.length} frames differ (moat ${moat[i]!.length}, tshark ${s.tsharkFrames[i]!.length})`,
            `  cloudflare: ${JSON.stringify(c.cf)}`,
            `  wireshark:  ${c.ws}`,
            ...lines,
            shrunk,
          ].join('\n'),
        );
      }
      const message = [
        `Moat and tshark disagree on ${failing.length} of ${s.cases.length} expressions (seed ${SEED}).`,
        `"model" is the reference model of the README (The rules language): model=tshark points at the engine, model=moat at the translation.`,
        ...reports,
        replayHint,
      ].join('\n\n');
      expect.fail(message);
    },
    SETUP_TIMEOUT,
  );
});

/**
 * Greedily shrinks a failing expression: keeps replacing it by a smaller candidate
 * on which Moat and tshark still disagree. Moat is cheap, tshark costs a process
 * per candidate, so at most SHRINK_BUDGET tshark runs are spent.
 */
async function shrink(s: State, expr: Expr, tsharkFrames: number[], moatFramesOf: number[]): Promise<string> {
  const printer = new CfPrinter(new Rng(SEED));
  let current = expr;
  let currentDiff = symmetricDifference(moatFramesOf, tsharkFrames);
  let budget = SHRINK_BUDGET;
  let progress = true;
  // When the model agrees with tshark on the original, a candidate where Moat agrees
  // with the model cannot fail, and checking that costs no tshark run.
  const modelOf = (e: Expr): number[] => s.frames.flatMap((f, i) => (evaluate(e, f) ? [i + 1] : []));
  const modelIsOracle = symmetricDifference(modelOf(expr), tsharkFrames).length === 0;
  while (progress && budget > 0) {
    progress = false;
    for (const candidate of shrinkCandidates(current)) {
      if (budget <= 0) break;
      let cf: string;
      let filter: Filter;
      try {
        cf = printer.print(candidate);
        filter = compile(cf);
      } catch {
        continue;
      }
      const moat = moatFrames([filter], s.frames)[0]!;
      if (modelIsOracle && symmetricDifference(moat, modelOf(candidate)).length === 0) continue;
      budget--;
      let ts: number[];
      try {
        ts = await s.tshark.filter(s.pcap, printWireshark(candidate));
      } catch {
        continue;
      }
      const diff = symmetricDifference(moat, ts);
      if (diff.length > 0) {
        current = candidate;
        currentDiff = diff;
        progress = true;
        break;
      }
    }
  }
  if (current === expr) return '  (no smaller failing expression found)';
  const cf = printer.print(current);
  const moatSet = new Set(moatFrames([compile(cf)], s.frames)[0]!);
  const lines = currentDiff.slice(0, 10).map((n) => {
    const f = s.frames[n - 1]!;
    return `      frame ${n}: moat=${moatSet.has(n)} tshark=${!moatSet.has(n)} model=${evaluate(current, f)}  ${showFields(f)}`;
  });
  return [
    `  shrunk (size ${exprSize(expr)} -> ${exprSize(current)}):`,
    `    cloudflare: ${JSON.stringify(cf)}`,
    `    wireshark:  ${printWireshark(current)}`,
    ...lines,
  ].join('\n');
}
