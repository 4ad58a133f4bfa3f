// The Rulesets API's behaviour, independent of HTTP: visibility by account and
// zone, kinds and phases, one entrypoint per phase and level, immutable
// versions numbered "1", "2", ... and never reused, stable rule ids whose
// version moves only when their definition changes, rule positions, execute
// references, the deletion rules, and dry runs. Every write validates first
// and runs in one Store write transaction, so concurrent writers stay linear.

import type { MoatError } from '../errors/index.js';
import { checkExpression } from '../expr/index.js';
import { TRANSIT_SCHEME } from '../packet/index.js';
import { newId, nowStamp, type Repos, type RulesetRow, type Store, type StoredRule, type VersionStamp } from '../store/index.js';
import { ApiErrors, apiError, invalidField } from './api-error.js';
import type { Scope } from './auth.js';
import { digestEtag } from './conditional.js';
import { ok } from './envelope.js';
import { ResponseCache, type CachedResponse } from './response-cache.js';
import type { ApiLimits } from './limits.js';
import { isObject, loneSurrogateAt, unknownFields } from './request.js';
import { validateRule, type ManagedTarget, type RuleEnv, type RuleInput } from './rule-input.js';

/** Phases of the network layer Moat filters; `magic_transit*` are accepted as aliases. */
export const PHASES: readonly string[] = ['network_transit', 'network_transit_managed', 'network_transit_ratelimit', 'network_transit_ids_managed'];

/** The phase name Moat stores for a phase a client sent, or undefined for an unknown one. */
export function canonicalPhase(phase: string): string | undefined {
  const p = phase.startsWith('magic_transit') ? 'network_transit' + phase.slice('magic_transit'.length) : phase;
  return PHASES.includes(p) ? p : undefined;
}

/** A ruleset as the API returns it. */
export interface RulesetView {
  id: string;
  name: string;
  description: string;
  kind: string;
  phase: string;
  version: string;
  last_updated: string;
  rules?: StoredRule[];
}

const RULE_DEF_FIELDS = ['action', 'expression', 'description', 'enabled', 'action_parameters', 'logging', 'ref'] as const;

function sameDefinition(a: StoredRule, b: StoredRule): boolean {
  return RULE_DEF_FIELDS.every((k) => JSON.stringify(a[k]) === JSON.stringify(b[k]));
}

/** Where a rule goes: `position` of an add or PATCH. */
type Position = { kind: 'before' | 'after'; ruleId: string } | { kind: 'index'; index: number };

/** Rulesets of one store, as the API sees them. */
export class RulesetService {
  /** The v4 envelopes of versions GETs answered, by stamp (see cachedView). */
  readonly responses: ResponseCache;

  constructor(
    private readonly store: Store,
    private readonly limits: ApiLimits,
  ) {
    this.responses = new ResponseCache(limits.responseCacheBytes);
  }

  // ---- reading -------------------------------------------------------------
  //
  // Every helper takes the repositories it reads through (`tx`): those of one
  // read or write transaction, so that a view and the checks before it see one
  // snapshot, and a write's reads are under its lock.

  private visible<R extends Pick<RulesetRow, 'kind' | 'account_id' | 'zone_id'>>(row: R | undefined, scope: Scope): row is R {
    if (row === undefined) return false;
    if (row.kind === 'managed') return true;
    return scope.level === 'account' ? row.account_id === scope.accountId && row.zone_id === null : row.zone_id === scope.zoneId;
  }

  private async find(tx: Repos, scope: Scope, id: string): Promise<RulesetRow> {
    const row = await tx.rulesets.get(id);
    if (!this.visible(row, scope)) throw apiError('RULESET_NOT_FOUND', `Could not find ruleset ${id}`);
    return row;
  }

  private async writable(tx: Repos, scope: Scope, id: string): Promise<RulesetRow> {
    const row = await this.find(tx, scope, id);
    if (row.kind === 'managed') throw apiError('RULESET_MANAGED_READONLY', 'Managed rulesets cannot be changed; deploy them with an execute rule and use overrides');
    return row;
  }

  /** The view of one version (read through `tx`); customers see managed rules without their expressions. */
  async view(tx: Repos, row: RulesetRow, version: number, withRules = true, operator = false): Promise<RulesetView> {
    const v = await tx.rulesets.version(row.id, version);
    if (v === undefined) throw apiError('RULESET_VERSION_NOT_FOUND', `Could not find version ${version} of ruleset ${row.id}`);
    const out: RulesetView = {
      id: row.id,
      name: row.name,
      description: v.description,
      kind: row.kind,
      phase: row.phase,
      version: String(v.version),
      last_updated: v.last_updated,
    };
    if (withRules) {
      out.rules = row.kind === 'managed' && !operator ? v.rules.map(({ expression: _e, ...rest }) => rest as StoredRule) : v.rules;
    }
    return out;
  }

  /** Rulesets at a level (without rules), a page at a time. */
  async list(scope: Scope, cursor: string | undefined, perPage: number): Promise<{ result: RulesetView[]; cursor: string | undefined }> {
    let after = 0;
    if (cursor !== undefined && cursor !== '') {
      after = Number(Buffer.from(cursor, 'base64url').toString());
      if (!Number.isSafeInteger(after) || after < 0) throw apiError('API_BAD_QUERY', 'invalid cursor', { pointer: 'cursor' });
    }
    return this.store.read(async (tx) => {
      const rows = await tx.rulesets.list({ accountId: scope.accountId, zoneId: scope.zoneId }, after, perPage + 1);
      const page = rows.slice(0, perPage);
      const more = rows.length > perPage;
      const result: RulesetView[] = [];
      for (const r of page) result.push(await this.view(tx, r, r.latest_version, false));
      return { result, cursor: more ? Buffer.from(String(page[page.length - 1]!.rowid)).toString('base64url') : undefined };
    });
  }

