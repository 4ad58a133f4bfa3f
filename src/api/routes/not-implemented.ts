// Cloudflare routes Moat does not serve yet: load balancer pools, monitors and
// the rest of the load balancing API. They answer 501 with code 7002 naming the feature, after
// authentication and the account check, instead of a 404 that suggests the
// caller's identifier is wrong. A feature that lands replaces its entry here.

import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { apiError } from '../api-error.js';
import { shownPath } from '../request.js';
import type { Services } from '../services.js';

/** What the plugin uses. */
export interface NotImplementedRoutesOptions {
  services: Pick<Services, 'auth'>;
}

/** The feature a path under a prefix belongs to, by its first segment after the prefix. */
const FEATURES: readonly { prefix: string; name: (segment: string) => string }[] = [
  {
    prefix: '/accounts/:account_id/load_balancers',
    name: (s) => (s === 'pools' ? 'load balancer pools' : s === 'monitors' ? 'load balancer monitors' : 'load balancing'),
  },
  { prefix: '/zones/:zone_id/load_balancers', name: () => 'load balancers' },
];

/** Every method on every path of the features above: 501/7002 once the caller may reach the account or zone. */
export const notImplementedRoutes: FastifyPluginAsync<NotImplementedRoutesOptions> = async (api, { services }) => {
  const { auth } = services;
  for (const feature of FEATURES) {
    const handler = async (req: FastifyRequest) => {
      await auth.scope(req);
      const rest = (req.params as { '*'?: string })['*'] ?? '';
      const name = feature.name(rest.split('/')[0] ?? '');
      throw apiError('API_NOT_IMPLEMENTED', `${name} are not implemented in Moat yet (${req.method} ${shownPath(req.url)})`);
    };
    api.all(feature.prefix, handler);
    api.all(`${feature.prefix}/*`, handler);
  }
};
