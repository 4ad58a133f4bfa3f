// Limits the API enforces, with their defaults. Cloudflare's Magic Firewall
// caps an entrypoint at 200 rules; list caps follow Cloudflare's lists docs.

/** API limits. */
export interface ApiLimits {
  /** Rules per ruleset (Cloudflare's default Magic Firewall cap). */
  maxRules: number;
  /** Characters per rule expression. */
  maxExpressionLength: number;
  /** Items per list. */
  maxListItems: number;
  /** Lists per account. */
  maxLists: number;
  /** Largest page size of list endpoints. */
  maxPerPage: number;
  /** Bytes of serialized ruleset versions kept for GETs (0: none; every GET serializes). */
  responseCacheBytes: number;
}

/** The defaults. */
export const DEFAULT_API_LIMITS: ApiLimits = Object.freeze({
  maxRules: 200,
  maxExpressionLength: 4096,
  maxListItems: 1_000_000,
  maxLists: 1000,
  maxPerPage: 1000,
  // About 1,200 versions of 200 rules (~55 KB each), or 5,000 of 50.
  responseCacheBytes: 64 * 1024 * 1024,
});
