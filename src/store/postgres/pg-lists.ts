// Account IP lists, items, bulk operations and managed lists on PostgreSQL:
// ListsRepo as ../lists.ts keeps it on SQLite, statement for statement, so
// the API answers the same (same rows, order, cursors, errors). Runs only on
// the context's client, inside the transaction its store opened; a bulk
// operation is applied in a savepoint of it, so a failure rolls back the
// items alone and the failure is recorded in the same transaction.

import { MANAGED_LISTS } from '../../expr/index.js';
import { MoatError } from '../../errors/index.js';
import { newId, nowStamp } from '../ids.js';
import {
  canonicalItemIp,
  decodeCursor,
  itemObject,
  itemPage,
  LIST_SELECT,
  managedListName,
  TOO_MANY_ITEMS_MESSAGE,
  type BulkOp,
  type BulkOperationObject,
  type ItemInput,
  type ItemPage,
  type ItemRow,
  type ListItemObject,
  type ListObject,
  type OperationRow,
  type QueuedOperation,
} from '../lists.js';
import type { ListsRepo } from '../types.js';
import { errorCode, isConnectionError, RETRYABLE_STATES } from './connection.js';
import type { PgRepoContext } from './pg-repo-context.js';

/**
 * Rows per INSERT of a bulk operation (arrays through unnest): one statement
 * per row, a round trip each, took 4.0 and 7.2 s for a 20,000-item append
 * against 1.0 and 0.9 s batched (two runs, loopback test cluster, shared
 * 2-core machine; SQLite: 0.46 s). 5000 keeps a statement's parameters to a
 * few hundred KiB.
 */
const UPSERT_BATCH = 5000;

/** Errors that are the transaction's, not the operation's: the store retries or reports them; they are never recorded as the operation failing. */
function isTransactionError(err: unknown): boolean {
  return RETRYABLE_STATES.has(errorCode(err)) || isConnectionError(err) || (err instanceof MoatError && err.errorName === 'STORE_BUSY');
}

/** ListsRepo on PostgreSQL. */
export class PgListsRepo implements ListsRepo {
  constructor(private readonly ctx: PgRepoContext) {}

