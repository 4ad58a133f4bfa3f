// Character-level scanning for the rules language: whitespace, names, operators,
// string and raw-string literals, bare literal words and list names. The parser
// drives it, because what a literal means depends on the field it is compared with.
// Whitespace is space, CR and LF only (a tab is an error, as in wirefilter).

import { MoatError } from '../errors/index.js';

const SPACE = 0x20;
const CR = 0x0d;
const LF = 0x0a;
const TAB = 0x09;

/** True for characters of a name segment: [A-Za-z0-9_]. */
export function isNameChar(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c === 0x5f;
}

/** True for characters of a bare literal word: IPs, CIDRs, ranges, integers, hex bytes. */
export function isWordChar(c: number): boolean {
  return isNameChar(c) || c === 0x2e || c === 0x3a || c === 0x2f || c === 0x2d;
}

/** True for characters of a list name after `$`: [a-z0-9_.]. */
function isListChar(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x5f || c === 0x2e;
}

/** A cursor over the source with the scanning primitives the parser needs. */
export class Scanner {
  pos = 0;

  constructor(readonly src: string) {}

  /** Current character code, or -1 at the end. */
  peek(offset = 0): number {
    const i = this.pos + offset;
    return i < this.src.length ? this.src.charCodeAt(i) : -1;
  }

  atEnd(): boolean {
    return this.pos >= this.src.length;
  }

  /** Skips spaces, CR and LF; a tab is reported as an error right away. */
  skipWs(): void {
    for (;;) {
      const c = this.peek();
      if (c === SPACE || c === CR || c === LF) this.pos++;
      else if (c === TAB) {
        throw new MoatError('EXPR_UNEXPECTED_CHAR', 'a tab is not whitespace in the rules language', {
          span: { start: this.pos, end: this.pos + 1 },
          hint: 'use spaces or new lines between terms',
        });
      } else return;
    }
  }

  /** True when the text at the cursor is `word` followed by a non-name character. */
  lookingAtKeyword(word: string): boolean {
    if (!this.src.startsWith(word, this.pos)) return false;
    return !isNameChar(this.peek(word.length));
  }

  /** True when the text at the cursor starts with `s`. */
  lookingAt(s: string): boolean {
    return this.src.startsWith(s, this.pos);
  }

  /** Scans a dotted name `seg(.seg)*`; returns '' if none starts here. */
  scanName(): string {
    const start = this.pos;
    while (isNameChar(this.peek())) {
      this.pos++;
      if (this.peek() === 0x2e && isNameChar(this.peek(1))) this.pos++;
    }
    return this.src.slice(start, this.pos);
  }

  /** Scans a run of bare-literal characters. */
  scanWord(): string {
    const start = this.pos;
    while (isWordChar(this.peek())) this.pos++;
    return this.src.slice(start, this.pos);
  }

  /** Scans a run of symbol characters that could form an operator. */
  scanSymbols(): string {
    const start = this.pos;
    for (;;) {
      const c = this.peek();
      // = ! < > ~ & | ^
      if (c === 0x3d || c === 0x21 || c === 0x3c || c === 0x3e || c === 0x7e || c === 0x26 || c === 0x7c || c === 0x5e) {
        this.pos++;
      } else break;
    }
    return this.src.slice(start, this.pos);
  }

  /** Scans `$name` (the cursor is on `$`); returns the name without `$`. */
  scanListName(): string {
    const start = this.pos;
    this.pos++;
    const nameStart = this.pos;
    while (isListChar(this.peek())) this.pos++;
    const name = this.src.slice(nameStart, this.pos);
    const bad = name === '' || name.startsWith('.') || name.endsWith('.') || name.includes('..') || isNameChar(this.peek());
    if (bad) {
      while (isWordChar(this.peek())) this.pos++;
      throw new MoatError('EXPR_BAD_LIST_NAME', `invalid list name "${this.src.slice(start, this.pos)}"`, {
        span: { start, end: Math.max(this.pos, start + 1) },
        hint: 'list names are lowercase letters, digits, "_" and inner "."',
      });
    }
    return name;
  }

  /**
   * Scans a quoted string (the cursor is on `"`). Escapes: \" \\ \xHH and \OOO.
   * Returns the UTF-8 bytes of the content.
   */
  scanString(): Uint8Array {
    const start = this.pos;
    this.pos++;
    const out: number[] = [];
    for (;;) {
      const c = this.peek();
      if (c === -1) {
        throw new MoatError('EXPR_UNTERMINATED_STRING', 'string literal is not closed', {
          span: { start, end: this.src.length },
          hint: 'add the closing double quote',
        });
      }
      if (c === 0x22) {
        this.pos++;
        return Uint8Array.from(out);
      }
      if (c === 0x5c) {
        const escStart = this.pos;
        const e = this.peek(1);
        if (e === 0x22 || e === 0x5c) {
          out.push(e);
          this.pos += 2;
          continue;
        }
        if (e === 0x78) {
          const hex = this.src.slice(this.pos + 2, this.pos + 4);
          if (/^[0-9a-fA-F]{2}$/.test(hex)) {
            out.push(parseInt(hex, 16));
            this.pos += 4;
            continue;
          }
        } else if (e >= 0x30 && e <= 0x37) {
          const oct = this.src.slice(this.pos + 1, this.pos + 4);
          if (/^[0-7]{3}$/.test(oct) && parseInt(oct, 8) <= 255) {
            out.push(parseInt(oct, 8));
            this.pos += 4;
            continue;
          }
        }
        throw new MoatError('EXPR_BAD_ESCAPE', `invalid escape sequence "${this.src.slice(escStart, escStart + 2)}"`, {
          span: { start: escStart, end: Math.min(escStart + 2, this.src.length) },
          hint: 'escapes are \\" \\\\ \\xHH (hex byte) and \\OOO (octal byte); or use a raw string r"..."',
        });
      }
      // One UTF-16 code unit or surrogate pair, encoded as UTF-8.
      const cp = this.src.codePointAt(this.pos)!;
      this.pos += cp > 0xffff ? 2 : 1;
      pushUtf8(out, cp);
    }
  }

  /** Scans a raw string r"..." or r#"..."# (the cursor is on `r`). */
  scanRawString(): Uint8Array {
    const start = this.pos;
    this.pos++;
    let hashes = 0;
    while (this.peek() === 0x23) {
      hashes++;
      this.pos++;
    }
    if (hashes > 255 || this.peek() !== 0x22) {
      throw new MoatError('EXPR_BAD_RAW_STRING', 'a raw string is r"..." or r#"..."# with at most 255 "#"', {
        span: { start, end: this.pos + 1 },
      });
    }
    this.pos++;
    const close = '"' + '#'.repeat(hashes);
    const end = this.src.indexOf(close, this.pos);
    if (end < 0) {
      throw new MoatError('EXPR_BAD_RAW_STRING', 'raw string is not closed', {
        span: { start, end: this.src.length },
        hint: `close it with ${close}`,
      });
    }
    const text = this.src.slice(this.pos, end);
    this.pos = end + close.length;
    const out: number[] = [];
    for (const ch of text) pushUtf8(out, ch.codePointAt(0)!);
    return Uint8Array.from(out);
  }
}

function pushUtf8(out: number[], cp: number): void {
  if (cp < 0x80) out.push(cp);
  else if (cp < 0x800) out.push(0xc0 | (cp >> 6), 0x80 | (cp & 63));
  else if (cp < 0x10000) out.push(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
  else out.push(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 63), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
}
