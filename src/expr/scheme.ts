// The scheme: the registry of fields a filter may name, each with a type and a
// storage slot in the execution context. Names are resolved to slots once, by
// the checker, so evaluation never looks a name up.

import { ExecutionContext } from './context.js';

/** Value types of the language (wirefilter's Int, Ip, Bytes, Bool). */
export type FieldType = 'int' | 'ip' | 'bytes' | 'bool';

/**
 * The integer key of a bytes value buf[start, end): a non-negative integer, or
 * -1 when the value has no key. Two values that have keys are equal exactly
 * when their keys are; a value without a key equals no value that has one.
 */
export type BytesKey = (buf: Uint8Array, start: number, end: number) => number;

/**
 * A bytes field's key: a hidden int field that holds the key of its value
 * (NaN when the value is absent), written by whoever writes the value
 * (ExecutionContext.setBytes does). Generated code then tests `==`, `!=` and
 * `in` with keyed literals as integer comparisons, and the producer may skip
 * the bytes themselves when nothing reads them.
 */
export interface FieldKey {
  readonly field: FieldDef;
  readonly of: BytesKey;
}

/**
 * Values of up to 6 bytes as one exact number (the length above the bytes,
 * below 2^51); longer values have no key (-1). A BytesKey for any bytes field.
 */
export function shortBytesKey(buf: Uint8Array, start: number, end: number): number {
  if (end - start > 6) return -1;
  let key = end - start;
  for (let i = start; i < end; i++) key = key * 256 + buf[i]!;
  return key;
}

/** A field of the scheme. `slot` indexes the context storage of its type. */
export interface FieldDef {
  readonly name: string;
  readonly type: FieldType;
  /** Slot within the storage of `type`; -1 for a virtual field. */
  readonly slot: number;
  /** Position in `Scheme.fields`. */
  readonly index: number;
  /** For a virtual multi-value field: the fields it reads (it matches when any does). */
  readonly anyOf: readonly FieldDef[] | null;
  /** Raw bytes fields (`ip`, `tcp`, ...) are the inputs of bit_slice. */
  readonly raw: boolean;
  /** Internal fields have slots but cannot be named in expressions. */
  readonly hidden: boolean;
  /** For a bytes field: the hidden int field holding its key (see FieldKey), or null. */
  readonly key: FieldKey | null;
  /**
   * The lazy group of a field its producer may fill only on demand (see
   * ExecutionContext.pending), or -1. Generated code resolves the group
   * before it reads the field.
   */
  readonly lazy: number;
  readonly description: string;
}

/** Options of a field definition. */
export interface FieldOptions {
  description?: string;
  /** Names of earlier fields this virtual field reads. */
  anyOf?: readonly string[];
  raw?: boolean;
  hidden?: boolean;
  /** For a bytes field: the name of a hidden int field (defined before build()) and the key function. */
  key?: { readonly field: string; readonly of: BytesKey };
  /**
   * A lazy group name: the fields of one group are filled together, on demand
   * (groups are numbered in order of first use; see FieldDef.lazy).
   */
  lazy?: string;
}

/** Builds a scheme; `build()` freezes it. */
export class SchemeBuilder {
  private readonly defs: Array<{ -readonly [K in keyof FieldDef]: FieldDef[K] }> = [];
  private readonly keys: Array<{ def: FieldDef; field: string; of: BytesKey }> = [];
  private readonly counts: Record<FieldType, number> = { int: 0, ip: 0, bytes: 0, bool: 0 };
  private readonly lazyGroups: string[] = [];

  /** Adds a field; throws on a duplicate name or an unknown alternative. */
  field(name: string, type: FieldType, options: FieldOptions = {}): this {
    if (this.defs.some((d) => d.name === name)) throw new Error(`field ${name} is defined twice`);
    let anyOf: FieldDef[] | null = null;
    if (options.anyOf !== undefined) {
      anyOf = options.anyOf.map((n) => {
        const d = this.defs.find((x) => x.name === n);
        if (d === undefined || d.type !== type || d.anyOf !== null) throw new Error(`${name}: bad alternative ${n}`);
        return d;
      });
    }
    if (options.lazy !== undefined && anyOf !== null) throw new Error(`${name}: a virtual field cannot be lazy (its alternatives are)`);
    let lazy = -1;
    if (options.lazy !== undefined) {
      lazy = this.lazyGroups.indexOf(options.lazy);
      if (lazy < 0) lazy = this.lazyGroups.push(options.lazy) - 1;
    }
    const slot = anyOf === null ? this.counts[type]++ : -1;
    const def = {
      name,
      type,
      slot,
      index: this.defs.length,
      anyOf: anyOf === null ? null : Object.freeze(anyOf),
      raw: options.raw ?? false,
      hidden: options.hidden ?? false,
      key: null,
      lazy,
      description: options.description ?? '',
    };
    if (options.key !== undefined) {
      if (type !== 'bytes' || anyOf !== null) throw new Error(`${name}: only a bytes field with a slot can have a key`);
      this.keys.push({ def, field: options.key.field, of: options.key.of });
    }
    this.defs.push(def);
    return this;
  }

  build(): Scheme {
    // Keys name fields that may come later: resolved here, then every field is frozen.
    for (const k of this.keys) {
      const f = this.defs.find((d) => d.name === k.field);
      if (f === undefined || f.type !== 'int' || !f.hidden) throw new Error(`${k.def.name}: key ${k.field} must be a hidden int field`);
      (k.def as { key: FieldKey | null }).key = Object.freeze({ field: f, of: k.of });
    }
    for (const d of this.defs) Object.freeze(d);
    return new Scheme(this.defs, { ...this.counts }, Object.freeze(this.lazyGroups.slice()));
  }
}

/** An immutable set of fields with their slots. */
export class Scheme {
  readonly fields: readonly FieldDef[];
  private readonly byName: ReadonlyMap<string, FieldDef>;

  constructor(
    defs: readonly FieldDef[],
    /** Number of storage slots per type. */
    readonly slotCounts: Readonly<Record<FieldType, number>>,
    /** Names of the lazy groups, by number (FieldDef.lazy). */
    readonly lazyGroups: readonly string[] = [],
  ) {
    this.fields = Object.freeze(defs.slice());
    this.byName = new Map(defs.map((d) => [d.name, d]));
    Object.freeze(this);
  }

  /** The field an expression may name `name`, or undefined (hidden fields are not found). */
  lookup(name: string): FieldDef | undefined {
    const d = this.byName.get(name);
    return d === undefined || d.hidden ? undefined : d;
  }

  /** The field named `name`, hidden ones included; throws when the scheme has none (a programming error). */
  field(name: string): FieldDef {
    const d = this.byName.get(name);
    if (d === undefined) throw new Error(`unknown field ${name}`);
    return d;
  }

  /** A fresh execution context with every field absent. */
  newContext(): ExecutionContext {
    return new ExecutionContext(this);
  }
}
