// Validation of rule bodies sent to the Rulesets API, before anything is
// stored: shape and types of every field, the action and its parameters, and
// the expression parsed and checked by Moat's own engine (the same checker the
// daemon compiles with), with errors carrying JSON pointers into the body.

import { MoatError } from '../errors/index.js';
import { checkExpression, renderError } from '../expr/index.js';
import { TRANSIT_SCHEME } from '../packet/index.js';
import { isId, type StoredRule } from '../store/index.js';
import { invalidField } from './api-error.js';
import { isObject } from './request.js';

/** A validated rule body (what a client may set). */
export interface RuleInput {
  id?: string | undefined;
  ref?: string | undefined;
  action: string;
  expression: string;
  description: string;
  enabled: boolean;
  action_parameters?: Record<string, unknown> | undefined;
  logging?: { enabled: boolean } | undefined;
  /** Canonical list names the expression reads. */
  lists: string[];
  /** The managed ruleset an execute rule runs, and the version it pins (null = latest). */
  execute?: { id: string; version: number | null } | undefined;
}

/** A managed ruleset an execute rule may name: its rules at the version it pins. */
export interface ManagedTarget {
  id: string;
  versions: ReadonlySet<number>;
  rulesAt(version: number | null): readonly StoredRule[] | undefined;
}

/** What validation needs to know about the world. */
export interface RuleEnv {
  /** Account lists that exist (names without $). */
  lists: ReadonlySet<string>;
  maxExpressionLength: number;
  /** Looks up a managed ruleset by id. */
  managed(id: string): ManagedTarget | undefined;
  /** Whether execute rules are allowed in this ruleset. */
  allowExecute: boolean;
  /** Whether account lists may be named (managed rulesets may use only $svc.*). */
  allowAccountLists: boolean;
}

const ACTIONS = ['block', 'skip', 'log', 'execute'];
const OVERRIDE_ACTIONS = ['block', 'log'];
const KNOWN_FIELDS = new Set([
  'id',
  'ref',
  'action',
  'expression',
  'description',
  'enabled',
  'action_parameters',
  'logging',
  'position',
  // read-only fields a client may send back unchanged (terraform does)
  'version',
  'last_updated',
  'categories',
]);

/** Validates one rule body at JSON pointer `at`; returns the rule or the errors. */
export function validateRule(body: unknown, at: string, env: RuleEnv): { rule?: RuleInput; errors: MoatError[] } {
  const errors: MoatError[] = [];
  if (!isObject(body)) return { errors: [invalidField(at, 'a rule must be a JSON object')] };
  for (const k of Object.keys(body)) {
    if (!KNOWN_FIELDS.has(k)) errors.push(invalidField(`${at}/${k}`, `unknown rule field "${k}"`));
  }
  const str = (k: string, max: number): string | undefined => {
    const v = body[k];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string') {
      errors.push(invalidField(`${at}/${k}`, `"${k}" must be a string`));
      return undefined;
    }
    if (v.length > max) errors.push(invalidField(`${at}/${k}`, `"${k}" is longer than ${max} characters`));
    return v;
  };
  const id = str('id', 32);
  if (id !== undefined && !isId(id)) errors.push(invalidField(`${at}/id`, `"${id}" is not a rule id (32 lowercase hex characters)`));
  const ref = str('ref', 64);
  const description = str('description', 500) ?? '';
  const action = body['action'];
  const params = body['action_parameters'];
  if (action === undefined || action === null) {
    if (params !== undefined) errors.push(new MoatError('RULE_ACTION_REQUIRED', 'action is required for action parameters', { pointer: `${at}/action` }));
    else errors.push(invalidField(`${at}/action`, 'a rule needs an action (block, skip, log or execute)'));
  } else if (typeof action !== 'string' || !ACTIONS.includes(action)) {
    errors.push(
      new MoatError('RULESET_BAD_ACTION', `${JSON.stringify(action)} is not a valid value for action: network_transit rules use ${ACTIONS.join(', ')}`, {
        pointer: `${at}/action`,
      }),
    );
  }
  const enabled = body['enabled'] ?? true;
  if (typeof enabled !== 'boolean') errors.push(invalidField(`${at}/enabled`, '"enabled" must be true or false'));
  let logging: { enabled: boolean } | undefined;
  if (body['logging'] !== undefined && body['logging'] !== null) {
    const l = body['logging'];
    if (!isObject(l) || typeof l['enabled'] !== 'boolean') errors.push(invalidField(`${at}/logging/enabled`, '"logging" is {"enabled": true|false}'));
    else logging = { enabled: l['enabled'] };
  }
  if (params !== undefined && params !== null && !isObject(params)) {
    errors.push(invalidField(`${at}/action_parameters`, '"action_parameters" must be an object'));
  }
  const p = isObject(params) ? params : undefined;
  let execute: RuleInput['execute'];
  if (action === 'skip') {
    if (p?.['ruleset'] !== 'current' || Object.keys(p).length !== 1) {
      errors.push(
        new MoatError('RULESET_BAD_ACTION', 'a skip rule needs action_parameters {"ruleset": "current"} (the only skip the network_transit phase supports)', {
          pointer: `${at}/action_parameters`,
        }),
      );
    }
  } else if (action === 'execute') {
    if (!env.allowExecute) {
      errors.push(new MoatError('RULESET_BAD_ACTION', 'execute rules are not allowed in this ruleset', { pointer: `${at}/action` }));
    } else {
      execute = validateExecute(p, `${at}/action_parameters`, env, errors);
    }
  } else if (p !== undefined && Object.keys(p).length > 0 && action !== undefined) {
    errors.push(invalidField(`${at}/action_parameters`, `action "${String(action)}" takes no action_parameters here`));
  }
  const expression = body['expression'];
  let lists: string[] = [];
  if (expression === undefined || expression === null || (typeof expression === 'string' && expression.trim() === '')) {
    errors.push(new MoatError('RULE_BLANK_EXPRESSION', "'' is not a valid value for expression because the expression cannot be blank", { pointer: `${at}/expression` }));
  } else if (typeof expression !== 'string') {
    errors.push(invalidField(`${at}/expression`, '"expression" must be a string'));
  } else {
    const report = checkExpression(expression, {
      scheme: TRANSIT_SCHEME,
      // Managed lists ($svc.*, $cf.*) are known to the checker; this answers for account lists.
      lists: { has: (n) => env.allowAccountLists && env.lists.has(n), get: () => undefined },
      limits: { maxLength: env.maxExpressionLength },
    });
    for (const e of report.errors) {
      errors.push(
        new MoatError(e.errorName, `could not parse filter expression: ${renderError(expression, e)}`, {
          pointer: `${at}/expression`,
          span: e.span,
          hint: e.hint,
        }),
      );
    }
    lists = report.lists;
  }
  if (errors.length > 0) return { errors };
  const rule: RuleInput = {
    id,
    ref,
    action: action as string,
    expression: expression as string,
    description,
    enabled: enabled as boolean,
    lists,
    action_parameters: p === undefined ? undefined : structuredClone(p),
    logging,
    execute,
  };
  return { rule, errors };
}

