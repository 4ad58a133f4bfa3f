// Conditional reads (RFC 9110): GETs that can be revalidated answer with a
// strong ETag and `Cache-Control: private, no-cache`, and a matching
// If-None-Match gets 304 without a body. `private` because every answer
// depends on who asked (no shared cache may keep it); `no-cache` because a
// client must come back each time, and so be authenticated each time, before
// reusing what it holds; 304 then spares it the body.

import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { CachedResponse } from './response-cache.js';

/** The Cache-Control of every revalidatable answer. */
export const CACHE_CONTROL = 'private, no-cache';

/** What fastify sends for a JSON object: the cached bytes must come with the same type. */
const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * Whether an If-None-Match field value matches `etag` (a quoted strong tag):
 * `*` (the resource exists, which the caller has established), or a
 * comma-separated list holding the tag, with or without `W/` (If-None-Match
 * uses the weak comparison, RFC 9110 section 13.1.2). A malformed list matches
 * only through the tags before the fault: a broken condition must not turn a
 * 200 into a 304.
 */
export function ifNoneMatches(field: string | undefined, etag: string): boolean {
  if (field === undefined) return false;
  if (field === etag) return true;
  const n = field.length;
  let i = 0;
  let sawTag = false;
  while (i < n) {
    const c = field.charCodeAt(i);
    if (c === 0x20 || c === 0x09 || c === 0x2c) {
      i++;
      continue;
    }
    if (c === 0x2a && !sawTag) return field.trim() === '*';
    const open = field.startsWith('W/', i) ? i + 2 : i;
    if (field.charCodeAt(open) !== 0x22) return false;
    const close = field.indexOf('"', open + 1);
    if (close < 0) return false;
    if (close + 1 - open === etag.length && field.startsWith(etag, open)) return true;
    sawTag = true;
    i = close + 1;
  }
  return false;
}

/** Answers with cached bytes: 304 without a body when If-None-Match matches, else 200 with the bytes (HEAD: their length, no body). */
export function sendCached(req: FastifyRequest, reply: FastifyReply, cached: CachedResponse): FastifyReply {
  void reply.header('etag', cached.etag).header('cache-control', CACHE_CONTROL);
  if (ifNoneMatches(req.headers['if-none-match'], cached.etag)) return reply.code(304).send();
  return reply.header('content-type', JSON_TYPE).send(cached.body);
}

/** A strong ETag from the bytes of a body: for answers that are computed each time (listings) but can still spare the client the body. */
export function digestEtag(body: Buffer | string): string {
  return `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;
}

/** Answers with a JSON value, serialized here so that its bytes get a digest ETag and If-None-Match is honoured. */
export function sendJsonRevalidatable(req: FastifyRequest, reply: FastifyReply, value: unknown): FastifyReply {
  const body = Buffer.from(JSON.stringify(value));
  return sendCached(req, reply, { body, etag: digestEtag(body) });
}
