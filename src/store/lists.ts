// Account IP lists, their items and bulk operations in the database, plus the
// operator-loaded managed lists ($svc.*). Also the item rules of Cloudflare's
// Lists API (which addresses and prefixes an item may hold, in canonical form)
// and the byte key that orders items by address, then mask.

import { canonicalListName, MANAGED_LISTS } from '../expr/index.js';
import { MoatError } from '../errors/index.js';
import { formatIp, maskAddress, parseCidr, parseIp, type IpAddress, type IpRangeList } from '../net/index.js';
import type { Database } from './database.js';
import { newId, nowStamp } from './ids.js';

/** A list as the API shows it. */
export interface ListObject {
  id: string;
  name: string;
  description: string;
  kind: string;
  num_items: number;
  num_referencing_filters: number;
  created_on: string;
  modified_on: string;
}

/** An IP item as the API shows it (`comment` only when there is one). */
export interface ListItemObject {
  id: string;
  ip: string;
  comment?: string;
  created_on: string;
  modified_on: string;
}

/** A bulk operation's state as the status endpoint shows it. */
export interface BulkOperationObject {
  id: string;
  status: 'pending' | 'running' | 'completed' | 'failed';
  completed?: string;
  error?: string;
}

/** What a bulk operation does: append/upsert items, replace all items, or delete items by id. */
export type BulkOp = 'append' | 'replace' | 'delete';

/** One item of an append or replace payload, already canonical. */
export interface ItemInput {
  ip: string;
  comment?: string | undefined;
}

/** A canonical item address: its text and the key that orders it. */
export interface CanonicalIp {
  ip: string;
  sortKey: Buffer;
}

/** A page of items and the cursors around it. */
export interface ItemPage {
  items: ListItemObject[];
  before?: string;
  after?: string;
}

/** The message of an operation that would take a list past its cap (Cloudflare's wording). */
export const TOO_MANY_ITEMS_MESSAGE = 'This list is at the maximum number of items';

/** The sort key: family byte, address bytes, mask byte; memcmp order is address order, then mask. */
function sortKeyOf(a: IpAddress, length: number): Buffer {
  const b = Buffer.alloc(a.family === 4 ? 6 : 18);
  b[0] = a.family;
  for (let i = 0; i < a.words.length; i++) b.writeUInt32BE(a.words[i]!, 1 + 4 * i);
  b[b.length - 1] = length;
  return b;
}

/**
 * Checks one item address against the Lists API rules and returns its canonical
 * form, or the reason it is refused. Accepted: an IPv4 address, an IPv4 CIDR
 * /8-/32 (a /32 is stored as the bare address, so the two spellings are one
 * entry), an IPv6 CIDR /4-/64. A lone IPv6 address is refused because
 * Cloudflare only takes IPv6 as prefixes of /64 or wider.
 */
export function canonicalItemIp(text: string): CanonicalIp | string {
  if (text.includes('..')) return `"${text}" is a range; list items are an IPv4 address or a CIDR`;
  const slash = text.indexOf('/');
  if (slash < 0) {
    const a = parseIp(text);
    if (a === undefined) return `"${text}" is not a valid IP address or CIDR`;
    if (a.family === 6) {
      return `"${text}" is a single IPv6 address; IPv6 items are prefixes from /4 to /64 (give its /64: ${formatIp(maskAddress(a, 64))}/64)`;
    }
    return { ip: formatIp(a), sortKey: sortKeyOf(a, 32) };
  }
  const r = parseCidr(text);
  if (!r.ok) {
    if (r.reason === 'host-bits') return `"${text}" has host bits set (did you mean ${r.network}?)`;
    if (r.reason === 'length') return `"${text}" has an invalid prefix length`;
    return `"${text}" is not a valid CIDR`;
  }
  const { address, length } = r.prefix;
  if (address.family === 4) {
    if (length < 8) return `"${text}": IPv4 prefixes must be from /8 to /32`;
    return { ip: length === 32 ? formatIp(address) : `${formatIp(address)}/${length}`, sortKey: sortKeyOf(address, length) };
  }
  if (length < 4 || length > 64) return `"${text}": IPv6 prefixes must be from /4 to /64`;
  return { ip: `${formatIp(address)}/${length}`, sortKey: sortKeyOf(address, length) };
}

