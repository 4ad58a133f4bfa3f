// Lists API routes: account IP lists, their items and bulk operation status,
// under /accounts/{account_id}/rules/lists, as in Cloudflare's v4 API. The
// behaviour (validation included) lives in ListService; this plugin maps HTTP
// onto it.

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { requireId } from '../auth.js';
import { sendJsonRevalidatable } from '../conditional.js';
import { ok } from '../envelope.js';
import { perPageOf, queryText } from '../request.js';
import type { Services } from '../services.js';

/** What the lists routes use. */
export interface ListRoutesOptions {
  services: Pick<Services, 'auth' | 'lists' | 'limits'>;
}

type Params = { account_id: string; list_id: string; item_id: string; operation_id: string };

/** Page size of an items listing without per_page. */
const DEFAULT_PER_PAGE = 25;

/** The lists routes. */
export const listRoutes: FastifyPluginAsync<ListRoutesOptions> = async (api, { services }) => {
  const { auth, lists, limits } = services;
  const base = '/accounts/:account_id/rules/lists';

  // The account the request may reach, plus a check of every id in the path.
  async function scope(req: FastifyRequest): Promise<{ accountId: string; params: Params }> {
    const { accountId } = await auth.scope(req);
    const params = req.params as Params;
    for (const k of ['list_id', 'item_id', 'operation_id'] as const) if (params[k] !== undefined) requireId(req, params[k]);
    return { accountId, params };
  }

  // Reads answer with a digest ETag, so that If-None-Match spares an unchanged
  // body (304), for GET and HEAD alike (see the rulesets routes' `read`).
  const read = (url: string, result: (req: FastifyRequest) => Promise<unknown>) =>
    api.route({ method: ['GET', 'HEAD'], url, handler: async (req, reply: FastifyReply) => sendJsonRevalidatable(req, reply, await result(req)) });

  api.post(base, async (req) => {
    const { accountId } = await scope(req);
    return ok(await lists.create(accountId, req.body));
  });

  read(base, async (req) => ok(await lists.all((await scope(req)).accountId)));

  api.get(`${base}/bulk_operations/:operation_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lists.operation(accountId, params.operation_id));
  });

  read(`${base}/:list_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lists.get(accountId, params.list_id));
  });

  api.put(`${base}/:list_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lists.update(accountId, params.list_id, req.body));
  });

  api.delete(`${base}/:list_id`, async (req) => {
    const { accountId, params } = await scope(req);
    await lists.delete(accountId, params.list_id);
    return ok({ id: params.list_id });
  });

  read(`${base}/:list_id/items`, async (req) => {
    const { accountId, params } = await scope(req);
    const page = await lists.items(accountId, params.list_id, {
      cursor: queryText(req, 'cursor'),
      search: queryText(req, 'search'),
      perPage: perPageOf(req, DEFAULT_PER_PAGE, limits.maxPerPage),
    });
    const cursors: Record<string, string> = {};
    if (page.before !== undefined) cursors.before = page.before;
    if (page.after !== undefined) cursors.after = page.after;
    return ok(page.items, { cursors });
  });

  read(`${base}/:list_id/items/:item_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lists.item(accountId, params.list_id, params.item_id));
  });

  // The three item writes answer 200 with the operation id (the SDK accepts any
  // 2xx; Cloudflare itself answers 200), after the whole body has been checked.
  const writes = [['POST', 'append'], ['PUT', 'replace'], ['DELETE', 'delete']] as const;
  for (const [method, op] of writes) {
    api.route({
      method,
      url: `${base}/:list_id/items`,
      handler: async (req) => {
        const { accountId, params } = await scope(req);
        return ok({ operation_id: await lists.write(accountId, params.list_id, op, req.body) });
      },
    });
  }
};
