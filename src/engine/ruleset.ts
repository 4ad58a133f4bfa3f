// Rulesets as the API returns them (Cloudflare's Rulesets API shape): parsing
// and validating the JSON of a ruleset, or of the v4 envelope around one, with
// errors that name the file and the JSON pointer.

import { MoatError, escapeControls } from '../errors/index.js';

/** Rule actions of the network_transit phase (`execute` runs a managed ruleset in place). */
export type RuleAction = 'block' | 'skip' | 'log' | 'execute';

/** Overrides of an execute rule: by rule id, then by category, then for the whole ruleset. */
export interface ExecuteOverrides {
  readonly action?: RuleAction | undefined;
  readonly enabled?: boolean | undefined;
  readonly categories?: ReadonlyArray<{ readonly category: string; readonly action?: RuleAction | undefined; readonly enabled?: boolean | undefined }> | undefined;
  readonly rules?: ReadonlyArray<{ readonly id: string; readonly action?: RuleAction | undefined; readonly enabled?: boolean | undefined }> | undefined;
}

/** Parameters of skip (`ruleset: "current"`) and execute (`id`, `version`, `overrides`) rules. */
export interface ActionParameters {
  readonly ruleset?: string | undefined;
  readonly id?: string | undefined;
  readonly version?: string | undefined;
  readonly overrides?: ExecuteOverrides | undefined;
}

/** A rule as stored and returned by the API. Unknown fields are kept but unused. */
export interface Rule {
  readonly id?: string | undefined;
  readonly version?: string | undefined;
  readonly action: RuleAction;
  readonly expression: string;
  readonly description?: string | undefined;
  readonly enabled: boolean;
  readonly action_parameters?: ActionParameters | undefined;
  /** Tags of a managed ruleset's rules. */
  readonly categories?: readonly string[] | undefined;
}

/** A ruleset as stored and returned by the API. */
export interface Ruleset {
  readonly id?: string | undefined;
  readonly name?: string | undefined;
  readonly kind?: string | undefined;
  readonly phase?: string | undefined;
  readonly version?: string | undefined;
  readonly rules: readonly Rule[];
}

const ACTIONS: readonly string[] = ['block', 'skip', 'log', 'execute'];
/** Phases a ruleset file may name: the entrypoint's, and the managed one for managed rulesets. */
const PHASES: readonly string[] = ['network_transit', 'magic_transit', 'network_transit_managed', 'magic_transit_managed'];

function shape(message: string, pointer: string, file: string | undefined): MoatError {
  return new MoatError('RULESET_BAD_SHAPE', `${file === undefined ? '' : file + ': '}${message} (at ${pointer || '/'})`, { pointer, file });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function optionalString(o: Record<string, unknown>, key: string, at: string, file: string | undefined): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw shape(`"${key}" must be a string`, `${at}/${key}`, file);
  return v;
}

/**
 * Validates a parsed ruleset: the ruleset object itself or a v4 envelope
 * (`{"success": true, "result": {...}}`) around it. Rules need no ids.
 */
export function toRuleset(json: unknown, file?: string): Ruleset {
  let at = '';
  let doc = json;
  if (isObject(doc) && 'result' in doc && !('rules' in doc)) {
    if (doc['success'] === false) throw shape('the envelope reports success: false', '/success', file);
    doc = doc['result'];
    at = '/result';
  }
  if (!isObject(doc)) throw shape('a ruleset is a JSON object', at, file);
  const phase = optionalString(doc, 'phase', at, file);
  if (phase !== undefined && !PHASES.includes(phase)) {
    throw new MoatError('RULESET_BAD_PHASE', `${file === undefined ? '' : file + ': '}phase is "${phase}", not "network_transit"`, {
      pointer: `${at}/phase`,
      file,
    });
  }
  const rules = doc['rules'] ?? [];
  if (!Array.isArray(rules)) throw shape('"rules" must be an array', `${at}/rules`, file);
  return {
    id: optionalString(doc, 'id', at, file),
    name: optionalString(doc, 'name', at, file),
    kind: optionalString(doc, 'kind', at, file),
    phase,
    version: optionalString(doc, 'version', at, file),
    rules: rules.map((r: unknown, i) => toRule(r, `${at}/rules/${i}`, file)),
  };
}

