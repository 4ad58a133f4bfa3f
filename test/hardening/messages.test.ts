// Issue #16 item 10: configuration and rules messages say file, line and
// column (a byte order mark is skipped, an unterminated comment is located, a
// rule's expression error points into the rules file), and what they quote of
// the input is cut and escaped: a 1 MB bad list line or a control byte never
// reaches the terminal whole or raw.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadDaemonConfig } from '../../src/config/index.js';
import { BundleError, loadBundle } from '../../src/engine/index.js';
import { MoatError, quoteInput } from '../../src/errors/index.js';
import { parseListText } from '../../src/net/index.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-hardening-messages-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, content: string | Buffer): string {
  const f = join(dir, name);
  writeFileSync(f, content);
  return f;
}

function thrown(f: () => unknown): Error {
  try {
    f();
  } catch (err) {
    return err as Error;
  }
  throw new Error('did not throw');
}

const RULES = file('rules.json', JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 22' }] }));
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

describe('configuration and rules messages', () => {
  it('skips a UTF-8 byte order mark in a configuration and a rules file; a later syntax error keeps its line and column', () => {
    const c = file('bom.jsonc', Buffer.concat([BOM, Buffer.from(JSON.stringify({ mode: 'monitor', interfaces: ['lo'], rules: { account: RULES } }))]));
    expect(loadDaemonConfig(c).mode).toBe('monitor');
    const r = file('bom.json', Buffer.concat([BOM, Buffer.from(JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 22' }] }))]));
    expect(loadBundle({ rules: [r] }).rulesets[0]!.rules).toHaveLength(1);
    const bad = file('bom-bad.jsonc', Buffer.concat([BOM, Buffer.from('{\n  "mode": "monitor"\n  "interfaces": []\n}\n')]));
    expect(thrown(() => loadDaemonConfig(bad)).message).toMatch(new RegExp(`^${bad}:3:3: `));
  });

  it('locates an unterminated comment: file, line and column where it opens (5002)', () => {
    const f = file('unterminated.jsonc', '{\n  "mode": "monitor", /* the rest\n  "interfaces": ["lo"]\n}\n');
    const e = thrown(() => loadDaemonConfig(f)) as MoatError;
    expect(e.code).toBe(5002);
    expect(e.message).toBe(`${f}:2:22: unterminated /* comment: it opens here and is never closed with */`);
  });

  it('points an expression error of a rules file at its file, line and column', () => {
    const f = file('bad-expr.json', '{\n  "rules": [\n    {"action": "block", "expression": "tcp.dstport == 22"},\n    {"action": "block",\n     "expression": "tcp.dstport == 22 and ip.src == 1.2.3"}\n  ]\n}\n');
    const e = thrown(() => loadBundle({ rules: [f] }));
    expect(e).toBeInstanceOf(BundleError);
    const [first] = (e as BundleError).errors;
    expect(first!.code).toBe(1006);
    // Line 5: five spaces, "expression": " (15 characters), then 32 characters of the expression.
    expect(first!.message).toBe(`${f}:5:53: account ruleset, rule 1: "1.2.3" is not a valid IP address`);
    expect(first!.pointer).toBe('/rules/1/expression');
  });

  it('says the line and column of a JSON syntax error in a rules file, with control bytes escaped', () => {
    const f = file('bad-json.json', '{"rules": [\n{"action": "block",\n"expression": "tcp"\u0001}]}');
    const e = thrown(() => loadBundle({ rules: [f] })) as MoatError;
    expect(e.code).toBe(6001);
    expect(e.message).toMatch(new RegExp(`^${f}:3:20: `));
    // eslint-disable-next-line no-control-regex -- no raw control character may remain
    expect(e.message).not.toMatch(/[\u0000-\u001f]/);
  });

  it('cuts a 1 MB bad list line to 80 characters with its length, and escapes control bytes', () => {
    const e = thrown(() => parseListText('192.0.2.1\n' + 'x'.repeat(1_000_000) + '\n', 'big.txt'));
    expect(e.message).toBe(`big.txt:2: invalid IP address "${'x'.repeat(80)}…" (1000000 characters)`);
    const ctl = thrown(() => parseListText('192.0.2.1\x1b[2J\x07\n', 'ctl.txt'));
    expect(ctl.message).toBe('ctl.txt:1: invalid IP address "192.0.2.1\\u001b[2J\\u0007"');
    // eslint-disable-next-line no-control-regex -- no raw control character may remain
    expect(ctl.message).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
  });

  it('quoteInput escapes quotes, backslashes, C0 and C1 controls and DEL, and cuts long input', () => {
    expect(quoteInput('a"b\\c\n\u0085\u007f')).toBe('"a\\"b\\\\c\\n\\u0085\\u007f"');
    expect(quoteInput('y'.repeat(100), 10)).toBe(`"${'y'.repeat(10)}…" (100 characters)`);
  });
});

describe('input echoed by configuration and command-line messages', () => {
  it('quotes configuration keys from the file cut and escaped', () => {
    const f = file('keys.jsonc', JSON.stringify({ mode: 'monitor', interfaces: ['lo'], rules: { account: RULES }, ['k\u001b' + 'y'.repeat(200)]: 1 }));
    const e = thrown(() => loadDaemonConfig(f));
    expect(e.message).toBe(`${f}: (top level): unknown key "k\\u001b${'y'.repeat(78)}…" (202 characters)`);
  });

  it('quotes command-line values cut and escaped', async () => {
    const { moat } = await import('../support/cli.js');
    const r = await moat('check', '--max-depth', '\u001b[2J' + '9'.repeat(500), 'tcp');
    expect(r.stderr).toBe(`moat: error 5010: --max-depth takes a positive integer, not "\\u001b[2J${'9'.repeat(76)}…" (504 characters)`);
  });
});