function validateExecute(p: Record<string, unknown> | undefined, at: string, env: RuleEnv, errors: MoatError[]): RuleInput['execute'] {
  const bad = (pointer: string, message: string) => errors.push(new MoatError('RULESET_BAD_EXECUTE', message, { pointer }));
  if (p === undefined || typeof p['id'] !== 'string') {
    bad(`${at}/id`, 'an execute rule needs action_parameters.id, the id of a managed ruleset');
    return undefined;
  }
  const target = env.managed(p['id']);
  if (target === undefined) {
    bad(`${at}/id`, `no managed ruleset ${p['id']}`);
    return undefined;
  }
  let version: number | null = null;
  const v = p['version'];
  if (v !== undefined && v !== 'latest') {
    if (typeof v !== 'string' || !/^[1-9][0-9]*$/.test(v) || !target.versions.has(Number(v))) {
      bad(`${at}/version`, `version ${JSON.stringify(v)} of managed ruleset ${target.id} does not exist ("latest" or an existing version)`);
      return undefined;
    }
    version = Number(v);
  }
  for (const k of Object.keys(p)) {
    if (!['id', 'version', 'overrides', 'matched_data'].includes(k)) bad(`${at}/${k}`, `unknown execute parameter "${k}"`);
  }
  const rules = target.rulesAt(version) ?? [];
  const o = p['overrides'];
  if (o !== undefined && o !== null) {
    if (!isObject(o)) {
      bad(`${at}/overrides`, '"overrides" must be an object');
      return undefined;
    }
    checkOverride(o, `${at}/overrides`, errors, ['action', 'enabled', 'categories', 'rules']);
    const cats = new Set(rules.flatMap((r) => r.categories ?? []));
    const ids = new Set(rules.map((r) => r.id));
    if (o['categories'] !== undefined) {
      if (!Array.isArray(o['categories'])) bad(`${at}/overrides/categories`, '"categories" must be an array');
      else
        o['categories'].forEach((c: unknown, i: number) => {
          const cat = isObject(c) ? c['category'] : undefined;
          if (typeof cat !== 'string' || !cats.has(cat)) bad(`${at}/overrides/categories/${i}/category`, `no rule of the managed ruleset has category ${JSON.stringify(cat)}`);
          else checkOverride(c as Record<string, unknown>, `${at}/overrides/categories/${i}`, errors, ['category', 'action', 'enabled']);
        });
    }
    if (o['rules'] !== undefined) {
      if (!Array.isArray(o['rules'])) bad(`${at}/overrides/rules`, '"rules" must be an array');
      else
        o['rules'].forEach((r: unknown, i: number) => {
          const rid = isObject(r) ? r['id'] : undefined;
          if (typeof rid !== 'string' || !ids.has(rid)) bad(`${at}/overrides/rules/${i}/id`, `the managed ruleset has no rule ${JSON.stringify(rid)}`);
          else checkOverride(r as Record<string, unknown>, `${at}/overrides/rules/${i}`, errors, ['id', 'action', 'enabled']);
        });
    }
  }
  return { id: target.id, version };
}

function checkOverride(o: Record<string, unknown>, at: string, errors: MoatError[], allowed: string[]): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) errors.push(new MoatError('RULESET_BAD_EXECUTE', `unknown override field "${k}"`, { pointer: `${at}/${k}` }));
  }
  if (o['action'] !== undefined && !OVERRIDE_ACTIONS.includes(o['action'] as string)) {
    errors.push(new MoatError('RULESET_BAD_EXECUTE', `override action must be one of ${OVERRIDE_ACTIONS.join(', ')}`, { pointer: `${at}/action` }));
  }
  if (o['enabled'] !== undefined && typeof o['enabled'] !== 'boolean') {
    errors.push(new MoatError('RULESET_BAD_EXECUTE', 'override "enabled" must be true or false', { pointer: `${at}/enabled` }));
  }
}