/** The canonical name of a managed list (`$cf.malware` → `svc.malware`), or undefined when it is not one. */
export function managedListName(name: string): string | undefined {
  const n = canonicalListName(name.replace(/^\$/, ''));
  return MANAGED_LISTS.includes(n) ? n : undefined;
}

/** Text of an inclusive range: the address, the CIDR it exactly covers, or `a..b`. */
function rangeText(family: 4 | 6, first: readonly number[], last: readonly number[]): string {
  const bits = family === 4 ? 32 : 128;
  const a: IpAddress = { family, words: first };
  const b: IpAddress = { family, words: last };
  // The prefix length is the number of leading bits first and last share; it is
  // a CIDR when first has zeros and last has ones in every bit after that.
  let len = 0;
  while (len < bits && bit(first, len) === bit(last, len)) len++;
  let exact = true;
  for (let i = len; i < bits && exact; i++) exact = bit(first, i) === 0 && bit(last, i) === 1;
  if (len === bits) return formatIp(a);
  if (exact) return `${formatIp(a)}/${len}`;
  return `${formatIp(a)}..${formatIp(b)}`;
}

function bit(words: readonly number[], i: number): number {
  return (words[i >>> 5]! >>> (31 - (i & 31))) & 1;
}

/** The entries of a parsed list file as distinct canonical texts, in file order. */
export function rangeListTexts(list: IpRangeList): string[] {
  const out = new Set<string>();
  for (let i = 0; i < list.v4First.length; i++) out.add(rangeText(4, [list.v4First[i]!], [list.v4Last[i]!]));
  for (let j = 0; j < list.v6First.length / 4; j++) {
    out.add(rangeText(6, Array.from(list.v6First.subarray(4 * j, 4 * j + 4)), Array.from(list.v6Last.subarray(4 * j, 4 * j + 4))));
  }
  return [...out];
}

interface ListRow {
  id: string;
  name: string;
  description: string;
  kind: string;
  created_on: string;
  modified_on: string;
  num_items: number;
  num_referencing_filters: number;
}

/** A list_items row as both backends read it. */
export interface ItemRow {
  id: string;
  ip: string;
  sort_key: Buffer;
  comment: string | null;
  created_on: string;
  modified_on: string;
}

/** A bulk_operations row as both backends read it. */
export interface OperationRow {
  id: string;
  account_id: string;
  list_id: string;
  op: BulkOp;
  payload: string | null;
  status: BulkOperationObject['status'];
  error: string | null;
  completed: string | null;
}

/** A queued operation as the runner sees it. */
export interface QueuedOperation {
  id: string;
  accountId: string;
  listId: string;
}

export function itemObject(r: ItemRow): ListItemObject {
  const o: ListItemObject = { id: r.id, ip: r.ip, created_on: r.created_on, modified_on: r.modified_on };
  if (r.comment !== null) o.comment = r.comment;
  return o;
}

// Cursors are opaque to clients: a direction letter and the hex sort key of the
// item the page stops at, so they stay valid while items are added or removed.
// postgres/pg-lists.ts uses these too, so a cursor one backend gave stays
// valid on the other after migrate-store.
export function encodeCursor(dir: 'a' | 'b', key: Buffer): string {
  return Buffer.from(dir + key.toString('hex')).toString('base64url');
}

export function decodeCursor(cursor: string): { dir: 'a' | 'b'; key: Buffer } | undefined {
  if (!/^[A-Za-z0-9_-]{1,100}$/.test(cursor)) return undefined;
  const s = Buffer.from(cursor, 'base64url').toString('latin1');
  const m = /^([ab])((?:[0-9a-f]{2}){6}|(?:[0-9a-f]{2}){18})$/.exec(s);
  if (m === null) return undefined;
  return { dir: m[1] as 'a' | 'b', key: Buffer.from(m[2]!, 'hex') };
}

/**
 * The page of up to perPage+1 rows read in direction `dir` (the extra one says
 * whether there is a neighbour that way; `rows` is consumed), with its cursors:
 * `after` unless going forward found the end, `before` when the page did not
 * start at the beginning. Both backends page with this.
 */
