// The scheme: the registry of fields a filter may name, each with a type and a
// storage slot in the execution context. Names are resolved to slots once, by
// the checker, so evaluation never looks a name up.

import { ExecutionContext } from './context.js';

/** Value types of the language (wirefilter's Int, Ip, Bytes, Bool). */
export type FieldType = 'int' | 'ip' | 'bytes' | 'bool';

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
  readonly description: string;
}

/** Options of a field definition. */
export interface FieldOptions {
  description?: string;
  /** Names of earlier fields this virtual field reads. */
  anyOf?: readonly string[];
  raw?: boolean;
  hidden?: boolean;
}

/** Builds a scheme; `build()` freezes it. */
export class SchemeBuilder {
  private readonly defs: FieldDef[] = [];
  private readonly counts: Record<FieldType, number> = { int: 0, ip: 0, bytes: 0, bool: 0 };

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
    const slot = anyOf === null ? this.counts[type]++ : -1;
    this.defs.push(
      Object.freeze({
        name,
        type,
        slot,
        index: this.defs.length,
        anyOf: anyOf === null ? null : Object.freeze(anyOf),
        raw: options.raw ?? false,
        hidden: options.hidden ?? false,
        description: options.description ?? '',
      }),
    );
    return this;
  }

  build(): Scheme {
    return new Scheme(this.defs, { ...this.counts });
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