  /** The latest version of a ruleset. */
  async get(scope: Scope, id: string): Promise<RulesetView> {
    return this.store.read(async (tx) => {
      const row = await this.find(tx, scope, id);
      return this.view(tx, row, row.latest_version);
    });
  }

  /** Every version of a ruleset, without rules. */
  async versions(scope: Scope, id: string): Promise<RulesetView[]> {
    return this.store.read(async (tx) => {
      const row = await this.find(tx, scope, id);
      return this.versionViews(tx, row);
    });
  }

  private async versionViews(tx: Repos, row: RulesetRow): Promise<RulesetView[]> {
    const out: RulesetView[] = [];
    for (const v of await tx.rulesets.versions(row.id)) out.push(await this.view(tx, row, v.version, false));
    return out;
  }

  /** One version of a ruleset. */
  async version(scope: Scope, id: string, version: string): Promise<RulesetView> {
    return this.store.read(async (tx) => this.view(tx, await this.find(tx, scope, id), versionNumber(version, id)));
  }

  /** The rules of one version that carry `tag` in their categories. */
  async byTag(scope: Scope, id: string, version: string, tag: string): Promise<RulesetView> {
    return this.store.read(async (tx) => {
      const v = await this.view(tx, await this.find(tx, scope, id), versionNumber(version, id));
      v.rules = (v.rules ?? []).filter((r) => (r.categories ?? []).includes(tag));
      return v;
    });
  }

  private async entrypointRow(tx: Repos, scope: Scope, phase: string): Promise<RulesetRow> {
    const p = canonicalPhase(phase);
    if (p === undefined) throw apiError('RULESET_BAD_PHASE_NAME', `'${phase}' is not a valid phase; phases are ${PHASES.join(', ')}`);
    const row = await tx.rulesets.entrypoint({ accountId: scope.accountId, zoneId: scope.zoneId }, p);
    if (row === undefined) throw apiError('ENTRYPOINT_NOT_FOUND', `could not find entrypoint ruleset in the ${phase} phase`);
    return row;
  }

  /** The entrypoint of a phase (404 with 10003 when there is none). */
  async entrypoint(scope: Scope, phase: string): Promise<RulesetView> {
    return this.store.read(async (tx) => {
      const row = await this.entrypointRow(tx, scope, phase);
      return this.view(tx, row, row.latest_version);
    });
  }

  /** Versions of an entrypoint; [] when the entrypoint does not exist. */
  async entrypointVersions(scope: Scope, phase: string): Promise<RulesetView[]> {
    return this.store.read(async (tx) => {
      let row: RulesetRow;
      try {
        row = await this.entrypointRow(tx, scope, phase);
      } catch (err) {
        if ((err as MoatError).errorName === 'ENTRYPOINT_NOT_FOUND') return [];
        throw err;
      }
      return this.versionViews(tx, row);
    });
  }

  /** One version of an entrypoint. */
  async entrypointVersion(scope: Scope, phase: string, version: string): Promise<RulesetView> {
    return this.store.read(async (tx) => {
      const row = await this.entrypointRow(tx, scope, phase);
      return this.view(tx, row, versionNumber(version, row.id));
    });
  }

  // ---- cached reads ------------------------------------------------------------
  //
  // GET of a ruleset, of one of its versions, of an entrypoint and of an
  // entrypoint's version all answer one version's envelope, whose bytes never
  // change (name, kind and phase are immutable; a version is never rewritten).
  // Each request reads the version's stamp (one indexed query) and looks its
  // bytes up by it: a write by this or another process makes a new stamp the
  // latest, so a stale answer is impossible rather than invalidated. For the
  // entrypoint of 50 rules of bench/api.bench.ts, building the view and
  // serializing its 13 KB took 74-92 us per GET (in process); a hit takes 10.

  /** GET /rulesets/{id}: the latest version's envelope. */
  async getResponse(scope: Scope, id: string): Promise<CachedResponse> {
    return this.cachedView(
      scope,
      (r) => r.stamp(id),
      (tx) => this.find(tx, scope, id).then((row) => this.view(tx, row, row.latest_version)),
    );
  }

  /** GET /rulesets/{id}/versions/{version}. */
  async versionResponse(scope: Scope, id: string, version: string): Promise<CachedResponse> {
    const n = cacheableVersion(version);
    return this.cachedView(
      scope,
      (r) => (n === undefined ? Promise.resolve(undefined) : r.stamp(id, n)),
      async (tx) => this.view(tx, await this.find(tx, scope, id), versionNumber(version, id)),
    );
  }

  /** GET /rulesets/phases/{phase}/entrypoint. */
  async entrypointResponse(scope: Scope, phase: string): Promise<CachedResponse> {
    const p = canonicalPhase(phase);
    return this.cachedView(
      scope,
      (r) => (p === undefined ? Promise.resolve(undefined) : r.entrypointStamp({ accountId: scope.accountId, zoneId: scope.zoneId }, p)),
      async (tx) => {
        const row = await this.entrypointRow(tx, scope, phase);
        return this.view(tx, row, row.latest_version);
      },
    );
  }

