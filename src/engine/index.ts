// Public face of the engine: rulesets as the API returns them, compiled into
// an evaluator with skip/block/log semantics and counters, and the packet path.
//
// Nouns of the engine:
//   bundle          what one data plane enforces: the account and zone rulesets, the lists and GeoIP data they read
//   evaluator       a compiled bundle (evaluator.ts): the generated functions and per-rule counters, immutable otherwise
//   chunk           one generated function of a large bundle's rules, run in order by a driver (code-writer.ts)
//   packet program  a bundle's rules fused with the fast-path decoder: frame in, verdict out (packet-program.ts)
//   address table   the per-address GeoIP and list answers the lazy fields read (net/address-table.ts)
//   loader          builds a bundle's evaluator and address table from its files, and rebuilds on change (load.ts)
//   transfer        a bundle loaded in a worker thread, handed to the packet loop as data (bundle-transfer.ts)
//   packet path     decodes each frame and runs the evaluator or the packet program (packet-path.ts)
// Compile time: compile-bundle.ts (front end) -> code-writer.ts, port-dispatch.ts, packet-program.ts (writers).
// Run time: evaluator.ts, packet-path.ts.
export { parseRuleset, toRuleset, type Rule, type Ruleset, type RuleAction } from './ruleset.js';
export { compileBundle, BundleError, type CompileInput } from './compile-bundle.js';
export { Evaluator, VERDICT_PASS, type CompiledRule, type GeneratedSource, type Level } from './evaluator.js';
export { MAX_FUNCTION_SOURCE } from './code-writer.js';
export { PacketPath, type PacketPathOptions, type UndecodablePolicy } from './packet-path.js';
export { PathCounters, COUNTER_SLOTS } from './path-counters.js';
export { tableLists } from './table-lists.js';
export { BundleLoader, loadBundle, type BundleFiles, type LoadedBundle } from './load.js';
export { missingData, type MissingDataPolicy, type GivenData } from './missing-data.js';
export { FrameInspector, type FrameSummary } from './frame-inspect.js';
export { BundleExporter, BundleImporter, shareBundle, tableIsShared, loadErrorData, loadErrorOf, type TransferredBundle, type LoadErrorData, type MoatErrorData } from './bundle-transfer.js';
