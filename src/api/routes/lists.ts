// Lists API routes: account IP lists, their items and bulk operation status,
// under /accounts/{account_id}/rules/lists, as in Cloudflare's v4 API. Item
// writes are validated whole before anything is queued, then applied by the
// bulk operations runner.

import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { MoatError } from '../../errors/index.js';
import { canonicalItemIp, ListStore, managedListName, type ItemInput } from '../../store/index.js';
import { ApiErrors, apiError, invalidField } from '../api-error.js';
import { requireId, scopeOf } from '../auth.js';
import { ok } from '../envelope.js';
import { startListOperations } from '../list-operations.js';
import { principalOf, type ApiContext } from '../server.js';

const NAME = /^[a-zA-Z0-9_]+$/;
const MAX_NAME = 50;
const MAX_TEXT = 500;
const DEFAULT_PER_PAGE = 25;
// A body with thousands of bad items is answered with the first ones only; the
// last entry says how many more there were.
const MAX_REPORTED_ERRORS = 100;

type Params = { account_id: string; list_id: string; item_id: string; operation_id: string };

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function escapePointer(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** Throws every collected error at once, or returns when there is none. */
function throwAll(errors: MoatError[]): void {
  if (errors.length === 0) return;
  if (errors.length > MAX_REPORTED_ERRORS) {
    const more = errors.length - MAX_REPORTED_ERRORS;
    errors = [...errors.slice(0, MAX_REPORTED_ERRORS), apiError('LIST_BAD_ITEM', `and ${more} more invalid items`)];
  }
  throw new ApiErrors(errors);
}

function text(body: Record<string, unknown>, key: string, errors: MoatError[], required: boolean): string | undefined {
  const v = body[key];
  if (v === undefined) {
    if (required) errors.push(invalidField(`/${key}`, `${key} is required`));
    return undefined;
  }
  if (typeof v !== 'string') {
    errors.push(invalidField(`/${key}`, `${key} must be a string`));
    return undefined;
  }
  return v;
}

function checkName(name: string, errors: MoatError[]): void {
  if (managedListName(name) !== undefined || /^\$?(svc|cf)\./.test(name)) {
    errors.push(
      apiError('LIST_MANAGED_READONLY', `"${name}" is a managed list name: managed lists ($svc.*, $cf.*) are loaded by the operator with "moat lists load-managed", not created through the API`, {
        pointer: '/name',
      }),
    );
  } else if (name.length === 0 || name.length > MAX_NAME || !NAME.test(name)) {
    errors.push(invalidField('/name', `"${name}" is not a valid list name: use 1 to ${MAX_NAME} of a-z A-Z 0-9 _`));
  }
}

function checkDescription(description: string | undefined, errors: MoatError[]): void {
  if (description !== undefined && description.length > MAX_TEXT) {
    errors.push(invalidField('/description', `description is ${description.length} characters long; the most is ${MAX_TEXT}`));
  }
}

function unknownFields(body: Record<string, unknown>, known: readonly string[], prefix: string, errors: MoatError[]): void {
  for (const k of Object.keys(body)) {
    if (!known.includes(k)) errors.push(invalidField(`${prefix}/${escapePointer(k)}`, `unknown field "${k}"`));
  }
}

/**
 * Validates an append or replace body (a JSON array of {ip, comment?}) and
 * returns its items in canonical form; every bad item is reported, with its
 * JSON pointer.
 */
function parseItems(body: unknown): ItemInput[] {
  if (!Array.isArray(body)) throw invalidField('', 'the body must be a JSON array of items: [{"ip": "192.0.2.1", "comment": "..."}]');
  const errors: MoatError[] = [];
  const items: ItemInput[] = [];
  body.forEach((raw: unknown, i) => {
    if (!isObject(raw)) {
      errors.push(apiError('LIST_BAD_ITEM', `item ${i} must be an object with "ip"`, { pointer: `/${i}` }));
      return;
    }
    for (const k of Object.keys(raw)) {
      if (k === 'ip' || k === 'comment') continue;
      const why = ['hostname', 'asn', 'redirect'].includes(k) ? `"${k}" items need a list of kind ${k}; Moat lists are of kind ip` : `unknown field "${k}"`;
      errors.push(apiError('LIST_BAD_ITEM', why, { pointer: `/${i}/${escapePointer(k)}` }));
    }
    let ip: string | undefined;
    if (typeof raw.ip !== 'string') {
      errors.push(apiError('LIST_BAD_ITEM', raw.ip === undefined ? 'ip is required' : 'ip must be a string', { pointer: `/${i}/ip` }));
    } else {
      const c = canonicalItemIp(raw.ip);
      if (typeof c === 'string') errors.push(apiError('LIST_BAD_ITEM', c, { pointer: `/${i}/ip` }));
      else ip = c.ip;
    }
    let comment: string | undefined;
    if (raw.comment !== undefined && raw.comment !== null) {
      if (typeof raw.comment !== 'string') errors.push(apiError('LIST_BAD_ITEM', 'comment must be a string', { pointer: `/${i}/comment` }));
      else if (raw.comment.length > MAX_TEXT) errors.push(apiError('LIST_BAD_ITEM', `comment is ${raw.comment.length} characters long; the most is ${MAX_TEXT}`, { pointer: `/${i}/comment` }));
      else comment = raw.comment;
    }
    if (ip !== undefined) items.push(comment === undefined ? { ip } : { ip, comment });
  });
  throwAll(errors);
  return items;
}

/** Validates a delete body ({"items": [{"id": ...}, ...]}, at least one) and returns the ids. */
function parseDeleteIds(body: unknown): string[] {
  if (!isObject(body) || !Array.isArray(body.items)) throw invalidField('/items', 'the body must be {"items": [{"id": "<item id>"}, ...]}');
  if (body.items.length === 0) throw invalidField('/items', 'give at least one item to delete');
  const errors: MoatError[] = [];
  const ids: string[] = [];
  body.items.forEach((raw: unknown, i) => {
    if (!isObject(raw) || typeof raw.id !== 'string' || !/^[0-9a-f]{32}$/.test(raw.id)) {
      errors.push(apiError('LIST_BAD_ITEM', 'id must be a 32-character lowercase hex item id', { pointer: `/items/${i}/id` }));
    } else {
      ids.push(raw.id);
    }
  });
  throwAll(errors);
  return ids;
}

function perPage(req: FastifyRequest, max: number): number {
  const v = (req.query as Record<string, unknown>).per_page;
  if (v === undefined || v === '') return DEFAULT_PER_PAGE;
  const n = typeof v === 'string' && /^[0-9]{1,9}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= max)) throw apiError('API_BAD_QUERY', `per_page must be an integer from 1 to ${max}`, { pointer: 'per_page' });
  return n;
}

