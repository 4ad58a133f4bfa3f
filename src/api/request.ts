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

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;


/**
 * The JSON pointer of the first string (key or value) holding a lone
 * surrogate, such as `"\ud800"`: valid JSON, but no UTF-8 can store it. Walks
 * without recursion, so a deeply nested body cannot exhaust the stack.
 */
export function loneSurrogateAt(value: unknown): string | undefined {
  const stack: { v: unknown; at: string }[] = [{ v: value, at: '' }];
  while (stack.length > 0) {
    const { v, at } = stack.pop()!;
    if (typeof v === 'string') {
      if (LONE_SURROGATE.test(v)) return at;
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], at: `${at}/${i}` });
    } else if (v !== null && typeof v === 'object') {
      const entries = Object.entries(v as Record<string, unknown>);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [k, child] = entries[i]!;
        const childAt = `${at}/${escapePointer(k)}`;
        if (LONE_SURROGATE.test(k)) return childAt;
        stack.push({ v: child, at: childAt });
      }
    }
  }
  return undefined;
}

/** Longest part of a request's path repeated in a message; the rest is cut. */
const SHOWN_PATH = 200;

/** A request's path (no query) as messages repeat it: cut after 200 characters, so that a long URI is not echoed whole. */
export function shownPath(url: string): string {
  const path = url.split('?')[0] ?? '';
  return path.length > SHOWN_PATH ? `${path.slice(0, SHOWN_PATH)}… (${path.length} characters)` : path;
}
