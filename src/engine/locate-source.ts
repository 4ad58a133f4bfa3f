// Where an expression error is in the rules file it came from: the JSON file
// is parsed without positions, so the rule's "expression" string is found
// again in the text and the error's span mapped through its escapes to a line
// and column of the file (`rules.json:4:51: ...`), as a compiler reports it.

/** Line and column (1-based) of a character offset of `text`. */
function lineColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let start = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text.charCodeAt(i) === 10) {
      line++;
      start = i + 1;
    }
  }
  return { line, column: offset - start + 1 };
}

/** Offset in `text` of the raw string literal starting at `open` (its quote) that decodes to `value`, at decoded position `at`; undefined when it does not decode to `value`. */
function rawOffset(text: string, open: number, value: string, at: number): number | undefined {
  let i = open + 1;
  let decoded = 0;
  let target: number | undefined = at === 0 ? i : undefined;
  let out = '';
  while (i < text.length && text[i] !== '"') {
    if (text[i] === '\\') {
      const c = text[i + 1];
      if (c === 'u') {
        out += String.fromCharCode(parseInt(text.slice(i + 2, i + 6), 16));
        i += 6;
      } else {
        out += c === 'n' ? '\n' : c === 't' ? '\t' : c === 'r' ? '\r' : c === 'b' ? '\b' : c === 'f' ? '\f' : (c ?? '');
        i += 2;
      }
    } else {
      out += text[i];
      i++;
    }
    decoded = out.length;
    if (target === undefined && decoded >= at) target = i;
    if (out.length > value.length) return undefined;
  }
  return out === value ? (target ?? i) : undefined;
}

/**
 * Line and column in the rules file `text` of position `at` of the expression
 * of the `index`-th rule (`expression` is its decoded text); undefined when
 * it cannot be found (the error then keeps its rule and pointer).
 */
export function expressionPosition(text: string, index: number, expression: string, at: number): { line: number; column: number } | undefined {
  const key = /"expression"\s*:\s*"/g;
  const candidates: number[] = [];
  for (let m = key.exec(text); m !== null; m = key.exec(text)) {
    const off = rawOffset(text, m.index + m[0].length - 1, expression, at);
    if (off !== undefined) candidates.push(off);
  }
  if (candidates.length === 0) return undefined;
  // Several rules may have the same expression: the index-th "expression" key is the rule's when counts agree.
  const all = [...text.matchAll(/"expression"\s*:\s*"/g)];
  const mine = all[index];
  const exact = mine === undefined ? undefined : rawOffset(text, mine.index + mine[0].length - 1, expression, at);
  return lineColumn(text, exact ?? candidates[0]!);
}