function queryText(req: FastifyRequest, key: string): string | undefined {
  const v = (req.query as Record<string, unknown>)[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw apiError('API_BAD_QUERY', `${key} may be given once`, { pointer: key });
  return v;
}

/** Registers the lists routes and starts the bulk operations runner (stopped by the server's onClose). */
export function registerLists(api: FastifyInstance, ctx: ApiContext): void {
  const lists = new ListStore(ctx.store);
  const runner = startListOperations({ lists, maxListItems: ctx.limits.maxListItems, logger: api.log });
  ctx.listOperations = runner;
  const base = '/accounts/:account_id/rules/lists';

  // The account the request may reach, plus a check of every id in the path.
  function scope(req: FastifyRequest): { accountId: string; params: Params } {
    const { accountId } = scopeOf(req, principalOf(req), ctx.users);
    const params = req.params as Params;
    for (const k of ['list_id', 'item_id', 'operation_id'] as const) if (params[k] !== undefined) requireId(req, params[k]);
    return { accountId, params };
  }

  api.post(base, async (req) => {
    const { accountId } = scope(req);
    const body = req.body;
    if (!isObject(body)) throw invalidField('', 'the body must be a JSON object: {"name", "kind", "description"}');
    const errors: MoatError[] = [];
    unknownFields(body, ['name', 'kind', 'description'], '', errors);
    const name = text(body, 'name', errors, true);
    if (name !== undefined) checkName(name, errors);
    const kind = text(body, 'kind', errors, true);
    if (kind !== undefined && kind !== 'ip') {
      errors.push(invalidField('/kind', `kind "${kind}" is not supported: Moat lists hold IP addresses only (kind "ip")`));
    }
    const description = text(body, 'description', errors, false);
    checkDescription(description, errors);
    throwAll(errors);
    return ok(lists.create(accountId, { name: name!, kind: 'ip', description: description ?? '' }, ctx.limits.maxLists));
  });

  api.get(base, async (req) => {
    const { accountId } = scope(req);
    return ok(lists.all(accountId));
  });

  api.get(`${base}/bulk_operations/:operation_id`, async (req) => {
    const { accountId, params } = scope(req);
    return ok(lists.operation(accountId, params.operation_id));
  });

  api.get(`${base}/:list_id`, async (req) => {
    const { accountId, params } = scope(req);
    return ok(lists.getOrThrow(accountId, params.list_id));
  });

  api.put(`${base}/:list_id`, async (req) => {
    const { accountId, params } = scope(req);
    const body = req.body;
    if (!isObject(body)) throw invalidField('', 'the body must be a JSON object: {"description"}');
    const errors: MoatError[] = [];
    unknownFields(body, ['name', 'kind', 'description'], '', errors);
    const description = text(body, 'description', errors, true);
    checkDescription(description, errors);
    throwAll(errors);
    // Name and kind are immutable; sending them unchanged (as a read-modify-write client does) is fine.
    const current = lists.getOrThrow(accountId, params.list_id);
    if (body.name !== undefined && body.name !== current.name) errors.push(invalidField('/name', 'the name of a list cannot be changed'));
    if (body.kind !== undefined && body.kind !== current.kind) errors.push(invalidField('/kind', 'the kind of a list cannot be changed'));
    throwAll(errors);
    return ok(lists.updateDescription(accountId, params.list_id, description!));
  });

  api.delete(`${base}/:list_id`, async (req) => {
    const { accountId, params } = scope(req);
    lists.delete(accountId, params.list_id);
    return ok({ id: params.list_id });
  });

  api.get(`${base}/:list_id/items`, async (req) => {
    const { accountId, params } = scope(req);
    const page = lists.items(accountId, params.list_id, {
      cursor: queryText(req, 'cursor'),
      search: queryText(req, 'search'),
      perPage: perPage(req, ctx.limits.maxPerPage),
    });
    const cursors: Record<string, string> = {};
    if (page.before !== undefined) cursors.before = page.before;
    if (page.after !== undefined) cursors.after = page.after;
    return ok(page.items, { cursors });
  });

  api.get(`${base}/:list_id/items/:item_id`, async (req) => {
    const { accountId, params } = scope(req);
    return ok(lists.item(accountId, params.list_id, params.item_id));
  });

  // The three item writes answer 200 with the operation id (the SDK accepts any
  // 2xx; Cloudflare itself answers 200), after the whole body has been checked.
  const writes = [['POST', 'append', parseItems], ['PUT', 'replace', parseItems], ['DELETE', 'delete', parseDeleteIds]] as const;
  for (const [method, op, parse] of writes) {
    api.route({
      method,
      url: `${base}/:list_id/items`,
      handler: async (req) => {
        const { accountId, params } = scope(req);
        lists.getOrThrow(accountId, params.list_id);
        const id = lists.enqueue(accountId, params.list_id, op, parse(req.body));
        runner.wake();
        return ok({ operation_id: id });
      },
    });
  }
}
