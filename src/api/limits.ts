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
}

/** The defaults. */
export const DEFAULT_API_LIMITS: ApiLimits = Object.freeze({
  maxRules: 200,
  maxExpressionLength: 4096,
  maxListItems: 1_000_000,
  maxLists: 1000,
  maxPerPage: 1000,
});