  /** GET /rulesets/phases/{phase}/entrypoint/versions/{version}. */
  async entrypointVersionResponse(scope: Scope, phase: string, version: string): Promise<CachedResponse> {
    const p = canonicalPhase(phase);
    const n = cacheableVersion(version);
    return this.cachedView(
      scope,
      (r) => (p === undefined || n === undefined ? Promise.resolve(undefined) : r.entrypointStamp({ accountId: scope.accountId, zoneId: scope.zoneId }, p, n)),
      async (tx) => {
        const row = await this.entrypointRow(tx, scope, phase);
        return this.view(tx, row, versionNumber(version, row.id));
      },
    );
  }

  /**
   * The bytes of `uncached()`'s envelope, from the cache when the stamp read
   * now names an entry. A miss (or no stamp: not found, not visible, a bad
   * path) takes the uncached path, whose errors are the answer; its view and
   * the stamp it is kept under are read in one snapshot.
   */
  private async cachedView(
    scope: Scope,
    stamp: (rulesets: Repos['rulesets']) => Promise<VersionStamp | undefined>,
    uncached: (tx: Repos) => Promise<RulesetView>,
  ): Promise<CachedResponse> {
    const s = await stamp(this.store.rulesets);
    if (s !== undefined && this.visible(s, scope)) {
      const hit = this.responses.get(stampKey(s));
      if (hit !== undefined) return hit;
    }
    return this.store.read(async (tx) => {
      const view = await uncached(tx);
      const body = Buffer.from(JSON.stringify(ok(view)));
      const t = await stamp(tx.rulesets);
      if (t === undefined || t.id !== view.id || String(t.stamp_version) !== view.version) return { body, etag: digestEtag(body) };
      const answer: CachedResponse = { body, etag: `"${t.id}-${t.stamp_version}-${t.stamp_token.toString(36)}"` };
      this.responses.set(stampKey(t), answer);
      return answer;
    });
  }

  // ---- validation ------------------------------------------------------------

  /**
   * The managed rulesets the execute rules of `bodies` name, read before the
   * (synchronous) validation: each one's versions and its rules at the latest
   * version and at every version a rule pins. A name that is not a managed
   * ruleset is left out (validation reports it).
   */
  private async managedTargets(tx: Repos, bodies: readonly unknown[]): Promise<Map<string, ManagedTarget>> {
    const pins = new Map<string, Set<number>>();
    for (const b of bodies) {
      if (!isObject(b) || b['action'] !== 'execute') continue;
      const p = b['action_parameters'];
      if (!isObject(p) || typeof p['id'] !== 'string') continue;
      const set = pins.get(p['id']) ?? new Set<number>();
      const v = p['version'];
      if (typeof v === 'string' && /^[1-9][0-9]{0,15}$/.test(v)) set.add(Number(v));
      pins.set(p['id'], set);
    }
    const out = new Map<string, ManagedTarget>();
    for (const [id, pinned] of pins) {
      const row = await tx.rulesets.get(id);
      if (row === undefined || row.kind !== 'managed') continue;
      const versions = new Set((await tx.rulesets.versions(id)).map((v) => v.version));
      const rules = new Map<number, readonly StoredRule[] | undefined>();
      for (const v of [row.latest_version, ...pinned]) if (versions.has(v) && !rules.has(v)) rules.set(v, (await tx.rulesets.version(id, v))?.rules);
      out.set(id, { id, versions, rulesAt: (v) => rules.get(v ?? row.latest_version) });
    }
    return out;
  }

  /** What validating the rule bodies `bodies` needs, read through `tx`. */
  private async env(tx: Repos, scope: Scope | null, kind: string, bodies: readonly unknown[]): Promise<RuleEnv> {
    const managed = await this.managedTargets(tx, bodies);
    return {
      lists: scope === null ? new Set() : await tx.lists.accountListNames(scope.accountId),
      maxExpressionLength: this.limits.maxExpressionLength,
      managed: (id) => managed.get(id),
      allowExecute: kind === 'root' || kind === 'zone',
      allowAccountLists: kind !== 'managed',
    };
  }

  /** Validates a `rules` array; throws every error at once. */
  private validateRules(rules: unknown, at: string, env: RuleEnv): RuleInput[] {
    if (rules === undefined || rules === null) return [];
    if (!Array.isArray(rules)) throw new ApiErrors([invalidField(at, '"rules" must be an array')]);
    if (rules.length > this.limits.maxRules) {
      throw apiError('RULESET_TOO_MANY_RULES', `a ruleset holds at most ${this.limits.maxRules} rules; this one has ${rules.length}`, { pointer: at });
    }
    const errors: MoatError[] = [];
    const out: RuleInput[] = [];
    rules.forEach((r, i) => {
      const v = checkedRule(r, `${at}/${i}`, env);
      errors.push(...v.errors);
      if (v.rule !== undefined) out.push(v.rule);
    });
    if (errors.length > 0) throw new ApiErrors(errors);
    return out;
  }

