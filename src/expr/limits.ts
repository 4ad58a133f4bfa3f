// Limits on expressions, with their defaults. Both are configurable per call
// (the API and the daemon pass their configured values).

/** Parser limits. */
export interface Limits {
  /** Maximum expression length in characters. Default: 4,096 (Cloudflare's documented limit). */
  readonly maxLength: number;
  /** Maximum nesting of parentheses, `not` and function calls. Default: 128 (wirefilter's parser setting). */
  readonly maxDepth: number;
}

/** The defaults. */
export const DEFAULT_LIMITS: Limits = Object.freeze({ maxLength: 4096, maxDepth: 128 });
