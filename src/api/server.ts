// The control plane's HTTP server: Cloudflare's v4 API under /client/v4 on
// fastify, routes registered as plugins given the services. It owns what every
// route shares (JSON bodies and content types, auth first, errors as envelopes
// without stack traces, unknown routes) and runs the runners from listen to close.

import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { MoatError } from '../errors/index.js';
import { ApiErrors, apiError } from './api-error.js';
import { RetryLaterError } from './auth.js';
import { fail } from './envelope.js';
import { loneSurrogateAt, shownPath } from './request.js';
import { alertingRoutes } from './routes/alerting.js';
import { daemonRoutes } from './routes/daemons.js';
import { listRoutes } from './routes/lists.js';
import { loadBalancerRoutes } from './routes/load-balancers.js';
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
  /** TLS certificate and key (PEM): the API and the control channel are then served over HTTPS and WSS. */
  https?: { cert: Buffer; key: Buffer } | undefined;
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
      return { status: 400, errors: [apiError('API_BAD_REQUEST', 'Malformed URL: a path segment has an invalid percent-encoding')] };
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return { status: 414, errors: [apiError('API_URI_TOO_LONG', 'Request URI too long: a path segment is longer than 200 characters')] };
    default:
      if ((err as { statusCode?: number }).statusCode === 400 && typeof message === 'string') {
        return { status: 400, errors: [apiError('API_MALFORMED_JSON', message)] };
      }
      return undefined;
  }
}

/** A whole HTTP/1.1 response carrying a failure envelope, for the answers written straight to a socket. */
function rawResponse(err: MoatError, headers: Record<string, string> = {}): string {
  const body = JSON.stringify(fail([err]));
  const reason = STATUS_TEXT[err.status] ?? 'Error';
  const lines = [`HTTP/1.1 ${err.status} ${reason}`, 'Content-Type: application/json; charset=utf-8', `Content-Length: ${Buffer.byteLength(body)}`, 'Connection: close'];
  for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
  return `${lines.join('\r\n')}\r\n\r\n${body}`;
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  503: 'Service Unavailable',
};

/** The Retry-After header an error asks for (429 over the failure limit, 503 legacy checks busy), if any. */
function retryAfterOf(errors: readonly MoatError[]): Record<string, string> {
  const e = errors[0];
  return e instanceof RetryLaterError ? { 'Retry-After': String(e.retryAfter) } : {};
}

/**
 * Node's clientError (the request could not be parsed: a NUL byte in a header,
 * a bad request line, headers too large, a timeout): a v4 envelope with a
 * registry code instead of fastify's own body. Nothing of the request is echoed.
 */
export function clientErrorHandler(err: Error & { code?: string }, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const error =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? apiError('API_REQUEST_TIMEOUT', 'The request was not received in time')
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? apiError('API_HEADERS_TOO_LARGE', 'Request headers are larger than the server accepts')
        : apiError('API_BAD_REQUEST', 'Malformed HTTP request: the request line or a header is invalid');
  if (socket.writable) socket.end(rawResponse(error));
  else socket.destroy();
}

/** The routes' paths as patterns, with the methods each has, for 405 answers. */
class RouteMethods {
  private readonly routes = new Map<string, { pattern: RegExp; methods: Set<string> }>();

  add(url: string, method: string | string[]): void {
    let r = this.routes.get(url);
    if (r === undefined) {
      const source = url
        .split('/')
        .map((seg) => (seg === '*' ? '.*' : seg.startsWith(':') ? '[^/]+' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
        .join('/');
      r = { pattern: new RegExp(`^${source}/?$`), methods: new Set() };
      this.routes.set(url, r);
    }
    for (const m of Array.isArray(method) ? method : [method]) r.methods.add(m.toUpperCase());
    if (r.methods.has('GET')) r.methods.add('HEAD');
  }

  /** The methods the routes matching `path` have, sorted; empty when no route has this path. */
  allowed(path: string): string[] {
    const methods = new Set<string>();
    for (const r of this.routes.values()) if (r.pattern.test(path)) for (const m of r.methods) methods.add(m);
    return [...methods].sort();
  }
}

/**
 * Invalid UTF-8 in a body: the offset of the first bad byte, for the message.
 * One lenient decode and a walk over its replacement characters, skipping
 * those the body really holds (EF BF BD): linear, however large the body.
 */
function firstBadUtf8(buf: Buffer): number {
  const text = buf.toString('utf8');
  let from = 0;
  let byte = 0;
  for (;;) {
    const i = text.indexOf('\uFFFD', from);
    if (i < 0) return buf.length;
    byte += Buffer.byteLength(text.slice(from, i));
    if (buf[byte] !== 0xef || buf[byte + 1] !== 0xbf || buf[byte + 2] !== 0xbd) return byte;
    byte += 3;
    from = i + 1;
  }
}

/** Parses a JSON body: strict UTF-8, then JSON, then no lone surrogates. */
export function parseJsonBody(buf: Buffer): unknown {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(buf);
  } catch {
    throw apiError('API_BAD_ENCODING', `Request body is not valid UTF-8 (first invalid byte at offset ${firstBadUtf8(buf)})`, { pointer: '' });
  }
  if (text.trim() === '') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw apiError('API_MALFORMED_JSON', `Request body is not valid JSON: ${(err as Error).message}`, { pointer: '' });
  }
  // Only an escaped surrogate (\uD800-\uDFFF) can produce one: skip the walk otherwise.
  if (/\\u[dD][89a-fA-F]/.test(text)) {
    const at = loneSurrogateAt(value);
    if (at !== undefined) {
      throw apiError('API_BAD_ENCODING', 'A string holds a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF escape): it cannot be stored as UTF-8; send a valid character', { pointer: at });
    }
  }
  return value;
}

