// Response bytes of immutable things (a ruleset version's v4 envelope),
// serialized once and kept in a least-recently-used cache bounded by bytes.
// The cache never decides freshness: its keys name immutable content (a
// version's id, number and row token, read from the database on every request),
// so an entry is either exactly right or never asked for again and aged out.

/** One cached answer: the whole body and its strong entity tag. */
export interface CachedResponse {
  readonly body: Buffer;
  /** A strong ETag, quoted (`"..."`). */
  readonly etag: string;
}

/** What an entry costs beyond its body (the key, the map's slot, the objects): an estimate, so that many small entries are bounded too. */
const ENTRY_OVERHEAD = 160;

/** A least-recently-used map of responses, bounded by the bytes it holds. */
export class ResponseCache {
  // A Map iterates in insertion order: a hit is moved to the end, so the first key is the least recently used.
  private readonly entries = new Map<string, CachedResponse>();
  private used = 0;

  /** `maxBytes` 0 caches nothing (every read serializes again). */
  constructor(readonly maxBytes: number) {}

  /** Bytes held now (bodies and the estimate of each entry's overhead). */
  get bytes(): number {
    return this.used;
  }

  /** Entries held now. */
  get size(): number {
    return this.entries.size;
  }

  get(key: string): CachedResponse | undefined {
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      this.entries.delete(key);
      this.entries.set(key, hit);
    }
    return hit;
  }

  /** Keeps `value` under `key`, evicting the least recently used entries until it fits; a value larger than the whole cache is not kept. */
  set(key: string, value: CachedResponse): void {
    const cost = costOf(key, value);
    if (cost > this.maxBytes) return;
    const old = this.entries.get(key);
    if (old !== undefined) {
      this.entries.delete(key);
      this.used -= costOf(key, old);
    }
    while (this.used + cost > this.maxBytes) {
      const [k, v] = this.entries.entries().next().value!;
      this.entries.delete(k);
      this.used -= costOf(k, v);
    }
    this.entries.set(key, value);
    this.used += cost;
  }
}

function costOf(key: string, value: CachedResponse): number {
  return value.body.length + 2 * (key.length + value.etag.length) + ENTRY_OVERHEAD;
}
