// IP list files: one entry per line — an address (`192.0.2.1`, `2001:db8::1`),
// a CIDR (`10.0.0.0/8`, host bits zero) or an inclusive range (`a..b`, one
// family). `#` starts a comment, at the start of a line or after an entry;
// blank lines, surrounding whitespace, CRLF line ends and a leading BOM are
// ignored. The result is an `IpRangeList`: the entries in file order as
// inclusive bounds in flat typed arrays, not sorted and not merged (the
// AddressTable does that, for every list at once).
//
// The parser is built for files of millions of lines: it reads the text by
// character code, parses IPv4 and plain IPv6 entries without creating strings
// or objects, and appends to growable typed arrays. Anything its fast path
// does not accept (IPv6 with an embedded dotted quad, and every bad entry) goes
// to parseIpRange, which decides and words the error, so the two paths accept
// exactly the same entries as `ip.src in {...}` does.

import { MoatError, readFileCoded, readFileCodedAsync } from '../errors/index.js';
import { parseIpRange } from './ip-set.js';

/**
 * The entries of one IP list, as inclusive ranges in flat typed arrays.
 * IPv4 entry i is `v4First[i]..v4Last[i]` (uint32). IPv6 entry j is
 * `v6First[4j..4j+3]..v6Last[4j..4j+3]` (four uint32 words, most significant first).
 * `count` is the number of entries of both families. Order is file order;
 * entries may overlap.
 */
export interface IpRangeList {
  readonly v4First: Uint32Array;
  readonly v4Last: Uint32Array;
  readonly v6First: Uint32Array;
  readonly v6Last: Uint32Array;
  readonly count: number;
}

/** An empty list. */
export function emptyRangeList(): IpRangeList {
  return { v4First: new Uint32Array(0), v4Last: new Uint32Array(0), v6First: new Uint32Array(0), v6Last: new Uint32Array(0), count: 0 };
}

/** Reads and parses a list file. Unreadable file: MoatError LIST_READ (4002); bad entry: LIST_BAD_ENTRY (4001). */
export async function loadListFile(path: string): Promise<IpRangeList> {
  return parseListText((await readFileCodedAsync(path, 'LIST_READ', 'list file', 'list')).toString('utf8'), path);
}

/** Synchronous form of {@link loadListFile}. */
export function loadListFileSync(path: string): IpRangeList {
  return parseListText(readListFileSync(path).toString('utf8'), path);
}

/** The bytes of a list file, for callers that keep them (a digest) before parseListText. Unreadable file: LIST_READ. */
export function readListFileSync(path: string): Buffer {
  return readFileCoded(path, 'LIST_READ', 'list file', 'list');
}

/**
 * Parses the text of a list file. `fileName` is only used in error messages,
 * which read `<fileName>:<line>: <what is wrong>`.
 */
export function parseListText(text: string, fileName: string): IpRangeList {
  const b = new ListBuilder(Math.min(1 << 20, Math.max(16, text.length >>> 4)));
  const n = text.length;
  let pos = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  let line = 0;
  while (pos <= n) {
    line++;
    let end = text.indexOf('\n', pos);
    if (end < 0) end = n;
    b.addLine(text, pos, end, fileName, line);
    pos = end + 1;
  }
  return b.finish();
}

/**
 * Builds a list from entry strings (one entry per string, with the same rules
 * as a line of a file: comments and surrounding whitespace allowed, empty
 * strings skipped). Errors name `fileName` and the 1-based index as the line.
 */
export function rangeListFromStrings(entries: readonly string[], fileName = '<list>'): IpRangeList {
  const b = new ListBuilder(Math.max(16, entries.length));
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i]!;
    b.addLine(e, 0, e.length, fileName, i + 1);
  }
  return b.finish();
}

// Character codes.
const HASH = 35;
const SLASH = 47;
const DOT = 46;
const COLON = 58;

function isSpace(c: number): boolean {
  return c === 32 || c === 9 || c === 13 || c === 11 || c === 12 || c === 0xfeff || c === 0xa0;
}

