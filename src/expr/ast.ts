// The syntax tree produced by the parser. It is scheme-free: names are text and
// right-hand literals are kept raw, to be interpreted by the checker according
// to the type of the field on the left (as wirefilter lexes by lhs type).

import type { Span } from '../errors/index.js';

/** Comparison operators, canonical spelling (`eq` and `==` are both `==`). */
export type CmpOp = '==' | '!=' | '<' | '<=' | '>' | '>=' | 'in' | 'contains' | 'matches' | '&';

/** A literal as written: a quoted or raw string (already unescaped to bytes), or a bare word. */
export type RawLiteral =
  | { readonly kind: 'string'; readonly bytes: Uint8Array; readonly raw: boolean; readonly span: Span }
  | { readonly kind: 'word'; readonly text: string; readonly span: Span };

/** The left side of a comparison: a field or a function call. */
export type ValueExpr =
  | { readonly kind: 'field'; readonly name: string; readonly span: Span }
  | { readonly kind: 'call'; readonly name: string; readonly args: readonly CallArg[]; readonly span: Span };

/** A function argument: a value expression or a literal. */
export type CallArg = ValueExpr | RawLiteral;

/** The right side of a comparison. */
export type Rhs =
  | RawLiteral
  | { readonly kind: 'set'; readonly items: readonly RawLiteral[]; readonly span: Span }
  | { readonly kind: 'list'; readonly name: string; readonly span: Span };

/** A node of the logical tree. Chains of one operator are flattened. */
export type Expr =
  | { readonly kind: 'or' | 'and' | 'xor'; readonly items: readonly Expr[]; readonly span: Span }
  | { readonly kind: 'not'; readonly operand: Expr; readonly span: Span }
  | { readonly kind: 'group'; readonly inner: Expr; readonly span: Span }
  | {
      readonly kind: 'cmp';
      readonly lhs: ValueExpr;
      readonly op: CmpOp | null;
      readonly opSpan: Span | null;
      readonly rhs: Rhs | null;
      readonly span: Span;
    };
