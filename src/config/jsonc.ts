// JSON with comments (// and /* */) and trailing commas, for annotated config
// files. Comments are blanked out in place, so JSON.parse positions still map
// to the right line and column of the file.

/** A comment opened with slash-star and never closed; `offset` is where it opens. */
export class UnterminatedComment extends Error {
  constructor(readonly offset: number) {
    super('unterminated /* comment: it opens here and is never closed with */');
    this.name = 'UnterminatedComment';
  }
}

/**
 * Returns `text` with comments and trailing commas replaced by spaces (and a
 * leading UTF-8 byte order mark, which editors on Windows write, by a space).
 * Throws UnterminatedComment for a block comment that never ends.
 */
export function stripJsonComments(text: string): string {
  const out = text.split('');
  if (text.charCodeAt(0) === 0xfeff) out[0] = ' ';
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text[i]!;
    if (c === '"') {
      i++;
      while (i < n && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
      i++;
    } else if (c === '/' && text[i + 1] === '/') {
      while (i < n && text[i] !== '\n') out[i++] = ' ';
    } else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      if (end < 0) throw new UnterminatedComment(i);
      const stop = end + 2;
      for (; i < stop; i++) if (text[i] !== '\n') out[i] = ' ';
    } else if (c === ',') {
      // A comma followed (after blanks and comments) by } or ] is a trailing comma.
      let j = i + 1;
      for (;;) {
        while (j < n && /\s/.test(text[j]!)) j++;
        if (text[j] === '/' && text[j + 1] === '/') {
          while (j < n && text[j] !== '\n') j++;
        } else if (text[j] === '/' && text[j + 1] === '*') {
          const end = text.indexOf('*/', j + 2);
          j = end < 0 ? n : end + 2;
        } else break;
      }
      if (text[j] === '}' || text[j] === ']') out[i] = ' ';
      i++;
    } else i++;
  }
  return out.join('');
}

/** Line and column (1-based) of a character offset. */
export function position(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let start = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text[i] === '\n') {
      line++;
      start = i + 1;
    }
  }
  return { line, column: offset - start + 1 };
}