export function itemPage(rows: ItemRow[], perPage: number, dir: 'a' | 'b', hasCursor: boolean): ItemPage {
  const more = rows.length > perPage;
  if (more) rows.pop();
  if (dir === 'b') rows.reverse();
  const page: ItemPage = { items: rows.map(itemObject) };
  if (rows.length === 0) return page;
  const first = rows[0]!.sort_key;
  const last = rows[rows.length - 1]!.sort_key;
  if (dir === 'a' ? more : true) page.after = encodeCursor('a', last);
  if (dir === 'b' ? more : hasCursor) page.before = encodeCursor('b', first);
  return page;
}

// A list with its item count and the number of rulesets (latest versions) that
// name it; the column order is the ListObject's key order. Plain SQL both
// backends run (postgres/pg-lists.ts appends its own WHERE with $n parameters).
export const LIST_SELECT = `
  SELECT l.id, l.name, l.description, l.kind, l.created_on, l.modified_on,
    (SELECT count(*) FROM list_items i WHERE i.list_id = l.id) AS num_items,
    (SELECT count(*) FROM ruleset_list_refs f JOIN rulesets r ON r.id = f.ruleset_id
      WHERE r.account_id = l.account_id AND f.list_name = l.name) AS num_referencing_filters
  FROM lists l`;

/** Lists, items, bulk operations and managed lists of one database. */
export class ListStore {
  constructor(private readonly store: Database) {}

  private get db() {
    return this.store.db;
  }

  /** Names of the account's lists (what `$name` may refer to). */
  accountListNames(accountId: string): Set<string> {
    const rows = this.db.prepare('SELECT name FROM lists WHERE account_id = ?').all(accountId) as { name: string }[];
    return new Set(rows.map((r) => r.name));
  }

