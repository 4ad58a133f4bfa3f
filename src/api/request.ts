// What routes and services read from a request besides its path: the query
// parameters every collection or write shares (per_page, dry_run, single-valued
// text) and the shape checks of JSON bodies. One parser per parameter, so every
// route answers a bad value the same way: 400/7014 pointing at the parameter.

import type { FastifyRequest } from 'fastify';
import type { MoatError } from '../errors/index.js';
import { apiError, invalidField } from './api-error.js';

function query(req: FastifyRequest): Record<string, unknown> {
  return req.query as Record<string, unknown>;
}

/**
 * Parses `per_page`: absent means `def`; anything but an integer from 1 to
 * `max` (an empty value included) is a 400, as Cloudflare answers.
 */
export function perPageOf(req: FastifyRequest, def: number, max: number): number {
  const v = query(req)['per_page'];
  if (v === undefined) return def;
  const n = typeof v === 'string' && /^[0-9]{1,9}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1 && n <= max)) throw apiError('API_BAD_QUERY', `per_page must be an integer from 1 to ${max}`, { pointer: 'per_page' });
  return n;
}

/** Parses `page` (1-based; absent means 1); anything but a positive integer is a 400. */
export function pageOf(req: FastifyRequest): number {
  const v = query(req)['page'];
  if (v === undefined) return 1;
  const n = typeof v === 'string' && /^[0-9]{1,9}$/.test(v) ? Number(v) : NaN;
  if (!(n >= 1)) throw apiError('API_BAD_QUERY', 'page must be a positive integer', { pointer: 'page' });
  return n;
}

/** Parses `?dry_run=true|false` (absent is false; anything else is a 400, as on Cloudflare). */
export function dryRunOf(req: FastifyRequest): boolean {
  const v = query(req)['dry_run'];
  if (v === undefined) return false;
  if (v === 'true') return true;
  if (v === 'false') return false;
  throw apiError('API_BAD_QUERY', `dry_run must be true or false, not ${JSON.stringify(v)}`, { pointer: 'dry_run' });
}

/** A text query parameter given at most once (`cursor`, `search`), or undefined. */
export function queryText(req: FastifyRequest, key: string): string | undefined {
  const v = query(req)[key];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw apiError('API_BAD_QUERY', `${key} may be given once`, { pointer: key });
  return v;
}

/** Whether a parsed JSON value is an object (not null, not an array). */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A key as one JSON pointer segment (RFC 6901: `~` and `/` escaped). */
export function escapePointer(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** Adds a 7013 error for every key of `body` not in `known`, pointing at it under `prefix`. */
export function unknownFields(body: Record<string, unknown>, known: readonly string[], prefix: string, errors: MoatError[]): void {
  for (const k of Object.keys(body)) {
    if (!known.includes(k)) errors.push(invalidField(`${prefix}/${escapePointer(k)}`, `unknown field "${k}"`));
  }
}