  /**
   * Turns validated inputs into stored rules for version `version`: a rule
   * sent with its id (or its ref) keeps its identity, and keeps its version and
   * last_updated when its definition did not change.
   */
  private materialise(inputs: readonly RuleInput[], previous: readonly StoredRule[], version: number, now: string, at: string): StoredRule[] {
    const byId = new Map(previous.map((r) => [r.id, r]));
    const byRef = new Map(previous.map((r) => [r.ref, r]));
    const used = new Set<string>();
    const errors: MoatError[] = [];
    const out = inputs.map((input, i) => {
      let prev: StoredRule | undefined;
      if (input.id !== undefined) {
        prev = byId.get(input.id);
        if (prev === undefined) errors.push(apiError('RULE_NOT_FOUND', `rule ${input.id} is not in this ruleset; leave "id" out to add a new rule`, { pointer: `${at}/${i}/id` }));
      } else if (input.ref !== undefined) {
        prev = byRef.get(input.ref);
      }
      if (prev !== undefined) {
        if (used.has(prev.id)) errors.push(apiError('RULE_DUPLICATE_ID', `rule ${prev.id} appears twice`, { pointer: `${at}/${i}` }));
        used.add(prev.id);
      }
      return this.stored(input, prev, version, now);
    });
    if (errors.length > 0) throw new ApiErrors(errors);
    return out;
  }

  private stored(input: RuleInput, prev: StoredRule | undefined, version: number, now: string): StoredRule {
    const id = prev?.id ?? newId();
    const rule: StoredRule = {
      id,
      version: String(version),
      action: input.action,
      expression: input.expression,
      description: input.description,
      last_updated: now,
      ref: input.ref ?? prev?.ref ?? id,
      enabled: input.enabled,
    };
    if (input.action_parameters !== undefined) rule.action_parameters = input.action_parameters;
    if (input.logging !== undefined) rule.logging = input.logging;
    if (prev?.categories !== undefined) rule.categories = prev.categories;
    if (prev !== undefined && sameDefinition(prev, rule)) {
      rule.version = prev.version;
      rule.last_updated = prev.last_updated;
    }
    return rule;
  }

  // ---- writing ---------------------------------------------------------------

  /**
   * Runs a write in one Store transaction (group commit: see Store.write), or
   * (dry run) runs it, keeps what it would have answered and has it rolled
   * back: a dry run answers with the ruleset that would have been written, as
   * Cloudflare does, and stores nothing.
   */
  private async writeTx<T>(dryRun: boolean, fn: (tx: Repos) => Promise<T>): Promise<T> {
    if (!dryRun) return this.store.write(fn);
    const DRY = Symbol('dry run');
    let result: T | undefined;
    try {
      await this.store.write(async (tx) => {
        result = await fn(tx);
        throw DRY;
      });
    } catch (err) {
      if (err !== DRY) throw err;
    }
    return result as T;
  }

  /** POST /rulesets: creates a ruleset with version 1. */
  async create(scope: Scope, body: unknown, dryRun: boolean): Promise<RulesetView> {
    if (!isObject(body)) throw new ApiErrors([invalidField('', 'the body must be a ruleset object')]);
    const errors = checkRulesetFields(body);
    const name = body['name'];
    if (name === undefined || name === null) errors.push(invalidField('/name', 'a ruleset needs a "name"'));
    const description = body['description'] ?? '';
    const phaseIn = body['phase'];
    const phase = typeof phaseIn === 'string' ? canonicalPhase(phaseIn) : undefined;
    if (phase === undefined) errors.push(apiError('RULESET_BAD_PHASE_NAME', `${JSON.stringify(phaseIn)} is not a valid value for phase; phases are ${PHASES.join(', ')}`, { pointer: '/phase' }));
    const kind = body['kind'];
    const allowedKinds = scope.level === 'account' ? ['root', 'custom'] : ['zone'];
    if (typeof kind !== 'string' || !allowedKinds.includes(kind)) {
      errors.push(
        apiError(
          'RULESET_BAD_KIND',
          kind === 'managed'
            ? "'managed' is not a valid value for kind: managed rulesets are imported by the operator (moat managed import)"
            : `${JSON.stringify(kind)} is not a valid value for kind at ${scope.level} level; use ${allowedKinds.join(' or ')}`,
          { pointer: '/kind' },
        ),
      );
    }
    if (errors.length > 0) throw new ApiErrors(errors);
    return this.writeTx(dryRun, async (tx) => {
      if (kind === 'root' || kind === 'zone') {
        if ((await tx.rulesets.entrypoint({ accountId: scope.accountId, zoneId: scope.zoneId }, phase!)) !== undefined) {
          throw apiError('RULESET_KIND_LIMIT', `'${kind}' is not a valid value for kind because exceeded maximum number of ${kind} rulesets for phase ${phase}`, { pointer: '/kind' });
        }
      }
      const inputs = this.validateRules(body['rules'], '/rules', await this.env(tx, scope, kind as string, rulesOf(body)));
      return this.insertNew(tx, scope, { name: name as string, description: description as string, kind: kind as string, phase: phase! }, inputs);
    });
  }

  private async insertNew(tx: Repos, scope: Scope, meta: { name: string; description: string; kind: string; phase: string }, inputs: RuleInput[]): Promise<RulesetView> {
    const id = newId();
    const now = nowStamp();
    await tx.rulesets.insert({ id, account_id: scope.accountId, zone_id: scope.zoneId, ...meta, created_on: now });
    const rules = this.materialise(inputs, [], 1, now, '/rules');
    const v = await tx.rulesets.addVersion(id, meta.description, now, rules, refsOfStored(rules));
    return this.latestView(tx, id, v);
  }

  /** The view of version `v` of a ruleset just written, read back in the write's transaction. */
  private async latestView(tx: Repos, id: string, v: number, operator = false): Promise<RulesetView> {
    return this.view(tx, (await tx.rulesets.get(id))!, v, true, operator);
  }

