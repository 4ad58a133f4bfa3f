// Literal copies: the decoders' hot modules (decode, ip, transport, fast, clear)
// and the engine's packet path copy the slot numbers, header offsets and
// protocol constants they use as module-local literal constants,
// `const TCP_DSTPORT = 7;`: V8 folds those into the optimised code, but loads
// an imported binding (and checks that it is initialised) at every use, even
// one exported as a literal (measured: bench/pipeline.bench.ts). Each module
// checks its copies against their sources when it loads, so a copy that
// disagrees (a slot renumbered by a new field) fails at once.

/** Throws unless every copy equals the export of the same name in `source`. */
export function checkCopies(module: string, source: Readonly<Record<string, unknown>>, copies: Readonly<Record<string, number>>): void {
  for (const [name, v] of Object.entries(copies)) {
    if (source[name] !== v) throw new Error(`${module}: the copy of ${name} is ${v}, but it is ${String(source[name])} where it is defined`);
  }
}

/**
 * `source` with `prefix` before every name: the source of copies named
 * otherwise than their originals, where two sources share a name (the slot
 * TCP_DSTPORT and the header offset TCP_DSTPORT, copied as AT_TCP_DSTPORT).
 */
export function prefixed(prefix: string, source: Readonly<Record<string, unknown>>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(source).map(([k, v]) => [prefix + k, v]));
}
