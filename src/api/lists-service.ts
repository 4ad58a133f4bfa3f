// The Lists API's behaviour, independent of HTTP: account IP lists, their
// items and bulk operations. Bodies are validated whole (every error at once,
// with its JSON pointer) before anything is written; item writes are queued
// and applied later by the bulk operations runner (list-operations.ts).

import type { MoatError } from '../errors/index.js';
import {
  canonicalItemIp,
  managedListName,
  type BulkOp,
  type BulkOperationObject,
  type ListsRepo,
  type ItemInput,
  type ItemPage,
  type ListItemObject,
  type ListObject,
} from '../store/index.js';
import { ApiErrors, apiError, invalidField } from './api-error.js';
import type { ApiLimits } from './limits.js';
import { escapePointer, isObject, unknownFields } from './request.js';

const NAME = /^[a-zA-Z0-9_]+$/;
const MAX_NAME = 50;
const MAX_TEXT = 500;
// A body with thousands of bad items is answered with the first ones only; the
// last entry says how many more there were.
const MAX_REPORTED_ERRORS = 100;

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

/** Lists of one database, as the API sees them. */
export class ListService {

  /** `queued` is called after an item write is queued (the runner's wake). */
  constructor(
    private readonly lists: ListsRepo,
    private readonly limits: ApiLimits,
    private readonly queued: () => void = () => {},
  ) {}

  /** POST /lists: creates an empty list of kind ip. */
  async create(accountId: string, body: unknown): Promise<ListObject> {
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
    return await this.lists.create(accountId, { name: name!, kind: 'ip', description: description ?? '' }, this.limits.maxLists);
  }

  /** The account's lists, oldest first. */
  all(accountId: string): Promise<ListObject[]> {
    return this.lists.all(accountId);
  }

  /** One list (404 with 7300 when the account has none of that id). */
  get(accountId: string, listId: string): Promise<ListObject> {
    return this.lists.getOrThrow(accountId, listId);
  }

  /** PUT /lists/{id}: sets the description; name and kind may be sent only unchanged. */
  async update(accountId: string, listId: string, body: unknown): Promise<ListObject> {
    if (!isObject(body)) throw invalidField('', 'the body must be a JSON object: {"description"}');
    const errors: MoatError[] = [];
    unknownFields(body, ['name', 'kind', 'description'], '', errors);
    const description = text(body, 'description', errors, true);
    checkDescription(description, errors);
    throwAll(errors);
    // Name and kind are immutable; sending them unchanged (as a read-modify-write client does) is fine.
    const current = await this.lists.getOrThrow(accountId, listId);
    if (body.name !== undefined && body.name !== current.name) errors.push(invalidField('/name', 'the name of a list cannot be changed'));
    if (body.kind !== undefined && body.kind !== current.kind) errors.push(invalidField('/kind', 'the kind of a list cannot be changed'));
    throwAll(errors);
    return await this.lists.updateDescription(accountId, listId, description!);
  }

  /** Deletes a list (refused while a ruleset names it). */
  delete(accountId: string, listId: string): Promise<void> {
    return this.lists.delete(accountId, listId);
  }

  /** A page of items, in address order, from a cursor and with an optional prefix search. */
  items(accountId: string, listId: string, page: { cursor?: string | undefined; search?: string | undefined; perPage: number }): Promise<ItemPage> {
    return this.lists.items(accountId, listId, page);
  }

  /** One item. */
  item(accountId: string, listId: string, itemId: string): Promise<ListItemObject> {
    return this.lists.item(accountId, listId, itemId);
  }

  /** The state of a bulk operation. */
  operation(accountId: string, operationId: string): Promise<BulkOperationObject> {
    return this.lists.operation(accountId, operationId);
  }

  /**
   * An item write (append, replace or delete) to an existing list: the whole
   * body is checked, then queued for the runner; returns the operation id.
   */
  async write(accountId: string, listId: string, op: BulkOp, body: unknown): Promise<string> {
    await this.lists.getOrThrow(accountId, listId);
    const payload = op === 'delete' ? parseDeleteIds(body) : parseItems(body);
    const id = await this.lists.enqueue(accountId, listId, op, payload);
    this.queued();
    return id;
  }
}
