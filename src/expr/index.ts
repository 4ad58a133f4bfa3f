// Public face of the rules language: the scheme, parsing, checking, compiling,
// the execution context and error rendering. Everything else in expr/ is internal.
export { SchemeBuilder, Scheme, shortBytesKey, type BytesKey, type FieldDef, type FieldKey, type FieldType, type FieldOptions } from './scheme.js';
export { ExecutionContext, internBytes, type LazyResolver } from './context.js';
export { parse } from './parser.js';
export { check, canonicalListName, MANAGED_LISTS, type CheckOptions, type CheckResult } from './checker.js';
export { compileChecked, intGetter, type Predicate } from './compiler.js';
export { generate, compileGenerated, ConstantPool, makeConstant, type ConstantOrigin, CODEGEN_LOCALS, contextRead, fieldHole, renderCode, type FieldRead, type GeneratedCode } from './codegen.js';
export { Filter, checkExpression, compileExpression, type CheckReport, type ExpressionOptions } from './filter.js';
export { renderError, lineColumn } from './diagnostics.js';
export { DEFAULT_LIMITS, type Limits } from './limits.js';
export { FUNCTION_NAMES, BIT_SLICE_MAX_OFFSET, BIT_SLICE_MAX_WIDTH } from './functions.js';
export type { Expr, CmpOp, RawLiteral, Rhs, ValueExpr } from './ast.js';
export type { Checked, ListProvider } from './checked.js';