  private async rows<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.ctx.client.query(sql, params)).rows as R[];
  }

  private async row<R>(sql: string, params: unknown[] = []): Promise<R | undefined> {
    return (await this.rows<R>(sql, params))[0];
  }

  private async run(sql: string, params: unknown[] = []): Promise<number> {
    return (await this.ctx.client.query(sql, params)).rowCount ?? 0;
  }

  async accountListNames(accountId: string): Promise<Set<string>> {
    const rows = await this.rows<{ name: string }>('SELECT name FROM lists WHERE account_id = $1', [accountId]);
    return new Set(rows.map((r) => r.name));
  }

  async create(accountId: string, input: { name: string; kind: string; description: string }, maxLists: number): Promise<ListObject> {
    const taken = await this.row('SELECT 1 FROM lists WHERE account_id = $1 AND name = $2', [accountId, input.name]);
    if (taken !== undefined) throw new MoatError('LIST_NAME_TAKEN', `A list named "${input.name}" already exists in this account`, { pointer: '/name' });
    const { n } = (await this.row<{ n: number }>('SELECT count(*) AS n FROM lists WHERE account_id = $1', [accountId]))!;
    if (n >= maxLists) throw new MoatError('LIST_TOO_MANY', `The account already has ${n} lists, the most it may have`);
    const id = newId();
    const now = nowStamp();
    await this.run('INSERT INTO accounts (id, created_on) VALUES ($1, $2) ON CONFLICT DO NOTHING', [accountId, now]);
    await this.run('INSERT INTO lists (id, account_id, name, description, kind, created_on, modified_on) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
      id,
      accountId,
      input.name,
      input.description,
      input.kind,
      now,
      now,
    ]);
    return this.getOrThrow(accountId, id);
  }

  all(accountId: string): Promise<ListObject[]> {
    return this.rows<ListObject>(`${LIST_SELECT} WHERE l.account_id = $1 ORDER BY l.created_on COLLATE "C", l.rowid`, [accountId]);
  }

  get(accountId: string, listId: string): Promise<ListObject | undefined> {
    return this.row<ListObject>(`${LIST_SELECT} WHERE l.account_id = $1 AND l.id = $2`, [accountId, listId]);
  }

  async getOrThrow(accountId: string, listId: string): Promise<ListObject> {
    const l = await this.get(accountId, listId);
    if (l === undefined) throw new MoatError('LIST_NOT_FOUND', `List ${listId} not found`);
    return l;
  }

  async updateDescription(accountId: string, listId: string, description: string): Promise<ListObject> {
    const n = await this.run('UPDATE lists SET description = $1, modified_on = $2 WHERE account_id = $3 AND id = $4', [description, nowStamp(), accountId, listId]);
    if (n === 0) throw new MoatError('LIST_NOT_FOUND', `List ${listId} not found`);
    return this.getOrThrow(accountId, listId);
  }

  async delete(accountId: string, listId: string): Promise<void> {
    const l = await this.getOrThrow(accountId, listId);
    if (l.num_referencing_filters > 0) {
      const names = await this.rows<{ id: string }>(
        'SELECT r.id FROM ruleset_list_refs f JOIN rulesets r ON r.id = f.ruleset_id WHERE r.account_id = $1 AND f.list_name = $2 ORDER BY r.id',
        [accountId, l.name],
      );
      throw new MoatError('LIST_IN_USE', `List "${l.name}" is used by ruleset ${names.map((n) => n.id).join(', ')}; remove it from the rules first`);
    }
    await this.run(
      "UPDATE bulk_operations SET status = 'failed', error = 'the list was deleted', payload = NULL, completed = $1 WHERE list_id = $2 AND status IN ('pending', 'running')",
      [nowStamp(), listId],
    );
    await this.run('DELETE FROM lists WHERE id = $1', [listId]);
  }

  async items(accountId: string, listId: string, options: { cursor?: string | undefined; perPage: number; search?: string | undefined }): Promise<ItemPage> {
    const q = itemsQuery(accountId, listId, options);
    return itemsAnswer(q, await this.rows<ItemRow & { found: number | null }>(q.sql, q.args));
  }

  async item(accountId: string, listId: string, itemId: string): Promise<ListItemObject> {
    await this.getOrThrow(accountId, listId);
    const r = await this.row<ItemRow>('SELECT id, ip, sort_key, comment, created_on, modified_on FROM list_items WHERE list_id = $1 AND id = $2', [listId, itemId]);
    if (r === undefined) throw new MoatError('LIST_ITEM_NOT_FOUND', `Item ${itemId} not found in list ${listId}`);
    return itemObject(r);
  }

  async enqueue(accountId: string, listId: string, op: BulkOp, payload: ItemInput[] | string[]): Promise<string> {
    await this.getOrThrow(accountId, listId);
    const id = newId();
    await this.run("INSERT INTO bulk_operations (id, account_id, list_id, op, payload, status, created_on) VALUES ($1, $2, $3, $4, $5, 'pending', $6)", [
      id,
      accountId,
      listId,
      op,
      JSON.stringify(payload),
      nowStamp(),
    ]);
    return id;
  }

  async operation(accountId: string, operationId: string): Promise<BulkOperationObject> {
    const r = await this.row<OperationRow>('SELECT id, status, error, completed FROM bulk_operations WHERE account_id = $1 AND id = $2', [accountId, operationId]);
    if (r === undefined) throw new MoatError('LIST_OPERATION_NOT_FOUND', `Bulk operation ${operationId} not found`);
    const o: BulkOperationObject = { id: r.id, status: r.status };
    if (r.completed !== null) o.completed = r.completed;
    if (r.error !== null) o.error = r.error;
    return o;
  }

  async nextOperation(): Promise<QueuedOperation | undefined> {
    // FIFO by insertion (rowid, migration 9). A `running` one was interrupted:
    // its transaction rolled back with its process, so it is simply run again.
    const r = await this.row<OperationRow>("SELECT id, account_id, list_id FROM bulk_operations WHERE status IN ('pending', 'running') ORDER BY rowid LIMIT 1");
    return r === undefined ? undefined : { id: r.id, accountId: r.account_id, listId: r.list_id };
  }

  async markRunning(operationId: string): Promise<void> {
    await this.run("UPDATE bulk_operations SET status = 'running' WHERE id = $1 AND status = 'pending'", [operationId]);
  }

  /**
   * As on SQLite: completed, or failed with its reason and nothing of it
   * applied; or `running` when another replica is applying it now. The
   * operation's row is locked first (FOR UPDATE SKIP LOCKED): a second replica
   * neither waits (holding a connection and a transaction for the whole
   * operation) nor applies it again; it looks later, and takes it over if the
   * holder died (its transaction rolled back, the lock gone). The items are
   * written in a savepoint, rolled back alone when the operation fails, and
   * the failure recorded in the same transaction.
   */
  async applyOperation(operationId: string, maxItems: number): Promise<BulkOperationObject['status']> {
    const client = this.ctx.client;
    const op = await this.row<OperationRow>('SELECT * FROM bulk_operations WHERE id = $1 FOR UPDATE SKIP LOCKED', [operationId]);
    if (op === undefined) return (await this.row('SELECT 1 FROM bulk_operations WHERE id = $1', [operationId])) === undefined ? 'completed' : 'running';
    if (op.status !== 'pending' && op.status !== 'running') return 'completed';
    let failure: string;
    await client.query('SAVEPOINT moat_bulk_apply');
    try {
      await this.applyPayload(op, maxItems);
      await this.run("UPDATE bulk_operations SET status = 'completed', payload = NULL, completed = $1 WHERE id = $2", [nowStamp(), operationId]);
      await client.query('RELEASE SAVEPOINT moat_bulk_apply');
      return 'completed';
    } catch (err) {
      if (isTransactionError(err)) throw err;
      failure = err instanceof MoatError ? err.message : `internal error: ${(err as Error).message}`;
      await client.query('ROLLBACK TO SAVEPOINT moat_bulk_apply');
      await client.query('RELEASE SAVEPOINT moat_bulk_apply');
    }
    await this.run("UPDATE bulk_operations SET status = 'failed', error = $1, payload = NULL, completed = $2 WHERE id = $3", [failure, nowStamp(), operationId]);
    return 'failed';
  }

  private async applyPayload(op: OperationRow, maxItems: number): Promise<void> {
    const list = await this.row('SELECT id FROM lists WHERE id = $1 AND account_id = $2', [op.list_id, op.account_id]);
    if (list === undefined) throw new MoatError('LIST_NOT_FOUND', 'the list was deleted');
    const payload = JSON.parse(op.payload ?? '[]') as unknown[];
    const now = nowStamp();
    if (op.op === 'delete') {
      // Ids that are not (or no longer) in the list are skipped: the goal, their absence, holds.
      await this.run('DELETE FROM list_items WHERE list_id = $1 AND id = ANY($2::text[])', [op.list_id, (payload as unknown[]).map(String)]);
    } else {
      const items = (payload as ItemInput[]).map((it, i) => {
        const c = canonicalItemIp(String(it.ip));
        if (typeof c === 'string') throw new MoatError('LIST_BAD_ITEM', `item ${i}: ${c}`);
        return { ...c, comment: it.comment ?? null };
      });
      if (op.op === 'replace') {
        // Entries in both the old and new content keep their id and created_on.
        await this.run('DELETE FROM list_items WHERE list_id = $1 AND NOT (ip = ANY($2::text[]))', [op.list_id, items.map((it) => it.ip)]);
      }
      // SQLite upserts one by one, so an address given twice keeps the first
      // one's id and the last one's comment. One statement may not touch a
      // row twice (ON CONFLICT DO UPDATE), so duplicates are merged first:
      // the first position, the last comment: the same rows.
      const byIp = new Map<string, { ip: string; sortKey: Buffer; comment: string | null }>();
      for (const it of items) {
        const seen = byIp.get(it.ip);
        if (seen === undefined) byIp.set(it.ip, { ...it });
        else seen.comment = it.comment;
      }
      const unique = [...byIp.values()];
      for (let i = 0; i < unique.length; i += UPSERT_BATCH) {
        const batch = unique.slice(i, i + UPSERT_BATCH);
        await this.run(
          `INSERT INTO list_items (id, list_id, ip, sort_key, comment, created_on, modified_on)
           SELECT u.id, $1, u.ip, u.sort_key, u.comment, $2, $2 FROM unnest($3::text[], $4::text[], $5::bytea[], $6::text[]) WITH ORDINALITY AS u(id, ip, sort_key, comment, n)
           ORDER BY u.n
           ON CONFLICT (list_id, ip) DO UPDATE SET comment = excluded.comment, modified_on = excluded.modified_on`,
          [op.list_id, now, batch.map(() => newId()), batch.map((b) => b.ip), batch.map((b) => b.sortKey), batch.map((b) => b.comment)],
        );
      }
      const { n } = (await this.row<{ n: number }>('SELECT count(*) AS n FROM list_items WHERE list_id = $1', [op.list_id]))!;
      if (n > maxItems) throw new MoatError('LIST_TOO_MANY_ITEMS', TOO_MANY_ITEMS_MESSAGE);
    }
    await this.run('UPDATE lists SET modified_on = $1 WHERE id = $2', [now, op.list_id]);
  }

  async contentKey(accountId: string, name: string): Promise<string | undefined> {
    const canonical = managedListName(name);
    if (canonical !== undefined) {
      const m = await this.row<{ generation: number }>('SELECT generation FROM managed_lists WHERE name = $1', [canonical]);
      return `managed:${canonical}:${m?.generation ?? 'none'}`;
    }
    const l = await this.row<{ id: string; generation: number }>('SELECT id, generation FROM lists WHERE account_id = $1 AND name = $2', [accountId, name]);
    return l === undefined ? undefined : `${l.id}:${l.generation}`;
  }

  async entries(accountId: string, name: string): Promise<string[]> {
    const l = await this.row<{ id: string }>('SELECT id FROM lists WHERE account_id = $1 AND name = $2', [accountId, name]);
    if (l === undefined) throw new MoatError('LIST_NOT_FOUND', `The account has no list named "${name}"`);
    const rows = await this.rows<{ ip: string }>('SELECT ip FROM list_items WHERE list_id = $1 ORDER BY sort_key', [l.id]);
    return rows.map((r) => r.ip);
  }

  async loadManaged(name: string, entries: readonly string[], description: string): Promise<number> {
    const canonical = managedListName(name);
    if (canonical === undefined) throw new MoatError('LIST_NOT_FOUND', `"${name}" is not a managed list; they are ${MANAGED_LISTS.join(', ')}`);
    await this.run('DELETE FROM managed_list_entries WHERE name = $1', [canonical]);
    let n = 0;
    for (let i = 0; i < entries.length; i += UPSERT_BATCH) {
      n += await this.run('INSERT INTO managed_list_entries (name, entry) SELECT $1, e FROM unnest($2::text[]) AS e ON CONFLICT DO NOTHING', [
        canonical,
        entries.slice(i, i + UPSERT_BATCH),
      ]);
    }
    await this.run(
      'INSERT INTO managed_lists (name, description, num_items, modified_on) VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO UPDATE SET description = excluded.description, num_items = excluded.num_items, modified_on = excluded.modified_on',
      [canonical, description, n, nowStamp()],
    );
    return n;
  }

  async managedEntries(name: string): Promise<string[]> {
    const canonical = managedListName(name);
    if (canonical === undefined) throw new MoatError('LIST_NOT_FOUND', `"${name}" is not a managed list; they are ${MANAGED_LISTS.join(', ')}`);
    // SQLite gives them in its primary key's order (name, entry: the text's byte order); so does COLLATE "C" here, whatever the database's locale.
    const rows = await this.rows<{ entry: string }>('SELECT entry FROM managed_list_entries WHERE name = $1 ORDER BY entry COLLATE "C"', [canonical]);
    return rows.map((r) => r.entry);
  }
}