function toRule(r: unknown, at: string, file: string | undefined): Rule {
  if (!isObject(r)) throw shape('a rule is a JSON object', at, file);
  const action = r['action'];
  if (typeof action !== 'string' || !ACTIONS.includes(action)) {
    throw new MoatError(
      'RULESET_BAD_ACTION',
      `${file === undefined ? '' : file + ': '}action ${JSON.stringify(action)} is not one of ${ACTIONS.join(', ')} (at ${at}/action)`,
      { pointer: `${at}/action`, file },
    );
  }
  const expression = r['expression'];
  if (typeof expression !== 'string') throw shape('"expression" must be a string', `${at}/expression`, file);
  const enabled = r['enabled'] ?? true;
  if (typeof enabled !== 'boolean') throw shape('"enabled" must be true or false', `${at}/enabled`, file);
  const params = r['action_parameters'];
  if (params !== undefined && params !== null && !isObject(params)) {
    throw shape('"action_parameters" must be an object', `${at}/action_parameters`, file);
  }
  if (action === 'skip') {
    const rs = params?.['ruleset'];
    if (rs !== 'current') {
      throw new MoatError(
        'RULESET_BAD_ACTION',
        `${file === undefined ? '' : file + ': '}a skip rule needs action_parameters {"ruleset": "current"} (at ${at}/action_parameters)`,
        { pointer: `${at}/action_parameters/ruleset`, file },
      );
    }
  }
  let actionParameters: ActionParameters | undefined;
  if (action === 'execute') {
    if (typeof params?.['id'] !== 'string') {
      throw new MoatError('RULESET_BAD_EXECUTE', `${file === undefined ? '' : file + ': '}an execute rule needs action_parameters.id, the id of a managed ruleset (at ${at}/action_parameters/id)`, {
        pointer: `${at}/action_parameters/id`,
        file,
      });
    }
    actionParameters = {
      id: params['id'],
      version: typeof params['version'] === 'string' ? params['version'] : undefined,
      overrides: isObject(params['overrides']) ? (params['overrides'] as ExecuteOverrides) : undefined,
    };
  } else if (params !== undefined && params !== null) {
    actionParameters = { ruleset: params['ruleset'] as string };
  }
  const categories = r['categories'];
  return {
    id: optionalString(r, 'id', at, file),
    version: optionalString(r, 'version', at, file),
    action: action as RuleAction,
    expression,
    description: optionalString(r, 'description', at, file),
    enabled,
    action_parameters: actionParameters,
    categories: Array.isArray(categories) ? categories.filter((c): c is string => typeof c === 'string') : undefined,
  };
}

/** Parses ruleset JSON text; errors name the file and, for shape errors, the JSON pointer. */
export function parseRuleset(text: string, file?: string): Ruleset {
  let json: unknown;
  try {
    // A leading byte order mark (editors on Windows write one) is skipped.
    json = JSON.parse(text.charCodeAt(0) === 0xfeff ? ' ' + text.slice(1) : text);
  } catch (err) {
    const m = /position (\d+)/.exec((err as Error).message);
    let at = '';
    if (m !== null && file !== undefined) {
      const before = text.slice(0, Number(m[1]));
      const line = before.split('\n').length;
      at = `:${line}:${Number(m[1]) - before.lastIndexOf('\n')}`;
    }
    throw new MoatError('RULESET_BAD_JSON', `${file === undefined ? '' : file + at + ': '}${escapeControls((err as Error).message)}`, { file, cause: err });
  }
  return toRuleset(json, file);
}
