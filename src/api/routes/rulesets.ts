// Rulesets API routes at account and zone level (Cloudflare's paths, bodies and
// status codes): rulesets, versions, rules, phase entrypoints and rules by tag.
// The behaviour lives in RulesetService; this file maps HTTP onto it.

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { requireId } from '../auth.js';
import { sendCached, sendJsonRevalidatable } from '../conditional.js';
import { ok } from '../envelope.js';
import { dryRunOf, perPageOf, queryText } from '../request.js';
import type { Services } from '../services.js';

/** What the rulesets routes use. */
export interface RulesetRoutesOptions {
  services: Pick<Services, 'auth' | 'rulesets' | 'limits'>;
}

type Params = { account_id?: string; zone_id?: string; ruleset_id: string; version: string; rule_id: string; phase: string; rule_tag: string };
type Req = FastifyRequest<{ Params: Params; Querystring: Record<string, string | undefined> }>;

/** Page size of a rulesets listing without per_page. */
const DEFAULT_PER_PAGE = 50;

/** Every ruleset route, under both levels. */
export const rulesetRoutes: FastifyPluginAsync<RulesetRoutesOptions> = async (api, { services }) => {
  const { auth, rulesets: service, limits } = services;
  const scope = (req: Req) => auth.scope(req);
  const id = (req: Req) => {
    requireId(req, req.params.ruleset_id);
    return req.params.ruleset_id;
  };
  const ruleId = (req: Req) => {
    requireId(req, req.params.rule_id);
    return req.params.rule_id;
  };
  // A dry run answers 200 with the ruleset that would have been written (204 stays 204), as Cloudflare does.
  const written = (reply: FastifyReply, result: unknown) => reply.type('application/json').send(ok(result ?? null));
  const noContent = (reply: FastifyReply) => reply.code(204).send();
  // Revalidatable reads answer GET and HEAD with one handler: fastify's own
  // HEAD route would send a 304 with Content-Length: 0, which RFC 9110 forbids
  // (a 304's Content-Length, if any, is that of the 200's body).
  const read = (url: string, handler: (req: Req, reply: FastifyReply) => Promise<FastifyReply>) => api.route({ method: ['GET', 'HEAD'], url, handler });

  for (const lvl of ['/accounts/:account_id', '/zones/:zone_id']) {
    const base = `${lvl}/rulesets`;
    // Reads of one version answer cached bytes with the version's ETag; listings
    // are computed each time and get a digest ETag, so If-None-Match spares the body.
    read(base, async (req: Req, reply) => {
      const s = await scope(req);
      const page = await service.list(s, queryText(req, 'cursor'), perPageOf(req, DEFAULT_PER_PAGE, limits.maxPerPage));
      return sendJsonRevalidatable(req, reply, ok(page.result, page.cursor === undefined ? { count: page.result.length } : { count: page.result.length, cursor: page.cursor }));
    });
    api.post(base, async (req: Req, reply) => written(reply, await service.create(await scope(req), req.body, dryRunOf(req))));

    const ep = `${base}/phases/:phase/entrypoint`;
    read(ep, async (req: Req, reply) => sendCached(req, reply, await service.entrypointResponse(await scope(req), req.params.phase)));
    api.put(ep, async (req: Req, reply) => written(reply, await service.putEntrypoint(await scope(req), req.params.phase, req.body, dryRunOf(req))));
    read(`${ep}/versions`, async (req: Req, reply) => sendJsonRevalidatable(req, reply, ok(await service.entrypointVersions(await scope(req), req.params.phase))));
    read(`${ep}/versions/:version`, async (req: Req, reply) =>
      sendCached(req, reply, await service.entrypointVersionResponse(await scope(req), req.params.phase, req.params.version)),
    );

    const one = `${base}/:ruleset_id`;
    read(one, async (req: Req, reply) => {
      const s = await scope(req);
      return sendCached(req, reply, await service.getResponse(s, id(req)));
    });
    api.put(one, async (req: Req, reply) => {
      const s = await scope(req);
      return written(reply, await service.update(s, id(req), req.body, dryRunOf(req)));
    });
    api.delete(one, async (req: Req, reply) => {
      const s = await scope(req);
      await service.delete(s, id(req), dryRunOf(req));
      return noContent(reply);
    });
    read(`${one}/versions`, async (req: Req, reply) => {
      const s = await scope(req);
      return sendJsonRevalidatable(req, reply, ok(await service.versions(s, id(req))));
    });
    read(`${one}/versions/:version`, async (req: Req, reply) => {
      const s = await scope(req);
      return sendCached(req, reply, await service.versionResponse(s, id(req), req.params.version));
    });
    api.delete(`${one}/versions/:version`, async (req: Req, reply) => {
      const s = await scope(req);
      await service.deleteVersion(s, id(req), req.params.version, dryRunOf(req));
      return noContent(reply);
    });
    api.post(`${one}/rules`, async (req: Req, reply) => {
      const s = await scope(req);
      return written(reply, await service.addRule(s, id(req), req.body, dryRunOf(req)));
    });
    api.patch(`${one}/rules/:rule_id`, async (req: Req, reply) => {
      const s = await scope(req);
      return written(reply, await service.editRule(s, id(req), ruleId(req), req.body, dryRunOf(req)));
    });
    api.delete(`${one}/rules/:rule_id`, async (req: Req, reply) => {
      const s = await scope(req);
      return written(reply, await service.deleteRule(s, id(req), ruleId(req), dryRunOf(req)));
    });
  }
  // Rules of a managed ruleset version by tag: account level only, as on Cloudflare.
  read('/accounts/:account_id/rulesets/:ruleset_id/versions/:version/by_tag/:rule_tag', async (req: Req, reply) => {
    const s = await scope(req);
    return sendJsonRevalidatable(req, reply, ok(await service.byTag(s, id(req), req.params.version, req.params.rule_tag)));
  });
};
