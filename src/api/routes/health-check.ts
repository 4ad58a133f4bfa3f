// GET /health (readiness) and GET /health/live (liveness), outside /client/v4
// and without authentication, for load balancers, service managers and
// monitoring. Ready means the database is open and takes a write now; live
// means the process answers. Both answer a small JSON body: 200 when ok, 503
// when not ready.

import type { FastifyPluginAsync } from 'fastify';
import type { Services } from '../services.js';

/** What the health routes use. */
export interface HealthCheckRoutesOptions {
  services: Pick<Services, 'store'>;
}

/** Route config that tells the server's authentication hook to let a request through. */
export const PUBLIC_ROUTE = { public: true } as const;

/** The health routes; register them without a prefix. */
export const healthCheckRoutes: FastifyPluginAsync<HealthCheckRoutesOptions> = async (api, { services }) => {
  api.get('/health/live', { config: PUBLIC_ROUTE }, async (_req, reply) => reply.header('cache-control', 'no-store').send({ status: 'ok' }));
  api.get('/health', { config: PUBLIC_ROUTE }, async (_req, reply) => {
    const problem = await services.store.writable();
    void reply.header('cache-control', 'no-store');
    if (problem === undefined) return reply.send({ status: 'ok', checks: { database: 'ok' } });
    return reply.code(503).send({ status: 'unavailable', checks: { database: problem } });
  });
};
