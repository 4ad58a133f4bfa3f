// The control plane's HTTP server: Cloudflare's v4 API under /client/v4 on
// fastify, routes registered as plugins given the services. It owns what every
// route shares (JSON bodies and content types, auth first, errors as envelopes
// without stack traces, unknown routes) and runs the runners from listen to close.

import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { MoatError } from '../errors/index.js';
import { ApiErrors, apiError } from './api-error.js';
import { fail } from './envelope.js';
import { listRoutes } from './routes/lists.js';
import { notImplementedRoutes } from './routes/not-implemented.js';
import { healthCheckRoutes } from './routes/health-check.js';
import { identityRoutes } from './routes/identity.js';
import { rulesetRoutes } from './routes/rulesets.js';
import type { Services } from './services.js';

/** The base path of every route. */
export const BASE_PATH = '/client/v4';

/** What the server needs. */
export interface ServerOptions {
  /** The services the routes call and the runners the server starts on listen (see createServices). */
  services: Services;
  logger?: Logger | undefined;
  /** Largest accepted request body in bytes (default 16 MiB: bulk list uploads are large). */
  bodyLimit?: number | undefined;
}

function toMoatErrors(err: unknown): { status: number; errors: MoatError[] } | undefined {
  if (err instanceof ApiErrors) return { status: err.errors[0]?.status ?? 400, errors: [...err.errors] };
  if (err instanceof MoatError) return { status: err.status, errors: [err] };
  const code = (err as { code?: string }).code;
  const message = (err as Error).message;
  switch (code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { status: 413, errors: [apiError('API_BODY_TOO_LARGE', 'Request body is larger than the server accepts')] };
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return { status: 415, errors: [apiError('API_UNSUPPORTED_MEDIA', 'Request bodies must be sent as Content-Type: application/json')] };
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return { status: 400, errors: [apiError('API_MALFORMED_JSON', 'Content-Length does not match the body')] };
    case 'FST_ERR_BAD_URL':
      return { status: 400, errors: [apiError('API_BAD_IDENTIFIER', 'Could not route: malformed URL')] };
    default:
      if ((err as { statusCode?: number }).statusCode === 400 && typeof message === 'string') {
        return { status: 400, errors: [apiError('API_MALFORMED_JSON', message)] };
      }
      return undefined;
  }
}

/**
 * Builds the server (not yet listening). The services' runners start once it
 * listens (a server that cannot bind runs none) and stop when it closes.
 */
export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const app: FastifyInstance = Fastify({
    ...(options.logger === undefined ? { logger: false } : { loggerInstance: options.logger as unknown as FastifyBaseLogger }),
    bodyLimit: options.bodyLimit ?? 16 * 1024 * 1024,
    // Cloudflare ids never need more; long URLs are an attack, not a request.
    routerOptions: { maxParamLength: 200, caseSensitive: true, ignoreTrailingSlash: true },
    // One line per request at info level would dominate the log; errors are logged.
    logController: new LogController({ disableRequestLogging: true }),
  });
  const { services } = options;

  app.decorateRequest('principal', null);

  // JSON bodies: an empty body (the SDK sends DELETE with Content-Type but no
  // body) is no body; malformed JSON is an envelope error with the parser's
  // position, not fastify's default text.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(['application/json', 'application/*+json'], { parseAs: 'string' }, (_req, body, done) => {
    const text = body as string;
    if (text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch (err) {
      done(apiError('API_MALFORMED_JSON', `Request body is not valid JSON: ${(err as Error).message}`, { pointer: '' }), undefined);
    }
  });
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    if ((body as string).length === 0) return done(null, undefined);
    done(apiError('API_UNSUPPORTED_MEDIA', 'Request bodies must be sent as Content-Type: application/json'), undefined);
  });

  // Every request authenticates first, unknown routes included: nothing
  // answers (not even "no such route") without a valid key, except the
  // health routes (GET /health, /health/live), which are public.
  app.addHook('onRequest', async (req) => {
    if ((req.routeOptions.config as { public?: boolean } | undefined)?.public === true) return;
    req.principal = services.auth.authenticate(req);
  });

  // One access line per request at debug level (`moat serve --log-level debug`);
  // at the default level pino makes this a no-op.
  app.addHook('onResponse', async (req, reply) => {
    req.log.debug({ method: req.method, url: req.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10, user: req.principal?.email }, 'request');
  });

  app.setErrorHandler((err, req, reply) => {
    const mapped = toMoatErrors(err);
    if (mapped === undefined) {
      req.log.error({ err }, 'unhandled error');
      void reply.code(500).type('application/json').send(fail([apiError('API_INTERNAL', 'Internal error')]));
      return;
    }
    void reply.code(mapped.status).type('application/json').send(fail(mapped.errors));
  });

  app.setNotFoundHandler(async (req, reply) => {
    const path = req.url.split('?')[0];
    void reply
      .code(404)
      .type('application/json')
      .send(fail([apiError('API_NO_ROUTE', 'No route for that URI'), apiError('API_BAD_IDENTIFIER', `Could not route to ${path}, perhaps your object identifier is invalid?`)]));
  });

  await app.register(rulesetRoutes, { prefix: BASE_PATH, services });
  await app.register(listRoutes, { prefix: BASE_PATH, services });
  await app.register(identityRoutes, { prefix: BASE_PATH, services });
  await app.register(notImplementedRoutes, { prefix: BASE_PATH, services });
  await app.register(healthCheckRoutes, { services });

  app.addHook('onListen', async () => {
    services.runners.start();
  });
  app.addHook('onClose', async () => {
    await services.runners.stop();
  });
  return app;
}
