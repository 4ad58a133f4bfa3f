// The rules' code of one generated function before it is written out: lines
// whose field reads are holes (expr's renderCode), each with the marker of
// the rules it holds, and what the lines read besides fields. The code writer
// and the packet program writer render it, reading fields once into locals.

import { contextRead, renderCode, type FieldRead } from '../expr/index.js';
import { TRANSIT_SCHEME } from '../packet/index.js';

/** One line of a function's rules: a template (field reads as holes) and its marker comment, or '' for none. */
export interface BodyLine {
  readonly marker: string;
  readonly template: string;
}

/** The rules of one generated function. */
export interface FunctionBody {
  readonly lines: readonly BodyLine[];
  /** Some line calls a closure over the whole context (GeneratedCode.readsContext). */
  readonly readsContext: boolean;
  /** Some line reads IPv6 address words or lazy groups (GeneratedCode.readsAddresses). */
  readonly readsAddresses: boolean;
}

/** A field local of the rules' code: `i_7` is I[7], and so on. */
export interface FieldLocal extends FieldRead {
  readonly local: string;
}

// Int slots of lazy fields (see ExecutionContext.pending): read where the
// generated code has resolved them, never ahead.
const LAZY_INT_SLOTS: ReadonlySet<number> = new Set(
  TRANSIT_SCHEME.fields.filter((f) => f.lazy >= 0 && f.type === 'int').map((f) => f.slot),
);

/** Whether a read stays a read of the context where it is (a lazy int), rather than a local. */
export function staysInContext(r: FieldRead): boolean {
  return r.array === 'I' && LAZY_INT_SLOTS.has(r.slot);
}

/** The local a hoisted read is written as: `i_7` for I[7], `a4_2` for A4[2]. */
export function localName(r: FieldRead): string {
  return `${r.array.toLowerCase()}_${r.slot}`;
}

/** The source of `body`, each field read written by `read`, and its size without the markers (what the size limits count). */
export function renderBody(body: FunctionBody, read: (r: FieldRead) => string): { source: string; size: number } {
  let size = 0;
  const out: string[] = [];
  for (const line of body.lines) {
    const text = renderCode(line.template, read);
    size += text.length;
    out.push(line.marker === '' ? text : `${line.marker} ${text}`);
  }
  return { source: out.join('\n'), size: size + Math.max(0, out.length - 1) };
}

/**
 * `body` with each field it reads read once, into a local, instead of at
 * every use: the rules of a function read the same few fields (ports,
 * protocol, flags) many times. Returns the locals in the order of their first
 * read and the rendered body. Lazy fields keep their reads in place: they are
 * valid only once resolved.
 */
export function hoistFieldLoads(body: FunctionBody): { locals: FieldLocal[]; source: string; size: number } {
  const locals: FieldLocal[] = [];
  const seen = new Set<string>();
  const rendered = renderBody(body, (r) => {
    if (staysInContext(r)) return contextRead(r);
    const local = localName(r);
    if (!seen.has(local)) {
      seen.add(local);
      locals.push({ local, array: r.array, slot: r.slot });
    }
    return local;
  });
  return { locals, ...rendered };
}