  private checkImmutable(row: RulesetRow, body: Record<string, unknown>): void {
    const errors = checkRulesetFields(body);
    for (const k of ['name', 'kind', 'phase'] as const) {
      const v = body[k];
      if (v === undefined || v === null || errors.some((e) => e.pointer === `/${k}`)) continue;
      const current = row[k];
      const same = k === 'phase' ? typeof v === 'string' && canonicalPhase(v) === current : v === current;
      if (!same) errors.push(apiError('RULESET_IMMUTABLE', `"${k}" of a ruleset cannot change (it is ${JSON.stringify(current)})`, { pointer: `/${k}` }));
    }
    if (errors.length > 0) throw new ApiErrors(errors);
  }

  private async replaceRules(tx: Repos, row: RulesetRow, scope: Scope, body: Record<string, unknown>): Promise<RulesetView> {
    this.checkImmutable(row, body);
    const latest = (await tx.rulesets.version(row.id, row.latest_version))!;
    const inputs = this.validateRules(body['rules'], '/rules', await this.env(tx, scope, row.kind, rulesOf(body)));
    const next = row.last_version + 1;
    const now = nowStamp();
    const rules = this.materialise(inputs, latest.rules, next, now, '/rules');
    const description = typeof body['description'] === 'string' ? body['description'] : latest.description;
    const v = await tx.rulesets.addVersion(row.id, description, now, rules, refsOfStored(rules));
    return this.latestView(tx, row.id, v);
  }

  /** PUT /rulesets/{id}: a new version with exactly the rules sent. */
  async update(scope: Scope, id: string, body: unknown, dryRun: boolean): Promise<RulesetView> {
    if (!isObject(body)) throw new ApiErrors([invalidField('', 'the body must be a ruleset object')]);
    return this.writeTx(dryRun, async (tx) => this.replaceRules(tx, await this.writable(tx, scope, id), scope, body));
  }

  /** PUT /rulesets/phases/{phase}/entrypoint: updates the entrypoint, creating it when missing. */
  async putEntrypoint(scope: Scope, phase: string, body: unknown, dryRun: boolean): Promise<RulesetView> {
    if (!isObject(body)) throw new ApiErrors([invalidField('', 'the body must be a ruleset object')]);
    const p = canonicalPhase(phase);
    if (p === undefined) throw apiError('RULESET_BAD_PHASE_NAME', `'${phase}' is not a valid phase; phases are ${PHASES.join(', ')}`);
    const kind = scope.level === 'account' ? 'root' : 'zone';
    return this.writeTx(dryRun, async (tx) => {
      const row = await tx.rulesets.entrypoint({ accountId: scope.accountId, zoneId: scope.zoneId }, p);
      if (row !== undefined) return this.replaceRules(tx, row, scope, body);
      // The same checks as POST /rulesets, with the entrypoint's defaults for what may be left out.
      const errors = checkRulesetFields(body);
      const name = body['name'] ?? 'default';
      const description = body['description'] ?? '';
      if (body['kind'] !== undefined && body['kind'] !== null && body['kind'] !== kind) {
        errors.push(apiError('RULESET_BAD_KIND', `an entrypoint at ${scope.level} level has kind "${kind}"`, { pointer: '/kind' }));
      }
      const phaseIn = body['phase'];
      if (phaseIn !== undefined && phaseIn !== null && (typeof phaseIn !== 'string' || canonicalPhase(phaseIn) !== p)) {
        errors.push(apiError('RULESET_BAD_PHASE_NAME', `"phase" ${JSON.stringify(phaseIn)} does not match the path's phase ${p}`, { pointer: '/phase' }));
      }
      if (errors.length > 0) throw new ApiErrors(errors);
      if (typeof name !== 'string' || typeof description !== 'string') throw new Error('unreachable: checked by checkRulesetFields');
      const inputs = this.validateRules(body['rules'], '/rules', await this.env(tx, scope, kind, rulesOf(body)));
      return this.insertNew(tx, scope, { name, description, kind, phase: p }, inputs);
    });
  }

  /** POST /rulesets/{id}/rules: adds one rule at a position (default: last). */
  async addRule(scope: Scope, id: string, body: unknown, dryRun: boolean): Promise<RulesetView> {
    if (!isObject(body)) throw new ApiErrors([invalidField('', 'the body must be a rule object')]);
    return this.writeTx(dryRun, async (tx) => {
      const row = await this.writable(tx, scope, id);
      const { position: _p, ...ruleBody } = body;
      const env = await this.env(tx, scope, row.kind, [ruleBody]);
      const v = checkedRule(ruleBody, '', env);
      if (v.rule === undefined) throw new ApiErrors(v.errors);
      if (v.rule.id !== undefined) throw apiError('API_INVALID_FIELD', 'a new rule gets its id from the server; leave "id" out', { pointer: '/id' });
      const latest = (await tx.rulesets.version(row.id, row.latest_version))!;
      if (latest.rules.length + 1 > this.limits.maxRules) {
        throw apiError('RULESET_TOO_MANY_RULES', `a ruleset holds at most ${this.limits.maxRules} rules`, { pointer: '' });
      }
      const position = parsePosition(body['position'], latest.rules);
      const next = row.last_version + 1;
      const now = nowStamp();
      const rule = this.stored(v.rule, undefined, next, now);
      const rules = insertAt([...latest.rules], rule, position);
      const version = await tx.rulesets.addVersion(row.id, latest.description, now, rules, refsOfStored(rules));
      return this.latestView(tx, row.id, version);
    });
  }

