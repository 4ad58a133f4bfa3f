// Identifiers and timestamps in the shapes Cloudflare's API uses: 32-character
// lowercase hex ids, and RFC 3339 times with microseconds.

import { randomBytes } from 'node:crypto';

/** A new random 32-hex identifier (128 bits). */
export function newId(): string {
  return randomBytes(16).toString('hex');
}

const HEX32 = /^[0-9a-f]{32}$/;

/** True when `s` is a 32-character lowercase hex identifier. */
export function isId(s: string): boolean {
  return HEX32.test(s);
}

/** Now as RFC 3339 with microseconds (`2025-03-17T15:42:37.917000Z`), the API's time format. */
export function nowStamp(now: Date = new Date()): string {
  return now.toISOString().replace(/Z$/, '000Z');
}