/**
 * Builds the server (not yet listening). The services' runners start once it
 * listens (a server that cannot bind runs none) and stop when it closes.
 */
export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const app: FastifyInstance = Fastify({
    // fastify types an HTTPS instance apart; the routes use nothing of it that differs.
    ...(options.https === undefined ? {} : ({ https: options.https } as object)),
    ...(options.logger === undefined ? { logger: false } : { loggerInstance: options.logger as unknown as FastifyBaseLogger }),
    bodyLimit: options.bodyLimit ?? 16 * 1024 * 1024,
    // Cloudflare ids never need more; long URLs are an attack, not a request.
    routerOptions: { maxParamLength: 200, caseSensitive: true, ignoreTrailingSlash: true },
    // One line per request at info level would dominate the log; errors are logged.
    logController: new LogController({ disableRequestLogging: true }),
    // What the framework refuses itself is an envelope too, after authentication when the headers were read.
    frameworkErrors: (err, req, reply) => frameworkError(err, req, reply),
    clientErrorHandler,
  });
  const { services } = options;
  const frameworkError = (err: Error, req: FastifyRequest, reply: FastifyReply): void => {
    const answer = (errors: MoatError[]): void => void reply.code(errors[0]!.status).headers(retryAfterOf(errors)).type('application/json').send(fail(errors));
    services.auth.authenticate(req).then(
      () => answer(toMoatErrors(err)?.errors ?? [apiError('API_INTERNAL', 'Internal error')]),
      (authErr: unknown) => answer(toMoatErrors(authErr)?.errors ?? [apiError('API_INTERNAL', 'Internal error')]),
    );
  };

  // CONNECT never reaches fastify (node hands it to a 'connect' listener, or
  // closes the socket without a word): Moat is no proxy, so 405 after authentication.
  app.server.on('connect', (req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    const answer = (error: MoatError): void => void socket.end(rawResponse(error, error.status === 405 ? { Allow: 'DELETE, GET, HEAD, PATCH, POST, PUT' } : retryAfterOf([error])));
    services.auth.authenticate({ headers: req.headers, method: req.method, ip: req.socket.remoteAddress } as unknown as FastifyRequest).then(
      () => answer(apiError('API_METHOD_NOT_ALLOWED', 'CONNECT is not supported: Moat is not a proxy')),
      (authErr: unknown) => answer(toMoatErrors(authErr)?.errors[0] ?? apiError('API_INTERNAL', 'Internal error')),
    );
  });

  // Every route's methods, so that a wrong method on an existing path answers 405 with Allow.
  const routeMethods = new RouteMethods();
  app.addHook('onRoute', (route) => routeMethods.add(route.url, route.method));

  app.decorateRequest('principal', null);

  // JSON bodies: an empty body (the SDK sends DELETE with Content-Type but no
  // body) is no body; malformed JSON is an envelope error with the parser's
  // position, not fastify's default text.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(['application/json', 'application/*+json'], { parseAs: 'buffer' }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as Buffer));
    } catch (err) {
      done(err as MoatError, undefined);
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
    req.principal = await services.auth.authenticate(req);
  });

  // One access line per request at debug level (`moat serve --log-level debug`).
  // Only then is the hook added: at other levels it would still cost every
  // request a promise and the line's object (the level never changes at run time).
  if (options.logger?.isLevelEnabled('debug') === true) {
    app.addHook('onResponse', async (req, reply) => {
      req.log.debug({ method: req.method, url: req.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10, user: req.principal?.email }, 'request');
    });
  }

  app.setErrorHandler((err, req, reply) => {
    const mapped = toMoatErrors(err);
    if (mapped === undefined) {
      req.log.error({ err }, 'unhandled error');
      void reply.code(500).type('application/json').send(fail([apiError('API_INTERNAL', 'Internal error')]));
      return;
    }
    void reply.code(mapped.status).headers(retryAfterOf(mapped.errors)).type('application/json').send(fail(mapped.errors));
  });

  app.setNotFoundHandler(async (req, reply) => {
    const path = req.url.split('?')[0] ?? '';
    const allowed = routeMethods.allowed(path);
    if (allowed.length > 0 && !allowed.includes(req.method)) {
      void reply
        .code(405)
        .header('Allow', allowed.join(', '))
        .type('application/json')
        .send(fail([apiError('API_METHOD_NOT_ALLOWED', `Method ${req.method} not allowed for this route; it allows ${allowed.join(', ')}`)]));
      return;
    }
    void reply
      .code(404)
      .type('application/json')
      .send(fail([apiError('API_NO_ROUTE', 'No route for that URI'), apiError('API_BAD_IDENTIFIER', `Could not route to ${shownPath(req.url)}, perhaps your object identifier is invalid?`)]));
  });

  await app.register(rulesetRoutes, { prefix: BASE_PATH, services });
  await app.register(listRoutes, { prefix: BASE_PATH, services });
  await app.register(loadBalancerRoutes, { prefix: BASE_PATH, services });
  await app.register(identityRoutes, { prefix: BASE_PATH, services });
  await app.register(daemonRoutes, { prefix: BASE_PATH, services });
  await app.register(alertingRoutes, { prefix: BASE_PATH, services });
  await app.register(notImplementedRoutes, { prefix: BASE_PATH, services });
  await app.register(healthCheckRoutes, { services });

  // The control channel shares the listener: upgrades to CHANNEL_PATH are its daemons.
  services.hub.attach(app.server);
  // Before the listener closes: its upgraded sockets would keep close() waiting.
  app.addHook('preClose', async () => {
    await services.hub.stop();
  });
  app.addHook('onListen', async () => {
    services.runners.start();
  });
  app.addHook('onClose', async () => {
    await services.runners.stop();
  });
  return app;
}
