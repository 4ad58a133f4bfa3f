// The decoders' hot modules (decode, ip, transport, clear) copy the slot
// numbers and protocol constants they use as module-local literal constants,
// `const TCP_DSTPORT = 7;`: V8 folds those into the optimised code, but loads
// an imported binding (and checks that it is initialised) at every use, even
// one exported as a literal. Measured on the pipeline benchmark's frames, 512
// packets in cache, per packet: clearDecoded 19 -> 10 ns, decode 55 -> 42 ns;
// with engine/packet-path.ts copying its slots too, the whole packet path
// 431 -> 348 ns (alternating in-process A/B, 16 passes, CPU median).
// Each module checks its copies against their sources when it loads, so a
// copy that disagrees (a slot renumbered by a new field) fails at once.

/** Throws unless every copy equals the export of the same name in `source`. */
export function checkCopies(module: string, source: Readonly<Record<string, unknown>>, copies: Readonly<Record<string, number>>): void {
  for (const [name, v] of Object.entries(copies)) {
    if (source[name] !== v) throw new Error(`${module}: the copy of ${name} is ${v}, but it is ${String(source[name])} where it is defined`);
  }
}
