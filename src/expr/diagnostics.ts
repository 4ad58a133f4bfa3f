// Renders an expression error as `line:column: message`, the source line, and a
// caret underline under the span (as wirefilter's ParseError does), plus a hint.

import type { MoatError, Span } from '../errors/index.js';

/** Line and column (both 1-based) of a character offset. */
export function lineColumn(source: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < offset && i < source.length; i++) {
    if (source.charCodeAt(i) === 0x0a) {
      line++;
      lineStart = i + 1;
    }
  }
  return { line, column: offset - lineStart + 1 };
}

/** Renders `err` against `source`. Without a span, only the message (and hint). */
export function renderError(source: string, err: MoatError, label = ''): string {
  const head = `${label}error ${err.code}`;
  const hint = err.hint === undefined ? '' : `\nhint: ${err.hint}`;
  if (err.span === undefined) return `${head}: ${err.message}${hint}`;
  const span: Span = err.span;
  const { line, column } = lineColumn(source, span.start);
  const lineStart = span.start - (column - 1);
  let lineEnd = source.indexOf('\n', lineStart);
  if (lineEnd < 0) lineEnd = source.length;
  let text = source.slice(lineStart, lineEnd);
  if (text.endsWith('\r')) text = text.slice(0, -1);
  // Control characters would garble the terminal; show them as spaces, keeping columns.
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  text = text.replace(/[\x00-\x1f\x7f]/g, ' ');
  const width = Math.max(1, Math.min(span.end, lineStart + text.length) - span.start);
  const pad = ' '.repeat(column - 1);
  return `${label}${line}:${column}: ${head.slice(label.length)}: ${err.message}\n  ${text}\n  ${pad}${'^'.repeat(width)}${hint}`;
}
