// Load Balancing API routes (#18): monitors, pools, the bulk update of pools
// and pool health, under /accounts/{account_id}/load_balancers, as in
// Cloudflare's v4 API. Behaviour lives in LoadBalancingService; this plugin
// maps HTTP onto it and parses the two pagination styles of the pools listing.

import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { apiError } from '../api-error.js';
import { requireId } from '../auth.js';
import { ok } from '../envelope.js';
import type { PageRequest } from '../load-balancing-service.js';
import { queryText } from '../request.js';
import type { Services } from '../services.js';

/** What the routes use. */
export interface LoadBalancerRoutesOptions {
  services: Pick<Services, 'auth' | 'loadBalancing' | 'limits'>;
}

type Params = { account_id: string; pool_id?: string; monitor_id?: string };

/** Pools a bulk update changes without pagination parameters (seed section 8), and a page's default size. */
export const DEFAULT_POOLS_PAGE = 25;

function nonNegative(req: FastifyRequest, key: string, min: number, max: number): number | undefined {
  const v = queryText(req, key);
  if (v === undefined) return undefined;
  const n = /^[0-9]{1,9}$/.test(v) ? Number(v) : NaN;
  if (!(n >= min && n <= max)) throw apiError('API_BAD_QUERY', `${key} must be an integer from ${min} to ${max}`, { pointer: key });
  return n;
}

/**
 * The page a request asks for: `limit`/`offset` or `page`/`per_page`. Mixing
 * the two styles is refused (400/7014): on a bulk write, guessing which one the
 * caller meant could change the wrong pools. Without either, `whole` pools
 * (all of them for a listing, the first 25 for a bulk update).
 */
export function pageRequest(req: FastifyRequest, maxPerPage: number, whole: number): PageRequest {
  const limit = nonNegative(req, 'limit', 1, maxPerPage);
  const offset = nonNegative(req, 'offset', 0, 1_000_000_000);
  const page = nonNegative(req, 'page', 1, 1_000_000_000);
  const perPage = nonNegative(req, 'per_page', 1, maxPerPage);
  const offsetStyle = limit !== undefined || offset !== undefined;
  const pageStyle = page !== undefined || perPage !== undefined;
  if (offsetStyle && pageStyle) {
    throw apiError('API_BAD_QUERY', 'use either limit/offset or page/per_page, not both', { pointer: page !== undefined ? 'page' : 'per_page' });
  }
  if (offsetStyle) return { style: 'offset', offset: offset ?? 0, limit: limit ?? DEFAULT_POOLS_PAGE, page: 1 };
  if (pageStyle) {
    const size = perPage ?? DEFAULT_POOLS_PAGE;
    const p = page ?? 1;
    return { style: 'page', offset: (p - 1) * size, limit: size, page: p };
  }
  return { style: 'none', offset: 0, limit: whole, page: 1 };
}

/** The load balancer routes. */
export const loadBalancerRoutes: FastifyPluginAsync<LoadBalancerRoutesOptions> = async (api, { services }) => {
  const { auth, loadBalancing: lb, limits } = services;
  const base = '/accounts/:account_id/load_balancers';

  async function scope(req: FastifyRequest): Promise<{ accountId: string; params: Params }> {
    const { accountId } = await auth.scope(req);
    const params = req.params as Params;
    for (const k of ['pool_id', 'monitor_id'] as const) if (params[k] !== undefined) requireId(req, params[k]);
    return { accountId, params };
  }

  // ---- monitors
  api.post(`${base}/monitors`, async (req) => ok(await lb.createMonitor((await scope(req)).accountId, req.body)));
  api.get(`${base}/monitors`, async (req) => {
    const all = await lb.monitors((await scope(req)).accountId);
    return ok(all, { page: 1, per_page: all.length, count: all.length, total_count: all.length, total_pages: 1 });
  });
  api.get(`${base}/monitors/:monitor_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.monitor(accountId, params.monitor_id!));
  });
  api.put(`${base}/monitors/:monitor_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.updateMonitor(accountId, params.monitor_id!, req.body, false));
  });
  api.patch(`${base}/monitors/:monitor_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.updateMonitor(accountId, params.monitor_id!, req.body, true));
  });
  api.delete(`${base}/monitors/:monitor_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.deleteMonitor(accountId, params.monitor_id!));
  });

  // ---- pools
  api.post(`${base}/pools`, async (req) => ok(await lb.createPool((await scope(req)).accountId, req.body)));
  api.get(`${base}/pools`, async (req) => {
    const { accountId } = await scope(req);
    // A listing without pagination parameters returns every pool (the SDK's list is a single page).
    const monitor = queryText(req, 'monitor') ?? null;
    if (monitor !== null && !/^[0-9a-f]{32}$/.test(monitor)) throw apiError('API_BAD_QUERY', 'monitor must be a monitor id (32 hex characters)', { pointer: 'monitor' });
    const { result, info } = await lb.pools(accountId, pageRequest(req, limits.maxPerPage, Number.MAX_SAFE_INTEGER), monitor);
    return ok(result, info);
  });
  api.patch(`${base}/pools`, async (req) => {
    const { accountId } = await scope(req);
    const { result, info } = await lb.bulkEdit(accountId, req.body, pageRequest(req, limits.maxPerPage, DEFAULT_POOLS_PAGE));
    return ok(result, info);
  });
  api.get(`${base}/pools/:pool_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.pool(accountId, params.pool_id!));
  });
  api.put(`${base}/pools/:pool_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.updatePool(accountId, params.pool_id!, req.body, false));
  });
  api.patch(`${base}/pools/:pool_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.updatePool(accountId, params.pool_id!, req.body, true));
  });
  api.delete(`${base}/pools/:pool_id`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.deletePool(accountId, params.pool_id!));
  });
  api.get(`${base}/pools/:pool_id/health`, async (req) => {
    const { accountId, params } = await scope(req);
    return ok(await lb.poolHealth(accountId, params.pool_id!));
  });
};
