// `moat check`: parse and type-check one rule expression (from the command line
// or a file) against the network_transit field set, and say what it uses; with
// --emit-js, also print the JavaScript the engine generates for it as a rule.

import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { compileBundle, toRuleset, type GeneratedSource } from '../../engine/index.js';
import { checkExpression, lineColumn, renderError, type ListProvider } from '../../expr/index.js';
import { TRANSIT_SCHEME } from '../../packet/index.js';
import { CliError, type Output } from '../output.js';
import { quoteInput, readRegularFile } from '../../errors/index.js';

interface CheckFlags {
  file?: string;
  json?: boolean;
  list?: string[];
  maxLength?: string;
  maxDepth?: string;
  emitJs?: boolean;
}

/** Registers `moat check` on the program. */
export function registerCheck(program: Command, out: Output): void {
  program
    .command('check')
    .description('check a network_transit rule expression: print the fields and lists it uses, or its errors')
    .argument('[expression]', 'the expression (quote it for the shell)')
    .option('-f, --file <path>', 'read the expression from a file ("-" for standard input)')
    .option('--json', 'print the result as JSON')
    .option('--list <name...>', 'account lists that exist (without $); when given, other account lists are errors')
    .option('--max-length <n>', 'expression length limit in characters', '4096')
    .option('--max-depth <n>', 'nesting depth limit', '128')
    .option('--emit-js', 'also print the generated JavaScript of the expression as a block rule (for debugging a verdict)')
    .action((expression: string | undefined, flags: CheckFlags) => {
      let source: string;
      let label: string;
      if (flags.file !== undefined) {
        if (expression !== undefined) throw new CliError('give either an expression or --file, not both');
        label = flags.file === '-' ? '<stdin>' : flags.file;
        try {
          source = flags.file === '-' ? readFileSync(0, 'utf8') : readRegularFile(flags.file, 'rules', 'rules file').toString('utf8');
        } catch (err) {
          throw new CliError(`${label}: cannot read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
        }
      } else {
        if (expression === undefined) throw new CliError('give an expression, or --file <path>');
        label = '<expression>';
        source = expression;
      }
      const lists = flags.list === undefined ? undefined : new Set(flags.list.map((l) => l.replace(/^\$/, '')));
      const provider: ListProvider | undefined = lists === undefined ? undefined : { has: (n) => lists.has(n), get: () => undefined };
      const limits = { maxLength: positive(flags.maxLength, '--max-length'), maxDepth: positive(flags.maxDepth, '--max-depth', MAX_DEPTH_CAP) };
      const report = checkExpression(source, { scheme: TRANSIT_SCHEME, lists: provider, limits });
      const generated = report.ok && flags.emitJs === true ? generatedSources(source, provider, limits) : undefined;
      if (flags.json === true) {
        out.stdout(
          JSON.stringify(
            {
              ok: report.ok,
              fields: report.fields,
              lists: report.lists,
              errors: report.errors.map((e) => ({
                code: e.code,
                message: e.message,
                ...(e.span === undefined ? {} : { span: e.span, ...lineColumn(source, e.span.start) }),
                ...(e.hint === undefined ? {} : { hint: e.hint }),
              })),
              ...(generated === undefined ? {} : { generated }),
            },
            null,
            2,
          ),
        );
      } else if (report.ok) {
        out.stdout('OK');
        out.stdout(`fields: ${report.fields.join(' ') || '(none)'}`);
        out.stdout(`lists: ${report.lists.map((l) => '$' + l).join(' ') || '(none)'}`);
        for (const g of generated ?? []) out.stdout(`\n${g.source}`);
      } else {
        const prefix = flags.file === undefined ? '' : `${label}:`;
        for (const e of report.errors) out.stderr(renderError(source, e, prefix));
      }
      out.exitCode = report.ok ? 0 : 1;
    });
}

// The generated functions of a bundle of one block rule, `expression`:
// each ends with its `//# sourceURL=moat-bundle/<name>.js` line.
function generatedSources(expression: string, lists: ListProvider | undefined, limits: { maxLength: number; maxDepth: number }): readonly GeneratedSource[] {
  const account = toRuleset({ name: 'check', phase: 'network_transit', rules: [{ action: 'block', expression }] });
  return compileBundle({ account, lists, limits }).sources;
}

/**
 * The largest --max-depth: the parser, checker, compiler and generated code
 * recurse once per level, and 256 levels pass all of them on 40% of Node's
 * default stack (test/cli/check.test.ts), where 1,500 overflowed it.
 */
export const MAX_DEPTH_CAP = 256;

function positive(v: string | undefined, flag: string, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new CliError(`${flag} takes a positive integer, not ${quoteInput(v ?? '')}`);
  if (n > max) throw new CliError(`${flag} takes at most ${max} (deeper nesting would overflow the stack), not ${n}`);
  return n;
}
