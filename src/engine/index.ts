// Public face of the engine: rulesets as the API returns them, and bundles
// compiled into an evaluator with skip/block/log semantics and counters.
export { parseRuleset, toRuleset, type Rule, type Ruleset, type RuleAction } from './ruleset.js';
export { compileBundle, BundleError, Evaluator, MAX_FUNCTION_SOURCE, VERDICT_PASS, type BundleInput, type CompiledRule, type Level } from './bundle.js';
export { PacketPath, type PacketPathOptions, type UndecodablePolicy } from './packet-path.js';
export { PathCounters } from './path-counters.js';
export { tableLists } from './table-lists.js';
export { BundleLoader, loadBundle, type BundleFiles, type LoadedBundle } from './load.js';