/**
 * A page of a list's items as one statement: the list's existence and the
 * page in one snapshot, so PgStore runs it on the pool without BEGIN and
 * COMMIT (4 round trips a page before; bench api, a page of 25: 685 us of
 * server CPU against SQLite's 142). `found` is null when the account has no
 * such list; a row with a null id stands for an empty page.
 */
export function itemsQuery(accountId: string, listId: string, options: { cursor?: string | undefined; perPage: number; search?: string | undefined }): { sql: string; args: unknown[]; dir: 'a' | 'b'; hasCursor: boolean; listId: string; perPage: number } {
  const args: unknown[] = [listId, accountId];
  const where = ['list_id = $1'];
  if (options.search !== undefined && options.search !== '') {
    const s = options.search.toLowerCase();
    args.push(s.length, s);
    where.push(`substr(ip, 1, $${args.length - 1}) = $${args.length}`);
  }
  let dir: 'a' | 'b' = 'a';
  const hasCursor = options.cursor !== undefined && options.cursor !== '';
  if (hasCursor) {
    const c = decodeCursor(options.cursor!);
    if (c === undefined) throw new MoatError('API_BAD_QUERY', 'cursor is not one this API returned', { pointer: 'cursor' });
    dir = c.dir;
    args.push(c.key);
    where.push(dir === 'a' ? `sort_key > $${args.length}` : `sort_key < $${args.length}`);
  }
  // One row more than a page says whether the page has a neighbour that way.
  args.push(options.perPage + 1);
  const sql = `SELECT (SELECT 1 FROM lists WHERE id = $1 AND account_id = $2) AS found, i.id, i.ip, i.sort_key, i.comment, i.created_on, i.modified_on
    FROM (SELECT 1) d LEFT JOIN LATERAL (SELECT id, ip, sort_key, comment, created_on, modified_on FROM list_items WHERE ${where.join(' AND ')} ORDER BY sort_key ${dir === 'a' ? 'ASC' : 'DESC'} LIMIT $${args.length}) i ON true
    ORDER BY i.sort_key ${dir === 'a' ? 'ASC' : 'DESC'}`;
  return { sql, args, dir, hasCursor, listId, perPage: options.perPage };
}

/** The page itemsQuery's rows make, or LIST_NOT_FOUND. */
export function itemsAnswer(q: ReturnType<typeof itemsQuery>, rows: Array<ItemRow & { found: number | null }>): ItemPage {
  if (rows[0]?.found == null) throw new MoatError('LIST_NOT_FOUND', `List ${q.listId} not found`);
  const items = rows[0].id == null ? [] : rows.map(({ found: _found, ...item }) => item);
  return itemPage(items, q.perPage, q.dir, q.hasCursor);
}