  /** PATCH /rulesets/{id}/rules/{rule_id}: replaces one rule's definition and/or moves it. */
  async editRule(scope: Scope, id: string, ruleId: string, body: unknown, dryRun: boolean): Promise<RulesetView> {
    if (!isObject(body)) throw new ApiErrors([invalidField('', 'the body must be a rule object')]);
    return this.writeTx(dryRun, async (tx) => {
      const row = await this.writable(tx, scope, id);
      const { position: positionBody, ...ruleBody } = body;
      const env = await this.env(tx, scope, row.kind, [ruleBody]);
      const latest = (await tx.rulesets.version(row.id, row.latest_version))!;
      const index = latest.rules.findIndex((r) => r.id === ruleId);
      if (index < 0) throw apiError('RULE_NOT_FOUND', `Could not find rule ${ruleId} in ruleset ${row.id}`);
      const prev = latest.rules[index]!;
      const next = row.last_version + 1;
      const now = nowStamp();
      const onlyMove = Object.keys(ruleBody).filter((k) => k !== 'id').length === 0;
      if (ruleBody['id'] !== undefined && ruleBody['id'] !== ruleId) throw apiError('API_INVALID_FIELD', 'the "id" in the body is not the rule of the path', { pointer: '/id' });
      let rule = prev;
      if (!onlyMove) {
        const v = checkedRule({ ...ruleBody, id: ruleId }, '', env);
        if (v.rule === undefined) throw new ApiErrors(v.errors);
        rule = this.stored(v.rule, prev, next, now);
      } else if (positionBody === undefined) {
        throw new ApiErrors([invalidField('', 'send the rule\'s new definition (every field, as Cloudflare requires), a "position", or both')]);
      }
      const rest = latest.rules.filter((r) => r.id !== ruleId);
      const rules =
        positionBody === undefined ? latest.rules.map((r) => (r.id === ruleId ? rule : r)) : insertAt(rest, rule, parsePosition(positionBody, rest));
      const version = await tx.rulesets.addVersion(row.id, latest.description, now, rules, refsOfStored(rules));
      return this.latestView(tx, row.id, version);
    });
  }

  /** DELETE /rulesets/{id}/rules/{rule_id}: a new version without that rule. */
  async deleteRule(scope: Scope, id: string, ruleId: string, dryRun: boolean): Promise<RulesetView> {
    return this.writeTx(dryRun, async (tx) => {
      const row = await this.writable(tx, scope, id);
      const latest = (await tx.rulesets.version(row.id, row.latest_version))!;
      if (!latest.rules.some((r) => r.id === ruleId)) throw apiError('RULE_NOT_FOUND', `Could not find rule ${ruleId} in ruleset ${row.id}`);
      const rules = latest.rules.filter((r) => r.id !== ruleId);
      const version = await tx.rulesets.addVersion(row.id, latest.description, nowStamp(), rules, refsOfStored(rules));
      return this.latestView(tx, row.id, version);
    });
  }

  /** DELETE /rulesets/{id}: every version goes. Refused while an execute rule deploys it. */
  async delete(scope: Scope, id: string, dryRun: boolean): Promise<void> {
    await this.writeTx(dryRun, async (tx) => this.deleteChecked(tx, await this.writable(tx, scope, id)));
  }

  private async deleteChecked(tx: Repos, row: RulesetRow): Promise<void> {
    const users = await tx.rulesets.executedBy(row.id);
    if (users.length > 0) {
      throw apiError('RULESET_IN_USE', `ruleset ${row.id} is deployed by an execute rule in ruleset ${users[0]!.ruleset_id}; remove that rule first`);
    }
    await tx.rulesets.delete(row.id);
  }

  /** DELETE /rulesets/{id}/versions/{v}: refused for the latest version of a deployed ruleset, and for the only version. */
  async deleteVersion(scope: Scope, id: string, version: string, dryRun: boolean): Promise<void> {
    await this.writeTx(dryRun, async (tx) => {
      const row = await this.writable(tx, scope, id);
      await this.deleteVersionChecked(tx, row, versionNumber(version, id));
    });
  }

  private async deleteVersionChecked(tx: Repos, row: RulesetRow, v: number): Promise<void> {
    if ((await tx.rulesets.version(row.id, v)) === undefined) throw apiError('RULESET_VERSION_NOT_FOUND', `Could not find version ${v} of ruleset ${row.id}`);
    const users = await tx.rulesets.executedBy(row.id);
    if (users.some((u) => u.target_version === v || (u.target_version === null && v === row.latest_version))) {
      throw apiError('RULESET_IN_USE', `version ${v} of ruleset ${row.id} is deployed by an execute rule in ruleset ${users[0]!.ruleset_id}`);
    }
    if ((await tx.rulesets.versions(row.id)).length === 1) {
      throw apiError('RULESET_LAST_VERSION', `version ${v} is the only version of ruleset ${row.id}; delete the ruleset instead`);
    }
    await tx.rulesets.deleteVersion(row.id, v);
    if (v === row.latest_version) {
      // The references describe the latest version, which is now an older one.
      const now = (await tx.rulesets.get(row.id))!;
      const rules = (await tx.rulesets.version(row.id, now.latest_version))!.rules;
      await tx.rulesets.setRefs(row.id, refsOfStored(rules));
    }
  }

  // ---- operator ----------------------------------------------------------------

