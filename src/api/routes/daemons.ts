// The fleet status API (Moat's own, not Cloudflare's, so under /moat/ in the
// account): the daemons of an account with what each runs, as the control
// channel records it. GET lists them (page-number pagination, filters by the
// ruleset version they run: "is my change in force everywhere?"), GET one,
// DELETE revokes one and closes its connection at once.

import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { HEARTBEAT_SECONDS } from '../../channel/index.js';
import { isId, type DaemonInfo } from '../../store/index.js';
import { apiError } from '../api-error.js';
import { requireId } from '../auth.js';
import { ok } from '../envelope.js';
import { pageOf, perPageOf, queryText } from '../request.js';
import type { Services } from '../services.js';

/** What the fleet routes use. */
export interface DaemonRoutesOptions {
  services: Pick<Services, 'auth' | 'store' | 'hub'>;
}

const DEFAULT_PER_PAGE = 20;
const MAX_PER_PAGE = 100;

/** The route of an account's daemons. */
export const DAEMONS_PATH = '/accounts/:account_id/moat/daemons';

/**
 * A daemon as the API shows it. `connected` also needs a recent `last_seen`:
 * a control plane killed with its daemons connected cannot record their
 * disconnection, and its rows must not say "connected" for ever.
 */
function view(d: DaemonInfo, staleMs: number, now: number) {
  const fresh = d.last_seen !== null && now - Date.parse(d.last_seen) <= staleMs;
  return { ...d, connected: d.connected && fresh };
}

/** The fleet routes. */
export const daemonRoutes: FastifyPluginAsync<DaemonRoutesOptions> = async (api, { services }) => {
  const { auth, hub } = services;
  const { daemons } = services.store;
  // Rows are refreshed every heartbeat (of whichever control plane holds the connection): three missed ones are stale.
  const staleMs = 3 * Math.max(hub.heartbeatSeconds, HEARTBEAT_SECONDS) * 1000 + 1000;

  async function one(req: FastifyRequest): Promise<DaemonInfo> {
    const { accountId } = await auth.scope(req);
    const id = (req.params as { daemon_id: string }).daemon_id;
    requireId(req, id);
    const d = await daemons.get(id);
    if (d === undefined || d.account_id !== accountId) throw apiError('DAEMON_NOT_FOUND', `The account has no daemon ${id}`);
    return d;
  }

  api.get(DAEMONS_PATH, async (req) => {
    const { accountId } = await auth.scope(req);
    const rulesetId = queryText(req, 'ruleset_id');
    const version = queryText(req, 'version');
    const connected = queryText(req, 'connected');
    const name = queryText(req, 'name');
    if (rulesetId !== undefined && !isId(rulesetId)) throw apiError('API_BAD_QUERY', 'ruleset_id must be a ruleset id (32 hex characters)', { pointer: 'ruleset_id' });
    if (version !== undefined && (rulesetId === undefined || !/^[1-9]\d{0,9}$/.test(version))) {
      throw apiError('API_BAD_QUERY', 'version must be a version number ("3") and comes with ruleset_id', { pointer: 'version' });
    }
    if (connected !== undefined && connected !== 'true' && connected !== 'false') throw apiError('API_BAD_QUERY', 'connected must be true or false', { pointer: 'connected' });
    const page = pageOf(req);
    const perPage = perPageOf(req, DEFAULT_PER_PAGE, MAX_PER_PAGE);
    const now = Date.now();
    const all = (await daemons.list({ accountId }))
      .map((d) => view(d, staleMs, now))
      .filter(
        (d) =>
          (name === undefined || d.name === name) &&
          (connected === undefined || d.connected === (connected === 'true')) &&
          (rulesetId === undefined || d.rulesets.some((r) => r.id === rulesetId && (version === undefined || r.version === version))),
      );
    const result = all.slice((page - 1) * perPage, page * perPage);
    return ok(result, { page, per_page: perPage, count: result.length, total_count: all.length, total_pages: Math.ceil(all.length / perPage) });
  });

  api.get(`${DAEMONS_PATH}/:daemon_id`, async (req) => ok(view(await one(req), staleMs, Date.now())));

  // Revoking is idempotent: a revoked daemon answers as it is.
  api.delete(`${DAEMONS_PATH}/:daemon_id`, async (req) => {
    let d = await one(req);
    if (d.revoked_on === null) d = await daemons.revoke(d.id);
    hub.revoked(d.id);
    return ok(view(d, staleMs, Date.now()));
  });
};