  /** Creates a list; LIST_NAME_TAKEN when the account has one of that name, LIST_TOO_MANY past `maxLists`. */
  create(accountId: string, input: { name: string; kind: string; description: string }, maxLists: number): ListObject {
    return this.store.write(() => {
      const taken = this.db.prepare('SELECT 1 FROM lists WHERE account_id = ? AND name = ?').get(accountId, input.name);
      if (taken !== undefined) throw new MoatError('LIST_NAME_TAKEN', `A list named "${input.name}" already exists in this account`, { pointer: '/name' });
      const { n } = this.db.prepare('SELECT count(*) AS n FROM lists WHERE account_id = ?').get(accountId) as { n: number };
      if (n >= maxLists) throw new MoatError('LIST_TOO_MANY', `The account already has ${n} lists, the most it may have`);
      const id = newId();
      const now = nowStamp();
      // Accounts are created with their users; a list of an account nobody has is impossible through the API.
      this.db.prepare('INSERT OR IGNORE INTO accounts (id, created_on) VALUES (?, ?)').run(accountId, now);
      this.db
        .prepare('INSERT INTO lists (id, account_id, name, description, kind, created_on, modified_on) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run(id, accountId, input.name, input.description, input.kind, now, now);
      return this.getOrThrow(accountId, id);
    });
  }

  /** The account's lists, oldest first, without items. */
  all(accountId: string): ListObject[] {
    return this.db.prepare(`${LIST_SELECT} WHERE l.account_id = ? ORDER BY l.created_on, l.rowid`).all(accountId) as ListRow[];
  }

  /** One list of the account, or undefined (another account's list is as missing as a deleted one). */
  get(accountId: string, listId: string): ListObject | undefined {
    return this.db.prepare(`${LIST_SELECT} WHERE l.account_id = ? AND l.id = ?`).get(accountId, listId) as ListRow | undefined;
  }

  /** Like get, throwing LIST_NOT_FOUND. */
  getOrThrow(accountId: string, listId: string): ListObject {
    const l = this.get(accountId, listId);
    if (l === undefined) throw new MoatError('LIST_NOT_FOUND', `List ${listId} not found`);
    return l;
  }

  /** Sets a list's description. */
  updateDescription(accountId: string, listId: string, description: string): ListObject {
    return this.store.write(() => {
      const r = this.db.prepare('UPDATE lists SET description = ?, modified_on = ? WHERE account_id = ? AND id = ?').run(description, nowStamp(), accountId, listId);
      if (r.changes === 0) throw new MoatError('LIST_NOT_FOUND', `List ${listId} not found`);
      return this.getOrThrow(accountId, listId);
    });
  }

  /**
   * Deletes a list and its items. Refused with LIST_IN_USE while the latest
   * version of a ruleset of the account names it. Operations still queued for
   * the list fail, so their status says why nothing happened.
   */
  delete(accountId: string, listId: string): void {
    this.store.write(() => {
      const l = this.getOrThrow(accountId, listId);
      if (l.num_referencing_filters > 0) {
        const names = this.db
          .prepare('SELECT r.id FROM ruleset_list_refs f JOIN rulesets r ON r.id = f.ruleset_id WHERE r.account_id = ? AND f.list_name = ? ORDER BY r.id')
          .all(accountId, l.name) as { id: string }[];
        throw new MoatError('LIST_IN_USE', `List "${l.name}" is used by ruleset ${names.map((n) => n.id).join(', ')}; remove it from the rules first`);
      }
      this.db
        .prepare("UPDATE bulk_operations SET status = 'failed', error = 'the list was deleted', payload = NULL, completed = ? WHERE list_id = ? AND status IN ('pending', 'running')")
        .run(nowStamp(), listId);
      this.db.prepare('DELETE FROM lists WHERE id = ?').run(listId);
    });
  }

  /**
   * A page of a list's items in address order. `cursor` is one returned as
   * `before` or `after`; `search` keeps items whose text starts with it.
   * Throws API_BAD_QUERY for a cursor this store did not make.
   */
  items(accountId: string, listId: string, options: { cursor?: string | undefined; perPage: number; search?: string | undefined }): ItemPage {
    return this.store.read(() => {
      this.getOrThrow(accountId, listId);
      const where = ['list_id = ?'];
      const args: unknown[] = [listId];
      if (options.search !== undefined && options.search !== '') {
        const s = options.search.toLowerCase();
        where.push('substr(ip, 1, ?) = ?');
        args.push(s.length, s);
      }
      let dir: 'a' | 'b' = 'a';
      if (options.cursor !== undefined && options.cursor !== '') {
        const c = decodeCursor(options.cursor);
        if (c === undefined) throw new MoatError('API_BAD_QUERY', 'cursor is not one this API returned', { pointer: 'cursor' });
        dir = c.dir;
        where.push(dir === 'a' ? 'sort_key > ?' : 'sort_key < ?');
        args.push(c.key);
      }
      // One row more than a page says whether the page has a neighbour that way.
      const rows = this.db
        .prepare(`SELECT id, ip, sort_key, comment, created_on, modified_on FROM list_items WHERE ${where.join(' AND ')} ORDER BY sort_key ${dir === 'a' ? 'ASC' : 'DESC'} LIMIT ?`)
        .all(...args, options.perPage + 1) as ItemRow[];
      return itemPage(rows, options.perPage, dir, options.cursor !== undefined && options.cursor !== '');
    });
  }

  /** One item of a list, or LIST_ITEM_NOT_FOUND / LIST_NOT_FOUND. */
  item(accountId: string, listId: string, itemId: string): ListItemObject {
    return this.store.read(() => {
      this.getOrThrow(accountId, listId);
      const r = this.db.prepare('SELECT id, ip, sort_key, comment, created_on, modified_on FROM list_items WHERE list_id = ? AND id = ?').get(listId, itemId) as ItemRow | undefined;
      if (r === undefined) throw new MoatError('LIST_ITEM_NOT_FOUND', `Item ${itemId} not found in list ${listId}`);
      return itemObject(r);
    });
  }

  /** Queues a bulk operation on a list (which must exist) and returns its id. */
  enqueue(accountId: string, listId: string, op: BulkOp, payload: ItemInput[] | string[]): string {
    return this.store.write(() => {
      this.getOrThrow(accountId, listId);
      const id = newId();
      this.db
        .prepare("INSERT INTO bulk_operations (id, account_id, list_id, op, payload, status, created_on) VALUES (?, ?, ?, ?, ?, 'pending', ?)")
        .run(id, accountId, listId, op, JSON.stringify(payload), nowStamp());
      return id;
    });
  }

  /** A bulk operation of the account, or LIST_OPERATION_NOT_FOUND. */
  operation(accountId: string, operationId: string): BulkOperationObject {
    const r = this.db.prepare('SELECT id, status, error, completed FROM bulk_operations WHERE account_id = ? AND id = ?').get(accountId, operationId) as OperationRow | undefined;
    if (r === undefined) throw new MoatError('LIST_OPERATION_NOT_FOUND', `Bulk operation ${operationId} not found`);
    const o: BulkOperationObject = { id: r.id, status: r.status };
    if (r.completed !== null) o.completed = r.completed;
    if (r.error !== null) o.error = r.error;
    return o;
  }

  /**
   * The oldest unfinished operation (FIFO by insertion). A `running` one is one
   * a stopped process did not finish: its transaction rolled back, so it is
   * simply run again.
   */
  nextOperation(): QueuedOperation | undefined {
    const r = this.db
      .prepare("SELECT id, account_id, list_id FROM bulk_operations WHERE status IN ('pending', 'running') ORDER BY rowid LIMIT 1")
      .get() as OperationRow | undefined;
    return r === undefined ? undefined : { id: r.id, accountId: r.account_id, listId: r.list_id };
  }

  /** Marks an operation running (visible on the status endpoint while it is applied). */
  markRunning(operationId: string): void {
    this.store.write(() => {
      this.db.prepare("UPDATE bulk_operations SET status = 'running' WHERE id = ? AND status = 'pending'").run(operationId);
    });
  }

  /**
   * Applies a queued operation in one transaction and records the outcome:
   * completed, or failed with its reason (and nothing changed). The payload is
   * dropped once the operation is over.
   */
  applyOperation(operationId: string, maxItems: number): BulkOperationObject['status'] {
    let failure: string | undefined;
    try {
      this.store.write(() => {
        const op = this.db.prepare('SELECT * FROM bulk_operations WHERE id = ?').get(operationId) as OperationRow | undefined;
        if (op === undefined || (op.status !== 'pending' && op.status !== 'running')) return;
        this.applyPayload(op, maxItems);
        this.db.prepare("UPDATE bulk_operations SET status = 'completed', payload = NULL, completed = ? WHERE id = ?").run(nowStamp(), operationId);
      });
      return 'completed';
    } catch (err) {
      if (err instanceof MoatError && err.errorName === 'STORE_BUSY') throw err;
      failure = err instanceof MoatError ? err.message : `internal error: ${(err as Error).message}`;
    }
    this.store.write(() => {
      this.db.prepare("UPDATE bulk_operations SET status = 'failed', error = ?, payload = NULL, completed = ? WHERE id = ?").run(failure, nowStamp(), operationId);
    });
    return 'failed';
  }

  private applyPayload(op: OperationRow, maxItems: number): void {
    const list = this.db.prepare('SELECT id FROM lists WHERE id = ? AND account_id = ?').get(op.list_id, op.account_id);
    if (list === undefined) throw new MoatError('LIST_NOT_FOUND', 'the list was deleted');
    const payload = JSON.parse(op.payload ?? '[]') as unknown[];
    const now = nowStamp();
    if (op.op === 'delete') {
      const del = this.db.prepare('DELETE FROM list_items WHERE list_id = ? AND id = ?');
      // Ids that are not (or no longer) in the list are skipped: the goal, their absence, holds.
      for (const id of payload as string[]) del.run(op.list_id, id);
    } else {
      const items = (payload as ItemInput[]).map((it, i) => {
        const c = canonicalItemIp(String(it.ip));
        if (typeof c === 'string') throw new MoatError('LIST_BAD_ITEM', `item ${i}: ${c}`);
        return { ...c, comment: it.comment ?? null };
      });
      const upsert = this.db.prepare(`
        INSERT INTO list_items (id, list_id, ip, sort_key, comment, created_on, modified_on) VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (list_id, ip) DO UPDATE SET comment = excluded.comment, modified_on = excluded.modified_on`);
      if (op.op === 'replace') {
        // Entries in both the old and new content keep their id and created_on.
        this.db.exec('CREATE TEMP TABLE IF NOT EXISTS moat_keep_ips (ip TEXT PRIMARY KEY) WITHOUT ROWID');
        this.db.exec('DELETE FROM temp.moat_keep_ips');
        const keep = this.db.prepare('INSERT OR IGNORE INTO temp.moat_keep_ips (ip) VALUES (?)');
        for (const it of items) keep.run(it.ip);
        this.db.prepare('DELETE FROM list_items WHERE list_id = ? AND ip NOT IN (SELECT ip FROM temp.moat_keep_ips)').run(op.list_id);
        this.db.exec('DELETE FROM temp.moat_keep_ips');
      }
      for (const it of items) upsert.run(newId(), op.list_id, it.ip, it.sortKey, it.comment, now, now);
      const { n } = this.db.prepare('SELECT count(*) AS n FROM list_items WHERE list_id = ?').get(op.list_id) as { n: number };
      if (n > maxItems) throw new MoatError('LIST_TOO_MANY_ITEMS', TOO_MANY_ITEMS_MESSAGE);
    }
    this.db.prepare('UPDATE lists SET modified_on = ? WHERE id = ?').run(now, op.list_id);
  }

  /**
   * What names a list's contents as they are now, for caching them (the control
   * channel's hub): its id and the generation its content changes count; undefined when missing.
   */
  contentKey(accountId: string, name: string): string | undefined {
    const canonical = managedListName(name);
    if (canonical !== undefined) {
      const m = this.db.prepare('SELECT generation FROM managed_lists WHERE name = ?').get(canonical) as { generation: number } | undefined;
      return `managed:${canonical}:${m?.generation ?? 'none'}`;
    }
    const l = this.db.prepare('SELECT id, generation FROM lists WHERE account_id = ? AND name = ?').get(accountId, name) as { id: string; generation: number } | undefined;
    return l === undefined ? undefined : `${l.id}:${l.generation}`;
  }

  /** The item texts of an account list in address order (for a daemon bundle); LIST_NOT_FOUND when missing. */
  entries(accountId: string, name: string): string[] {
    return this.store.read(() => {
      const l = this.db.prepare('SELECT id FROM lists WHERE account_id = ? AND name = ?').get(accountId, name) as { id: string } | undefined;
      if (l === undefined) throw new MoatError('LIST_NOT_FOUND', `The account has no list named "${name}"`);
      const rows = this.db.prepare('SELECT ip FROM list_items WHERE list_id = ? ORDER BY sort_key').all(l.id) as { ip: string }[];
      return rows.map((r) => r.ip);
    });
  }

  /**
   * Replaces the content of a managed list atomically with `entries` (canonical
   * texts: addresses, CIDRs or `a..b` ranges). Returns the number stored.
   */
  loadManaged(name: string, entries: readonly string[], description: string): number {
    const canonical = managedListName(name);
    if (canonical === undefined) throw new MoatError('LIST_NOT_FOUND', `"${name}" is not a managed list; they are ${MANAGED_LISTS.join(', ')}`);
    return this.store.write(() => {
      this.db.prepare('DELETE FROM managed_list_entries WHERE name = ?').run(canonical);
      const ins = this.db.prepare('INSERT OR IGNORE INTO managed_list_entries (name, entry) VALUES (?, ?)');
      let n = 0;
      for (const e of entries) n += ins.run(canonical, e).changes;
      this.db
        .prepare('INSERT INTO managed_lists (name, description, num_items, modified_on) VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET description = excluded.description, num_items = excluded.num_items, modified_on = excluded.modified_on')
        .run(canonical, description, n, nowStamp());
      return n;
    });
  }

  /** The entries of a managed list (`svc.malware`, `$cf.malware`); empty when never loaded. */
  managedEntries(name: string): string[] {
    const canonical = managedListName(name);
    if (canonical === undefined) throw new MoatError('LIST_NOT_FOUND', `"${name}" is not a managed list; they are ${MANAGED_LISTS.join(', ')}`);
    const rows = this.db.prepare('SELECT entry FROM managed_list_entries WHERE name = ?').all(canonical) as { entry: string }[];
    return rows.map((r) => r.entry);
  }
}
