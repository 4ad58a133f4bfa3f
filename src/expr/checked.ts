// The checked tree: names resolved to fields, literals converted to their
// compile-time forms. Only a checked tree is compiled.

import type { IpMatcher, IpRangeSet, NumberRangeSet } from '../net/index.js';
import type { FieldDef } from './scheme.js';

/** An int-valued operand: a field or a bit_slice of a raw bytes field. */
export type IntOperand =
  | { readonly kind: 'field'; readonly field: FieldDef }
  | { readonly kind: 'bit_slice'; readonly field: FieldDef; readonly start: number; readonly end: number };

/** A single IP literal. */
export interface IpLiteral {
  readonly family: 4 | 6;
  readonly words: readonly number[];
}

/** A checked, typed node. */
export type Checked =
  | { readonly kind: 'and' | 'or' | 'xor'; readonly items: readonly Checked[] }
  | { readonly kind: 'not'; readonly operand: Checked }
  | { readonly kind: 'bool'; readonly field: FieldDef }
  /** The constants `true` and `false` (Cloudflare's "true" deploys a rule for all traffic). */
  | { readonly kind: 'const'; readonly value: boolean }
  | { readonly kind: 'int-cmp'; readonly lhs: IntOperand; readonly op: '==' | '!=' | '<' | '<=' | '>' | '>='; readonly value: number }
  | { readonly kind: 'int-and'; readonly lhs: IntOperand; readonly mask: number }
  | { readonly kind: 'int-in'; readonly lhs: IntOperand; readonly set: NumberRangeSet }
  | { readonly kind: 'ip-cmp'; readonly field: FieldDef; readonly op: '==' | '!=' | '<' | '<=' | '>' | '>='; readonly value: IpLiteral }
  | { readonly kind: 'ip-in'; readonly field: FieldDef; readonly set: IpRangeSet }
  | { readonly kind: 'ip-list'; readonly field: FieldDef; readonly list: string }
  | { readonly kind: 'bytes-cmp'; readonly field: FieldDef; readonly op: '==' | '!=' | '<' | '<=' | '>' | '>='; readonly value: Uint8Array }
  | { readonly kind: 'bytes-in'; readonly field: FieldDef; readonly values: readonly Uint8Array[] }
  | { readonly kind: 'bytes-contains'; readonly field: FieldDef; readonly value: Uint8Array }
  | { readonly kind: 'bytes-matches'; readonly field: FieldDef; readonly regex: RegExp };

/** Resolves list names to matchers at compile time. */
export interface ListProvider {
  get(name: string): IpMatcher | undefined;
  has(name: string): boolean;
}
