// The layering of src/ is what README.md's Architecture table says: every
// import of src/ obeys it, and ESLint (whose rules eslint.config.js builds from
// that table) rejects a planted forbidden import or index bypass in each folder.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ESLint } from 'eslint';
import tseslint from 'typescript-eslint';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SRC = join(ROOT, 'src');

// The parser eslint.config.js uses, so that the test and the lint read the
// table alike (a JavaScript module: imported by URL, typed here).
const { readArchitecture } = (await import(pathToFileURL(join(ROOT, 'eslint.config.js')).href)) as {
  readArchitecture: (readme: string) => Map<string, string[]>;
};
const architecture = readArchitecture(readFileSync(join(ROOT, 'README.md'), 'utf8'));

const DATA_PLANE = ['expr', 'packet', 'geoip', 'table', 'capture', 'engine', 'daemon'];
const CONTROL_PLANE = ['store', 'health', 'notify', 'api'];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** Relative import specifiers of a module: static imports, re-exports, `import type` and `import()`. */
function relativeImports(file: string): string[] {
  const info = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
  return info.importedFiles.map((f) => f.fileName).filter((s) => s.startsWith('.'));
}

describe('the Architecture table', () => {
  it('has a row for every folder of src/', () => {
    const folders = readdirSync(SRC, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
    expect(folders.length).toBeGreaterThan(10);
    for (const f of folders) expect(architecture.has(f), `README.md Architecture table has no row for src/${f}`).toBe(true);
  });

  it('keeps the data plane off the control plane and the bottom at the bottom', () => {
    for (const d of DATA_PLANE) {
      for (const c of CONTROL_PLANE) expect(architecture.get(d), `${d} may import ${c}`).not.toContain(c);
      expect(architecture.get(d), `${d} may import cli`).not.toContain('cli');
    }
    expect(architecture.get('errors')).toEqual([]);
    expect(architecture.get('net')).toEqual(['errors']);
    expect(architecture.get('expr')).not.toContain('packet');
  });

  it('is obeyed by every import of src/', () => {
    const violations: string[] = [];
    for (const file of sourceFiles(SRC)) {
      const from = relative(SRC, file).split(sep);
      if (from.length < 2) {
        violations.push(`${relative(ROOT, file)}: a file directly in src/ belongs to no folder`);
        continue;
      }
      for (const spec of relativeImports(file)) {
        const to = relative(SRC, resolve(dirname(file), spec)).split(sep);
        const where = `${relative(ROOT, file)} imports '${spec}'`;
        if (to[0] === '..') violations.push(`${where}, outside src/`);
        else if (to[0] === from[0]) continue;
        else if (!(architecture.get(from[0]!) ?? []).includes(to[0]!)) violations.push(`${where}: src/${from[0]} may not import src/${to[0]}`);
        else if (to.length !== 2 || to[1] !== 'index.js') violations.push(`${where}: not through src/${to[0]}/index.ts`);
      }
    }
    expect(violations).toEqual([]);
  });
});

describe('the lint layering', () => {
  // Planted files exist nowhere: lint them without type information.
  const eslint = new ESLint({ cwd: ROOT, overrideConfig: tseslint.configs.disableTypeChecked });

  /** Lints a planted file of `folder` and answers the lines that break the layering. */
  async function flagged(folder: string, lines: string[]): Promise<Set<number>> {
    const code = lines.map((l, i) => `import * as m${i} from '${l}';\nexport { m${i} };\n`).join('');
    const [result] = await eslint.lintText(code, { filePath: `src/${folder}/planted.ts` });
    const messages = result!.messages;
    expect(messages.filter((m) => m.ruleId !== 'no-restricted-imports'), folder).toEqual([]);
    return new Set(messages.map((m) => (m.line + 1) / 2 - 1));
  }

  it.each([...architecture.keys()])('in src/%s rejects every folder the table does not allow, and every index bypass', async (folder) => {
    const allowed = architecture.get(folder)!;
    const others = [...architecture.keys()].filter((f) => f !== folder);
    const planted = [
      ...others.map((f) => ({ spec: `../${f}/index.js`, bad: !allowed.includes(f) })),
      ...allowed.map((f) => ({ spec: `../${f}/internal.js`, bad: true })),
      { spec: './own-file.js', bad: false },
    ];
    const expected = new Set(planted.flatMap((p, i) => (p.bad ? [i] : [])));
    expect(await flagged(folder, planted.map((p) => p.spec))).toEqual(expected);
  });

  it('rejects the imports that were holes before the table', async () => {
    expect(await flagged('expr', ['../store/index.js', '../net/index.js'])).toEqual(new Set([0]));
    expect(await flagged('net', ['../engine/index.js', '../errors/index.js'])).toEqual(new Set([0]));
    expect(await flagged('geoip', ['../engine/index.js', '../net/geo-ranges.js'])).toEqual(new Set([0, 1]));
    expect(await flagged('config', ['../daemon/index.js'])).toEqual(new Set([0]));
    expect(await flagged('api/routes', ['../../store/lists.js', '../../store/index.js', '../server.js'])).toEqual(new Set([0]));
  });
});