  /**
   * Imports a managed ruleset (operator command): creates it, or adds a new
   * version to the managed ruleset of the same name. Rules keep their ids when
   * the file gives them. Returns the operator's view (with expressions).
   */
  async importManaged(doc: unknown): Promise<RulesetView> {
    if (!isObject(doc)) throw new ApiErrors([invalidField('', 'a managed ruleset file holds a ruleset object')]);
    const body = 'result' in doc && isObject(doc['result']) ? doc['result'] : doc;
    // A file is checked like an API body: no string SQLite would store changed, and the API's name limit.
    const surrogate = loneSurrogateAt(body);
    if (surrogate !== undefined) throw apiError('API_BAD_ENCODING', 'A string holds a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF escape): it cannot be stored as UTF-8', { pointer: surrogate });
    const name = body['name'];
    if (typeof name !== 'string' || name.trim() === '') throw new ApiErrors([invalidField('/name', 'a managed ruleset needs a "name"')]);
    if (name.length > MAX_RULESET_NAME) throw new ApiErrors([invalidField('/name', `"name" is longer than ${MAX_RULESET_NAME} characters`)]);
    const description = typeof body['description'] === 'string' ? body['description'] : '';
    const phase = canonicalPhase(typeof body['phase'] === 'string' ? body['phase'] : 'network_transit_managed');
    if (phase === undefined) throw apiError('RULESET_BAD_PHASE_NAME', `phase ${JSON.stringify(body['phase'])} is not one of ${PHASES.join(', ')}`, { pointer: '/phase' });
    const rulesIn = body['rules'];
    if (!Array.isArray(rulesIn)) throw new ApiErrors([invalidField('/rules', '"rules" must be an array')]);
    const errors: MoatError[] = [];
    rulesIn.forEach((r, i) => {
      if (!isObject(r)) return;
      const c = r['categories'];
      if (c !== undefined && (!Array.isArray(c) || !c.every((x) => typeof x === 'string'))) errors.push(invalidField(`/rules/${i}/categories`, '"categories" is an array of strings'));
      if (r['action'] !== 'block' && r['action'] !== 'log') errors.push(apiError('RULESET_BAD_ACTION', 'managed rules are block or log rules', { pointer: `/rules/${i}/action` }));
    });
    if (errors.length > 0) throw new ApiErrors(errors);
    return this.store.write(async (tx) => {
      // Managed rules are block or log rules (checked above): no execute target to read.
      const env = await this.env(tx, null, 'managed', []);
      const stripped = rulesIn.map((r: Record<string, unknown>) => {
        const { categories: _c, ...rest } = r;
        return rest;
      });
      const existing = await tx.rulesets.managedByName(name);
      const now = nowStamp();
      let id: string;
      let previous: StoredRule[] = [];
      if (existing === undefined) {
        id = newId();
        await tx.rulesets.insert({ id, account_id: null, zone_id: null, kind: 'managed', phase, name, description, created_on: now });
      } else {
        id = existing.id;
        previous = (await tx.rulesets.version(id, existing.latest_version))!.rules;
      }
      // Rules named by id keep it (a new id is accepted too: the operator owns the ids).
      const inputs = this.validateRules(stripped, '/rules', env);
      const row = (await tx.rulesets.get(id))!;
      const rules = inputs.map((input, i) => {
        const prev = previous.find((p) => p.id === input.id);
        const r = this.stored(input, prev, row.last_version + 1, now);
        if (prev === undefined && input.id !== undefined) {
          r.id = input.id;
          r.ref = input.ref ?? input.id;
        }
        const cats = (rulesIn[i] as Record<string, unknown>)['categories'];
        if (Array.isArray(cats)) r.categories = cats as string[];
        if (prev !== undefined && JSON.stringify(prev.categories) !== JSON.stringify(r.categories)) {
          r.version = String(row.last_version + 1);
          r.last_updated = now;
        }
        return r;
      });
      const v = await tx.rulesets.addVersion(id, description, now, rules, { lists: [], executes: [] });
      return this.latestView(tx, id, v, true);
    });
  }

  /**
   * Deletes a managed ruleset with every version (operator command). Refused
   * (7207) while an execute rule deploys it: customers cannot delete managed
   * rulesets, so this is the only path where that check can fire for them.
   */
  async deleteManaged(id: string): Promise<void> {
    await this.store.write(async (tx) => {
      const row = await tx.rulesets.get(id);
      if (row === undefined || row.kind !== 'managed') throw apiError('RULESET_NOT_FOUND', `Could not find managed ruleset ${id}`);
      await this.deleteChecked(tx, row);
    });
  }

  /** Every managed ruleset (operator view, latest versions). */
  async listManaged(): Promise<RulesetView[]> {
    return this.store.read(async (tx) => {
      const out: RulesetView[] = [];
      for (const row of await tx.rulesets.managed()) out.push(await this.view(tx, row, row.latest_version, true, true));
      return out;
    });
  }
}

/** The rule bodies of a ruleset body (what its execute rules name is read before validation). */
function rulesOf(body: Record<string, unknown>): readonly unknown[] {
  return Array.isArray(body['rules']) ? (body['rules'] as unknown[]) : [];
}

// Lists named by stored expressions, by expression text. Every new version
// recomputes what it references from all its rules; their expressions were
// checked when written, so only the names are needed, and they depend on the
// text alone (measured: bench/api.bench.ts, POST rule).
const LISTS_MEMO = new Map<string, readonly string[]>();
const LISTS_MEMO_SIZE = 20_000;

function rememberLists(expression: string, lists: readonly string[]): void {
  if (LISTS_MEMO.size >= LISTS_MEMO_SIZE) LISTS_MEMO.delete(LISTS_MEMO.keys().next().value!);
  LISTS_MEMO.set(expression, lists);
}