/** Hex digit value of a character code, or -1. */
function hexVal(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

class ListBuilder {
  private v4First: Uint32Array;
  private v4Last: Uint32Array;
  private n4 = 0;
  private v6First: Uint32Array;
  private v6Last: Uint32Array;
  private n6 = 0;
  // Scratch state of the fast parser: end position and parsed words.
  private at = 0;
  private readonly w = new Uint32Array(4);
  private readonly w2 = new Uint32Array(4);
  private readonly groups = new Uint32Array(8);

  constructor(initial: number) {
    this.v4First = new Uint32Array(initial);
    this.v4Last = new Uint32Array(initial);
    this.v6First = new Uint32Array(64);
    this.v6Last = new Uint32Array(64);
  }

  finish(): IpRangeList {
    return {
      v4First: this.v4First.slice(0, this.n4),
      v4Last: this.v4Last.slice(0, this.n4),
      v6First: this.v6First.slice(0, this.n6 * 4),
      v6Last: this.v6Last.slice(0, this.n6 * 4),
      count: this.n4 + this.n6,
    };
  }

  /** Parses the line text[start, end) (end excludes the newline). */
  addLine(text: string, start: number, end: number, file: string, line: number): void {
    // Cut the comment, then trim.
    let e = start;
    while (e < end && text.charCodeAt(e) !== HASH) e++;
    let s = start;
    while (s < e && isSpace(text.charCodeAt(s))) s++;
    while (e > s && isSpace(text.charCodeAt(e - 1))) e--;
    if (s === e) return;
    if (this.fastEntry(text, s, e)) return;
    // Slow path: parseIpRange decides (and words the error).
    const entry = text.slice(s, e);
    const r = parseIpRange(entry);
    if (typeof r === 'string') {
      throw new MoatError('LIST_BAD_ENTRY', `${file}:${line}: ${r}`, { file, line });
    }
    if (r.family === 4) this.push4(r.first[0]!, r.last[0]!);
    else this.push6(r.first[0]!, r.first[1]!, r.first[2]!, r.first[3]!, r.last[0]!, r.last[1]!, r.last[2]!, r.last[3]!);
  }

  private push4(first: number, last: number): void {
    if (this.n4 === this.v4First.length) {
      this.v4First = grow(this.v4First);
      this.v4Last = grow(this.v4Last);
    }
    this.v4First[this.n4] = first;
    this.v4Last[this.n4] = last;
    this.n4++;
  }

  private push6(a0: number, a1: number, a2: number, a3: number, b0: number, b1: number, b2: number, b3: number): void {
    if (this.n6 * 4 === this.v6First.length) {
      this.v6First = grow(this.v6First);
      this.v6Last = grow(this.v6Last);
    }
    const o = this.n6 * 4;
    const f = this.v6First;
    const l = this.v6Last;
    f[o] = a0;
    f[o + 1] = a1;
    f[o + 2] = a2;
    f[o + 3] = a3;
    l[o] = b0;
    l[o + 1] = b1;
    l[o + 2] = b2;
    l[o + 3] = b3;
    this.n6++;
  }

  /**
   * Parses text[s, e) as an entry without allocating. Returns false for
   * anything it does not handle (the caller falls back to parseIpRange); it
   * never accepts an entry parseIpRange would reject.
   */
  private fastEntry(text: string, s: number, e: number): boolean {
    let isV6 = false;
    for (let i = s; i < e; i++) {
      const c = text.charCodeAt(i);
      if (c === COLON) {
        isV6 = true;
        break;
      }
      if (c === SLASH) break;
    }
    if (!isV6) {
      const a = this.parse4(text, s, e);
      if (a < 0) return false;
      let p = this.at;
      if (p === e) {
        this.push4(a, a);
        return true;
      }
      const c = text.charCodeAt(p);
      if (c === SLASH) {
        const len = parseLength(text, p + 1, e, 32);
        if (len < 0) return false;
        const host = len === 0 ? 0xffffffff : len === 32 ? 0 : 0xffffffff >>> len;
        if ((a & host) !== 0) return false; // host bits set: the slow path says which network was meant
        this.push4(a, (a | host) >>> 0);
        return true;
      }
      if (c === DOT && p + 1 < e && text.charCodeAt(p + 1) === DOT) {
        p += 2;
        const b = this.parse4(text, p, e);
        if (b < 0 || this.at !== e || b < a) return false;
        this.push4(a, b);
        return true;
      }
      return false;
    }
    const w = this.w;
    if (!this.parse6(text, s, e, w)) return false;
    let p = this.at;
    if (p === e) {
      this.push6(w[0]!, w[1]!, w[2]!, w[3]!, w[0]!, w[1]!, w[2]!, w[3]!);
      return true;
    }
    const c = text.charCodeAt(p);
    if (c === SLASH) {
      const len = parseLength(text, p + 1, e, 128);
      if (len < 0) return false;
      const l = this.w2;
      for (let i = 0; i < 4; i++) {
        const keep = Math.max(0, Math.min(32, len - 32 * i));
        const host = keep === 32 ? 0 : keep === 0 ? 0xffffffff : 0xffffffff >>> keep;
        if ((w[i]! & host) !== 0) return false;
        l[i] = (w[i]! | host) >>> 0;
      }
      this.push6(w[0]!, w[1]!, w[2]!, w[3]!, l[0]!, l[1]!, l[2]!, l[3]!);
      return true;
    }
    if (c === DOT && p + 1 < e && text.charCodeAt(p + 1) === DOT) {
      p += 2;
      const b = this.w2;
      if (!this.parse6(text, p, e, b) || this.at !== e) return false;
      for (let i = 0; i < 4; i++) {
        if (b[i] !== w[i]) {
          if (b[i]! < w[i]!) return false;
          break;
        }
      }
      this.push6(w[0]!, w[1]!, w[2]!, w[3]!, b[0]!, b[1]!, b[2]!, b[3]!);
      return true;
    }
    return false;
  }

  /** Strict dotted quad at text[s..]; returns the uint32 (and sets this.at) or -1. */
  private parse4(text: string, s: number, e: number): number {
    let v = 0;
    let p = s;
    for (let part = 0; part < 4; part++) {
      if (part > 0) {
        if (p >= e || text.charCodeAt(p) !== DOT) return -1;
        p++;
      }
      const start = p;
      let o = 0;
      while (p < e) {
        const c = text.charCodeAt(p);
        if (c < 48 || c > 57) break;
        o = o * 10 + (c - 48);
        p++;
        if (p - start > 3) return -1;
      }
      const digits = p - start;
      if (digits === 0 || o > 255 || (digits > 1 && text.charCodeAt(start) === 48)) return -1;
      v = v * 256 + o;
    }
    this.at = p;
    return v;
  }

  /**
   * Hex-group IPv6 (with at most one `::`, no dotted-quad tail) at text[s..],
   * ending at `/`, `..` or e. Writes 4 words into `out`, sets this.at.
   */
  private parse6(text: string, s: number, e: number, out: Uint32Array): boolean {
    const g = this.groups;
    let n = 0; // groups parsed
    let gap = -1; // group index where `::` stands
    let p = s;
    if (p + 1 < e && text.charCodeAt(p) === COLON && text.charCodeAt(p + 1) === COLON) {
      gap = 0;
      p += 2;
    } else if (p < e && text.charCodeAt(p) === COLON) {
      return false;
    }
    for (;;) {
      // At the start of a group, or at the end right after `::`.
      let v = 0;
      let digits = 0;
      while (p < e) {
        const h = hexVal(text.charCodeAt(p));
        if (h < 0) break;
        v = v * 16 + h;
        digits++;
        p++;
      }
      if (digits === 0) {
        if (gap === n && (p === e || text.charCodeAt(p) !== COLON)) break; // `::` at the end of the address
        return false;
      }
      if (digits > 4 || n === 8) return false;
      g[n++] = v;
      if (p < e && text.charCodeAt(p) === COLON) {
        if (p + 1 < e && text.charCodeAt(p + 1) === COLON) {
          if (gap >= 0) return false;
          gap = n;
          p += 2;
        } else {
          p++;
        }
        continue;
      }
      break;
    }
    if (p < e) {
      const c = text.charCodeAt(p);
      if (c === DOT) {
        // `..` (a range) may follow; a single dot means a dotted-quad tail, left to the slow path.
        if (!(p + 1 < e && text.charCodeAt(p + 1) === DOT)) return false;
      } else if (c !== SLASH) {
        return false;
      }
    }
    if (gap < 0 ? n !== 8 : n > 7) return false;
    // Expand into 8 groups, then pack pairs into words.
    const fill = 8 - n;
    let words0 = 0;
    let words1 = 0;
    let words2 = 0;
    let words3 = 0;
    for (let i = 0; i < 8; i++) {
      let val: number;
      if (gap < 0 || i < gap) val = g[i]!;
      else if (i < gap + fill) val = 0;
      else val = g[i - fill]!;
      switch (i >> 1) {
        case 0:
          words0 = words0 * 65536 + val;
          break;
        case 1:
          words1 = words1 * 65536 + val;
          break;
        case 2:
          words2 = words2 * 65536 + val;
          break;
        default:
          words3 = words3 * 65536 + val;
      }
    }
    out[0] = words0;
    out[1] = words1;
    out[2] = words2;
    out[3] = words3;
    this.at = p;
    return true;
  }
}

/** A prefix length `0|[1-9]\d{0,2}` at text[s, e) no larger than max, or -1. */
function parseLength(text: string, s: number, e: number, max: number): number {
  const digits = e - s;
  if (digits < 1 || digits > 3) return -1;
  if (digits > 1 && text.charCodeAt(s) === 48) return -1;
  let v = 0;
  for (let i = s; i < e; i++) {
    const c = text.charCodeAt(i);
    if (c < 48 || c > 57) return -1;
    v = v * 10 + (c - 48);
  }
  return v <= max ? v : -1;
}

function grow(a: Uint32Array): Uint32Array {
  const b = new Uint32Array(Math.max(16, a.length * 2));
  b.set(a);
  return b;
}
