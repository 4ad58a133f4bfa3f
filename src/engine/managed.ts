// Execute rules: a rule `action: "execute"` runs a managed ruleset in place,
// with overrides. Before compiling, each execute rule is replaced by the
// managed ruleset's rules, each gated by the execute rule's expression and
// with its action and enabled flag resolved from the overrides (rule id first,
// then the last matching category, then the ruleset-wide override, then the
// managed rule's own). Managed rules are block or log rules, so the expansion
// keeps the first-block-wins order exactly.

import { MoatError } from '../errors/index.js';
import type { Rule, Ruleset } from './ruleset.js';

/** Managed rulesets an execute rule may name, by id. */
export type ManagedRulesets = ReadonlyMap<string, Ruleset>;

/** Where an expanded rule came from (for counters and logs). */
export interface ExpandedFrom {
  /** Index of the execute rule in its ruleset. */
  readonly executeIndex: number;
  /** The managed ruleset's id. */
  readonly managedId: string;
}

/** A rule after expansion, with its origin when it came from a managed ruleset. */
export interface ExpandedRule {
  readonly rule: Rule;
  /** Index of the rule in the ruleset as written (the execute rule's for expanded rules). */
  readonly index: number;
  readonly from?: ExpandedFrom | undefined;
}

/** Resolves one managed rule under an execute rule's overrides. */
export function applyOverrides(exec: Rule, managed: Rule): { action: Rule['action']; enabled: boolean } {
  const o = exec.action_parameters?.overrides;
  let action = managed.action;
  let enabled = managed.enabled;
  if (o !== undefined) {
    if (o.action !== undefined) action = o.action;
    if (o.enabled !== undefined) enabled = o.enabled;
    for (const c of o.categories ?? []) {
      if (!(managed.categories ?? []).includes(c.category)) continue;
      if (c.action !== undefined) action = c.action;
      if (c.enabled !== undefined) enabled = c.enabled;
    }
    for (const r of o.rules ?? []) {
      if (r.id !== managed.id) continue;
      if (r.action !== undefined) action = r.action;
      if (r.enabled !== undefined) enabled = r.enabled;
    }
  }
  return { action, enabled };
}

/**
 * Expands the execute rules of a ruleset. Errors (unknown managed ruleset,
 * version mismatch, a managed rule that is not block or log) name the rule.
 */
export function expandExecutes(rs: Ruleset, managed: ManagedRulesets | undefined, where: string): { rules: ExpandedRule[]; errors: MoatError[] } {
  const rules: ExpandedRule[] = [];
  const errors: MoatError[] = [];
  rs.rules.forEach((rule, index) => {
    if (rule.action !== 'execute') {
      rules.push({ rule, index });
      return;
    }
    const id = rule.action_parameters?.id ?? '';
    const at = `${where}, rule ${index}${rule.id ? ` (${rule.id})` : ''}`;
    const target = managed?.get(id);
    if (target === undefined) {
      errors.push(new MoatError('RULESET_BAD_EXECUTE', `${at}: executes managed ruleset ${id}, which was not given`, { pointer: `/rules/${index}/action_parameters/id` }));
      return;
    }
    const pinned = rule.action_parameters?.version;
    if (pinned !== undefined && pinned !== 'latest' && target.version !== undefined && pinned !== target.version) {
      errors.push(
        new MoatError('RULESET_BAD_EXECUTE', `${at}: pins version ${pinned} of managed ruleset ${id}, but version ${target.version} was given`, {
          pointer: `/rules/${index}/action_parameters/version`,
        }),
      );
      return;
    }
    if (!rule.enabled) return;
    target.rules.forEach((m, mi) => {
      if (m.action !== 'block' && m.action !== 'log') {
        errors.push(new MoatError('RULESET_BAD_EXECUTE', `${at}: managed rule ${mi} of ${id} is a ${m.action} rule; managed rules block or log`, { pointer: `/rules/${index}` }));
        return;
      }
      const { action, enabled } = applyOverrides(rule, m);
      rules.push({
        index,
        from: { executeIndex: index, managedId: id },
        rule: {
          id: m.id,
          version: m.version,
          action,
          enabled,
          // Both expressions are parsed and checked again as one: the execute
          // rule's gates the managed rule's.
          expression: `(${rule.expression})\nand (${m.expression})`,
          description: `${target.name ?? id}: ${m.description ?? ''}`,
          categories: m.categories,
        },
      });
    });
  });
  return { rules, errors };
}
