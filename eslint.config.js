// Lint configuration: typescript-eslint recommended rules, plus the one-way
// dependency rule between architecture folders (the data plane never imports
// the control plane).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const dataPlane = ['expr', 'net', 'errors', 'packet', 'capture', 'engine', 'daemon'];
const controlPlane = ['api', 'store', 'health', 'notify', 'channel/server'];

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
  ...dataPlane.map((dir) => ({
    files: [`src/${dir}/**/*.ts`],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: controlPlane.map((c) => ({
            group: [`**/${c}/**`, `**/${c}`],
            message: 'The data plane never imports the control plane.',
          })),
        },
      ],
    },
  })),
  {
    files: ['src/expr/**/*.ts', 'src/net/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['**/packet/**', '**/capture/**', '**/engine/**', '**/daemon/**', '**/cli/**'], message: 'expr and net sit at the bottom: they import only errors/ and net/.' },
          ],
        },
      ],
    },
  },
);
