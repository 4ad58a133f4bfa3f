// `moat check` prints OK with the fields and lists an expression uses, or the
// rendered errors and a non-zero exit status.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, moat, moatBinary } from '../support/cli.js';

describe('moat check', () => {
  beforeAll(() => ensureBuilt(), 120_000);

  it('prints OK, the fields and the lists of a valid expression', async () => {
    const r = await moat('check', 'tcp.dstport in {22 80} and ip.src in $cf.malware or ip.dst in $office');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('OK\nfields: ip.dst ip.src tcp.dstport\nlists: $office $svc.malware');
  });

  it('renders the error with a caret and exits 1 for an invalid expression', async () => {
    const r = await moat('check', 'tcp.dstport in {22, 80}');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('1:19: error 1011: set items are separated by spaces, not commas');
    expect(r.stderr).toContain('                    ^');
  });

  it('names the file, line and column of an error in --file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-check-'));
    const file = join(dir, 'rule.expr');
    writeFileSync(file, 'tcp.dstport == 22\nand ip.src == 10.0.0.0/8\n');
    const r = await moat('check', '--file', file);
    expect(r.code).toBe(1);
    expect(r.stderr.split('\n')[0]).toBe(`${file}:2:15: error 1010: a CIDR can only be used inside a set`);
  });

  it('prints the same result as JSON with --json', async () => {
    const ok = JSON.parse((await moat('check', '--json', 'not tcp.flags.syn')).stdout);
    expect(ok).toEqual({ ok: true, fields: ['tcp.flags.syn'], lists: [], errors: [] });
    const bad = await moat('check', '--json', 'ip.proto == tcp');
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stdout).errors[0]).toMatchObject({ code: 2003, line: 1, column: 13, span: { start: 12, end: 15 } });
  });

  it('rejects account lists that are not declared when --list is given', async () => {
    const r = await moat('check', '--list', 'office', '--', 'ip.src in $office or ip.src in $other');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('error 2006: unknown list $other');
  });

  it('applies configured limits', async () => {
    const r = await moat('check', '--max-length', '10', 'tcp.dstport == 80');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('error 1017');
  });

  it('prints the JavaScript generated for the expression as a block rule with --emit-js, each function under its sourceURL', async () => {
    const r = await moat('check', '--emit-js', 'tcp.dstport in {22 80} and ip.src.country == "CN"');
    expect(r.code).toBe(0);
    expect(r.stdout.startsWith('OK\nfields: ip.src.country tcp.dstport\nlists: (none)\n\nreturn function bundle(c, len) {\n')).toBe(true);
    expect(r.stdout).toContain('/* rule 0 */ if (');
    expect(r.stdout).toContain('\n//# sourceURL=moat-bundle/bundle.js\n\nreturn function packetProgram(');
    expect(r.stdout.endsWith('\n//# sourceURL=moat-bundle/packet-program.js')).toBe(true);
    const json = JSON.parse((await moat('check', '--json', '--emit-js', 'ip.src.country matches "^C"')).stdout);
    expect(json.generated.map((g: { name: string }) => g.name)).toEqual(['bundle']);
    expect(json.generated[0].source).toContain('K[0](c)');
    expect(JSON.parse((await moat('check', '--json', 'tcp.flags.syn')).stdout).generated).toBeUndefined();
  });

  it('exits 2 with a message for usage errors and unreadable files', async () => {
    expect((await moat('check')).code).toBe(2);
    const r = await moat('check', '--file', '/nonexistent/rule.expr');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('moat: error 5010: /nonexistent/rule.expr: cannot read: ENOENT');
  });

  it('works as the installed binary, reading standard input', () => {
    const r = moatBinary(['check', '--file', '-'], 'ip.src in {192.0.2.0/24}\n');
    expect(r.stdout).toBe('OK\nfields: ip.src\nlists: (none)\n');
    expect(r.code).toBe(0);
    const bad = moatBinary(['check', 'ip.src in {192.0.2.1/24}']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('hint: did you mean 192.0.2.0/24?');
  });
});