/** Canonical names of the lists an expression reads (the checker's answer), memoised by text. */
export function listsOfExpression(expression: string): readonly string[] {
  let lists = LISTS_MEMO.get(expression);
  if (lists === undefined) {
    lists = checkExpression(expression, { scheme: TRANSIT_SCHEME, limits: { maxLength: Number.MAX_SAFE_INTEGER } }).lists;
    rememberLists(expression, lists);
  }
  return lists;
}

/** The fields a ruleset body may have (id, version and last_updated are read-only and ignored, so that a GET's result can be sent back). */
const RULESET_FIELDS: readonly string[] = ['name', 'description', 'kind', 'phase', 'rules', 'id', 'version', 'last_updated'];

/** Longest ruleset name and description, in characters. */
export const MAX_RULESET_NAME = 200;
export const MAX_RULESET_DESCRIPTION = 500;

/**
 * The checks every write of a ruleset shares, whichever route it comes by
 * (POST, PUT by id, PUT of an entrypoint that creates or updates it): no
 * unknown field, and a name and description, when given, of the right type
 * and length. What each route adds (a required name, immutable fields) comes after.
 */
function checkRulesetFields(body: Record<string, unknown>): MoatError[] {
  const errors: MoatError[] = [];
  unknownFields(body, RULESET_FIELDS, '', errors);
  const name = body['name'];
  if (name !== undefined && name !== null) {
    if (typeof name !== 'string' || name.trim() === '') errors.push(invalidField('/name', '"name" must be a non-empty string'));
    else if (name.length > MAX_RULESET_NAME) errors.push(invalidField('/name', `"name" is longer than ${MAX_RULESET_NAME} characters`));
  }
  const d = body['description'];
  if (d !== undefined && d !== null && (typeof d !== 'string' || d.length > MAX_RULESET_DESCRIPTION)) {
    errors.push(invalidField('/description', `"description" must be a string of at most ${MAX_RULESET_DESCRIPTION} characters`));
  }
  return errors;
}

/** validateRule, remembering the lists of a valid rule's expression so that refsOfStored need not check it again. */
function checkedRule(body: unknown, at: string, env: RuleEnv): ReturnType<typeof validateRule> {
  const v = validateRule(body, at, env);
  if (v.rule !== undefined) rememberLists(v.rule.expression, v.rule.lists);
  return v;
}

/** What stored rules reference: lists (by canonical name) and executed rulesets. */
function refsOfStored(rules: readonly StoredRule[]): { lists: string[]; executes: { id: string; version: number | null }[] } {
  return {
    lists: [...new Set(rules.flatMap((r) => listsOfExpression(r.expression)))],
    executes: rules.flatMap((r) => (r.action === 'execute' && typeof r.action_parameters?.['id'] === 'string' ? [executeRef(r)] : [])),
  };
}

function executeRef(r: StoredRule): { id: string; version: number | null } {
  const v = r.action_parameters?.['version'];
  return { id: r.action_parameters!['id'] as string, version: typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : null };
}

function stampKey(s: VersionStamp): string {
  return `${s.id}/${s.stamp_version}/${s.stamp_token}`;
}

/** A version path segment's number when it is one (else the uncached path answers the error). */
function cacheableVersion(v: string): number | undefined {
  return /^[1-9][0-9]{0,15}$/.test(v) ? Number(v) : undefined;
}

/** Parses a version path segment ("1", "2", ...). */
export function versionNumber(v: string, rulesetId: string): number {
  if (!/^[1-9][0-9]{0,15}$/.test(v)) throw apiError('RULESET_VERSION_NOT_FOUND', `Could not find version ${v} of ruleset ${rulesetId}`);
  return Number(v);
}

function parsePosition(p: unknown, rules: readonly StoredRule[]): Position | undefined {
  if (p === undefined || p === null) return undefined;
  const bad = (m: string, at = '/position'): never => {
    throw apiError('RULE_BAD_POSITION', m, { pointer: at });
  };
  if (!isObject(p)) bad('"position" is {"before": id}, {"after": id} or {"index": n}');
  const o = p as Record<string, unknown>;
  const keys = Object.keys(o);
  if (keys.length !== 1) bad('"position" takes exactly one of before, after, index');
  const k = keys[0]!;
  if (k === 'index') {
    const n = o['index'];
    const max = rules.length + 1;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > max) bad(`"index" must be an integer from 1 to ${max}`, '/position/index');
    return { kind: 'index', index: n as number };
  }
  if (k === 'before' || k === 'after') {
    const id = o[k];
    if (typeof id !== 'string') bad(`"${k}" is a rule id, or "" for the ${k === 'before' ? 'top' : 'bottom'}`, `/position/${k}`);
    if (id !== '' && !rules.some((r) => r.id === id)) bad(`there is no rule ${id as string} to put this rule ${k}`, `/position/${k}`);
    return { kind: k, ruleId: id as string };
  }
  return bad(`unknown position "${k}"; use before, after or index`);
}

function insertAt(rules: StoredRule[], rule: StoredRule, position: Position | undefined): StoredRule[] {
  if (position === undefined) return [...rules, rule];
  let at: number;
  if (position.kind === 'index') at = position.index - 1;
  else if (position.ruleId === '') at = position.kind === 'before' ? 0 : rules.length;
  else {
    const i = rules.findIndex((r) => r.id === position.ruleId);
    at = position.kind === 'before' ? i : i + 1;
  }
  const out = [...rules];
  out.splice(at, 0, rule);
  return out;
}
