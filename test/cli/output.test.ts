// Every CLI error path prints its registry code through one printer
// (src/cli/output.ts): `moat: error N: message`, exit 2 for usage, 1 otherwise.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { reportError } from '../../src/cli/output.js';
import { Database } from '../../src/store/index.js';
import { moat } from '../support/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-cli-errors-'));

describe('CLI errors carry their codes', () => {
  it('commander usage errors: unknown option, missing option, unknown command', async () => {
    expect(await moat('replay', 'x.pcap', '--rules', 'r.json', '--bogus')).toEqual({ code: 2, stdout: '', stderr: "moat: error 5010: unknown option '--bogus'" });
    expect(await moat('daemon')).toEqual({ code: 2, stdout: '', stderr: "moat: error 5010: required option '-c, --config <file>' not specified" });
    const r = await moat('frobnicate');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^moat: error 5010: unknown command 'frobnicate'/);
  });

  it('daemon: unreadable and invalid configuration', async () => {
    expect(await moat('daemon', '--config', join(dir, 'none.jsonc'), '--check')).toEqual({
      code: 1,
      stdout: '',
      stderr: `moat: error 5001: ${join(dir, 'none.jsonc')}: cannot read: no such file`,
    });
    const f = join(dir, 'bad.jsonc');
    writeFileSync(f, '{ "mode": "sideways" }');
    const r = await moat('daemon', '--config', f);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^moat: error 5002: ${f}: mode: `));
  });

  it('replay: usage, unreadable rules, unreadable capture', async () => {
    expect(await moat('replay', 'x.pcap', '--rules', 'r.json', '--undecodable', 'maybe')).toEqual({ code: 2, stdout: '', stderr: 'moat: error 5010: --undecodable is pass or drop' });
    const rules = join(dir, 'rules.json');
    writeFileSync(rules, JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 22' }] }));
    const r = await moat('replay', join(dir, 'none.pcap'), '--rules', rules);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^moat: error 3006: /);
  });

  it('a failed system call is one coded line, not a stack trace; an error without a code is left to the caller', () => {
    let err: unknown;
    writeFileSync(join(dir, 'plain'), '');
    try {
      mkdirSync(join(dir, 'plain', 'sub')); // under a regular file: ENOTDIR
    } catch (e) {
      err = e;
    }
    const lines: string[] = [];
    const out = { stdout: () => {}, stderr: (l: string) => lines.push(l), exitCode: 0 };
    expect(reportError(out, err)).toBe(true);
    expect([out.exitCode, lines]).toEqual([1, [`moat: error 5014: ENOTDIR: not a directory, mkdir '${join(dir, 'plain', 'sub')}'`]]);
    expect(reportError(out, new TypeError('a bug'))).toBe(false);
  });

  it('users, lists, export and managed', async () => {
    const data = join(dir, 'data');
    // Operator commands need a database (`moat serve` creates it).
    Database.open(data).close();
    expect((await moat('users', 'create', '--data-dir', data, '--email', 'x', '--account', 'a'.repeat(32))).stderr).toBe('moat: error 7400: "x" is not an email address');
    expect(await moat('lists', 'load-managed', '--data-dir', data, '--name', 'office', '--file', '-')).toMatchObject({ code: 2, stderr: expect.stringMatching(/^moat: error 5010: "office" is not a managed list/) as unknown });
    expect(await moat('export', '--data-dir', data, '--account', 'nope', '--out', dir)).toMatchObject({ code: 2, stderr: expect.stringMatching(/^moat: error 5010: "nope" is not an id/) as unknown });
    expect(await moat('lists', 'load-managed', '--data-dir', data, '--name', 'svc.malware', '--file', join(dir, 'none.txt'))).toMatchObject({ code: 2, stderr: `moat: error 4002: ${join(dir, 'none.txt')}: cannot read: ENOENT` });
    expect(await moat('managed', 'import', '--data-dir', data, '--file', join(dir, 'none.json'))).toMatchObject({ code: 2, stderr: `moat: error 6001: ${join(dir, 'none.json')}: ENOENT` });
    const bad = join(dir, 'managed.json');
    writeFileSync(bad, JSON.stringify({ name: 'm', rules: [{ action: 'explode', expression: 'tcp' }] }));
    const m = await moat('managed', 'import', '--data-dir', data, '--file', bad);
    expect(m.code).toBe(1);
    expect(m.stderr).toMatch(new RegExp(`^moat: ${bad}: at /rules/0/action: error 6007: `));
  });
});
