// Notification routes (Cloudflare's alerting v3) under
// /accounts/{account_id}/alerting/v3: policies, webhook destinations,
// available alert types and the delivery history, in the shapes the
// official SDK reads (creates and updates answer {id}, as Cloudflare does).

import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { availableAlerts, FieldErrors } from '../../notify/index.js';
import { ApiErrors, apiError } from '../api-error.js';
import { requireId } from '../auth.js';
import { ok } from '../envelope.js';
import { pageOf, perPageOf, queryText } from '../request.js';
import type { Services } from '../services.js';

/** What the alerting routes use. */
export interface AlertingRoutesOptions {
  services: Pick<Services, 'auth' | 'alerting' | 'store'>;
}

const DEFAULT_PER_PAGE = 25;
const MAX_PER_PAGE = 1000;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

/** A `since`/`before` bound as the stored stamps' format (UTC, microseconds), or a 7014. */
function timeBound(req: FastifyRequest, key: string): string | undefined {
  const v = queryText(req, key);
  if (v === undefined) return undefined;
  const t = Date.parse(v);
  if (!RFC3339.test(v) || Number.isNaN(t)) throw apiError('API_BAD_QUERY', `${key} must be an RFC 3339 time such as 2026-11-24T10:00:00Z`, { pointer: key });
  return new Date(t).toISOString().replace(/Z$/, '000Z');
}

/** The alerting routes. */
export const alertingRoutes: FastifyPluginAsync<AlertingRoutesOptions> = async (api, { services }) => {
  const { auth, alerting } = services;
  const store = alerting.store;
  const base = '/accounts/:account_id/alerting/v3';

  // Body checks report every problem at once: each is an entry of errors[].
  api.setErrorHandler((err) => {
    throw err instanceof FieldErrors ? new ApiErrors(err.errors) : err;
  });

  async function scope(req: FastifyRequest): Promise<{ accountId: string; id: string }> {
    const { accountId } = await auth.scope(req);
    const id = (req.params as { id?: string }).id ?? '';
    if (id !== '') requireId(req, id);
    return { accountId, id };
  }

  api.get(`${base}/available_alerts`, async (req) => {
    await scope(req);
    return ok(availableAlerts());
  });

  api.get(`${base}/policies`, async (req) => ok(await store.policies((await scope(req)).accountId)));
  api.post(`${base}/policies`, async (req) => ok({ id: await store.createPolicy((await scope(req)).accountId, req.body) }));
  api.get(`${base}/policies/:id`, async (req) => {
    const { accountId, id } = await scope(req);
    return ok(await store.policy(accountId, id));
  });
  api.put(`${base}/policies/:id`, async (req) => {
    const { accountId, id } = await scope(req);
    return ok({ id: await store.updatePolicy(accountId, id, req.body) });
  });
  api.delete(`${base}/policies/:id`, async (req) => {
    const { accountId, id } = await scope(req);
    await store.deletePolicy(accountId, id);
    return ok({ id });
  });

  const hooks = `${base}/destinations/webhooks`;
  api.get(hooks, async (req) => ok(await store.webhooks((await scope(req)).accountId)));
  api.post(hooks, async (req) => ok({ id: await alerting.createWebhook((await scope(req)).accountId, req.body) }));
  api.get(`${hooks}/:id`, async (req) => {
    const { accountId, id } = await scope(req);
    return ok(await store.webhook(accountId, id));
  });
  api.put(`${hooks}/:id`, async (req) => {
    const { accountId, id } = await scope(req);
    return ok({ id: await alerting.updateWebhook(accountId, id, req.body) });
  });
  api.delete(`${hooks}/:id`, async (req) => {
    const { accountId, id } = await scope(req);
    await store.deleteWebhook(accountId, id);
    return ok({ id });
  });

  api.get(`${base}/history`, async (req) => {
    const { accountId } = await scope(req);
    const perPage = perPageOf(req, DEFAULT_PER_PAGE, MAX_PER_PAGE);
    const page = pageOf(req);
    const { items, total } = await services.store.outbox.history(accountId, { since: timeBound(req, 'since'), before: timeBound(req, 'before'), page, perPage });
    return ok(items, { page, per_page: perPage, count: items.length, total_count: total, total_pages: Math.ceil(total / perPage) });
  });
};
