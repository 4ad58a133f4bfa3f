// Who the caller is and what it may see: GET /user/tokens/verify (the API
// token of the request, as Cloudflare answers it), GET /accounts and GET
// /zones (what the caller may reach, in Cloudflare's shapes and page-number
// pagination, as the SDK's accounts.list and zones.list read them), and
// GET /accounts/{id} and /zones/{id}. Moat's accounts and zones have ids, no
// names: the name is the id.

import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { apiError } from '../api-error.js';
import { principalOf } from '../auth.js';
import { ok } from '../envelope.js';
import { pageOf, perPageOf, queryText } from '../request.js';
import type { Services } from '../services.js';

/** What the identity routes use. */
export interface IdentityRoutesOptions {
  services: Pick<Services, 'auth' | 'store'>;
}

/** Page sizes of /accounts and /zones (Cloudflare's default and maximum). */
const DEFAULT_PER_PAGE = 20;
const MAX_PER_PAGE = 50;

function account(row: { id: string; created_on: string }) {
  return { id: row.id, name: row.id, type: 'standard', created_on: row.created_on, settings: { enforce_twofactor: false } };
}

function zone(row: { id: string; account_id: string; created_on: string }) {
  return {
    id: row.id,
    name: row.id,
    status: 'active',
    paused: false,
    type: 'full',
    account: { id: row.account_id, name: row.account_id },
    created_on: row.created_on,
    modified_on: row.created_on,
    activated_on: row.created_on,
  };
}

/** One page of `items` with Cloudflare's page-number result_info. */
function paged<T>(req: FastifyRequest, items: T[]) {
  const page = pageOf(req);
  const perPage = perPageOf(req, DEFAULT_PER_PAGE, MAX_PER_PAGE);
  const result = items.slice((page - 1) * perPage, page * perPage);
  return ok(result, { page, per_page: perPage, count: result.length, total_count: items.length, total_pages: Math.ceil(items.length / perPage) });
}

/** The identity routes. */
export const identityRoutes: FastifyPluginAsync<IdentityRoutesOptions> = async (api, { services }) => {
  const { auth } = services;
  const { users } = services.store;

  api.get('/user/tokens/verify', async (req) => {
    const p = principalOf(req);
    if (p.via !== 'token') throw apiError('AUTH_INVALID_TOKEN', 'Invalid API Token: this request authenticated with X-Auth-Key; send Authorization: Bearer <token>');
    return ok({ id: p.keyId, status: 'active' });
  });

  api.get('/accounts', async (req) => {
    const p = principalOf(req);
    const name = queryText(req, 'name');
    return paged(req, (await users.accountRows(p.accounts)).filter((a) => name === undefined || a.id === name).map(account));
  });

  api.get('/accounts/:account_id', async (req) => {
    const { accountId } = await auth.scope(req);
    return ok(account((await users.accountRows([accountId]))[0] ?? { id: accountId, created_on: '' }));
  });

  api.get('/zones', async (req) => {
    const p = principalOf(req);
    const accountId = queryText(req, 'account.id') ?? queryText(req, 'account[id]');
    const name = queryText(req, 'name');
    const rows = (await users.zoneRows(p.accounts, p.zones.keys())).filter((z) => (accountId === undefined || z.account_id === accountId) && (name === undefined || z.id === name));
    return paged(req, rows.map(zone));
  });

  api.get('/zones/:zone_id', async (req) => {
    const { zoneId } = await auth.scope(req);
    const row = (await users.zoneRows([], [zoneId!]))[0];
    if (row === undefined) throw apiError('AUTH_FORBIDDEN', 'Authentication error');
    return ok(zone(row));
  });
};
