// Lint configuration: typescript-eslint recommended rules, type-aware rules for
// promises, and the layering
// of src/ generated from the table in README.md's Architecture section (the
// one place that says which folder may import which).
import { readFileSync } from 'node:fs';
import { URL } from 'node:url';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * Parses the Architecture table of a README: the first Markdown table after
 * `## Architecture`, one row per src/ folder, the folder in the first cell and
 * the folders it may import in the second (backticked names, `nothing`, or
 * `any folder`). Returns folder -> allowed folders, in table order.
 */
export function readArchitecture(readme) {
  const section = readme.split(/^## Architecture\s*$/m)[1];
  if (section === undefined) throw new Error('README.md has no "## Architecture" section');
  const rows = section.split(/\n\s*\n/).find((block) => block.trimStart().startsWith('|'));
  if (rows === undefined) throw new Error('README.md\'s Architecture section has no table');
  const table = new Map();
  const pending = [];
  for (const line of rows.trim().split('\n').slice(2)) {
    const [folder, imports] = line.split('|').slice(1, 3).map((cell) => cell.trim());
    const name = /^`([a-z-]+)`$/.exec(folder)?.[1];
    if (name === undefined) throw new Error(`README.md Architecture table: bad folder cell ${folder}`);
    if (imports === 'any folder') pending.push(name);
    else table.set(name, imports === 'nothing' ? [] : [...imports.matchAll(/`([a-z-]+)`/g)].map((m) => m[1]));
  }
  for (const name of pending) table.set(name, [...table.keys()].filter((f) => f !== name));
  for (const [name, allowed] of table) {
    for (const a of allowed) if (!table.has(a)) throw new Error(`README.md Architecture table: ${name} may import ${a}, which has no row`);
  }
  return table;
}

const architecture = readArchitecture(readFileSync(new URL('./README.md', import.meta.url), 'utf8'));
const alternatives = (names) => names.map((n) => n.replace(/-/g, '\\-')).join('|');

// One merged rule per folder: the folders it may not import, and the files of
// the ones it may (only their index.ts is public). Relative specifiers only:
// packages and node: builtins are not layered here.
const layering = [...architecture].map(([folder, allowed]) => {
  const forbidden = [...architecture.keys()].filter((f) => f !== folder && !allowed.includes(f));
  const patterns = [];
  if (forbidden.length > 0) {
    patterns.push({
      regex: `^(\\.\\./)+(${alternatives(forbidden)})(/|$)`,
      message: `src/${folder} may import ${allowed.length === 0 ? 'no other folder' : `only ${allowed.join(', ')}`} (README.md, Architecture).`,
    });
  }
  if (allowed.length > 0) {
    patterns.push({
      regex: `^(\\.\\./)+(${alternatives(allowed)})(/(?!index\\.js$)|$)`,
      message: 'Import another folder through its index.ts (\'../<folder>/index.js\'), never its other files.',
    });
  }
  return {
    files: [`src/${folder}/**/*.ts`],
    rules: { 'no-restricted-imports': ['error', { patterns }] },
  };
});

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  // Type-aware rules for promises: the control plane and the daemon are built
  // on them, and a promise nobody awaits loses its error.
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: { allowDefaultProject: ['vitest.config.ts'] }, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
    },
  },
  ...layering,
);
