// `moat daemon --check` validates the configuration and compiles its rules
// without capturing; errors name the file and the key or the rule.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { moat, ROOT } from '../support/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-daemon-cli-'));

describe('moat daemon --check', () => {
  it('accepts the example configuration and says what the rules read', async () => {
    const r = await moat('daemon', '--config', join(ROOT, 'config/daemon.example.jsonc'), '--check');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('OK: inline on ga, gb; 4 rules, fields: ip.src ip.src.country tcp.dstport');
  });

  it('names the key of a bad configuration value and exits 1', async () => {
    const f = join(dir, 'bad.jsonc');
    writeFileSync(f, '{ "mode": "inline", "interfaces": ["a", "b"], "rules": { "account": "x.json" }, "capture": { "ringBytes": 10 } }');
    const r = await moat('daemon', '--config', f, '--check');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^moat: error 5002: ${f}: capture\\.ringBytes: `));
  });

  it('names the rule of a ruleset that does not compile', async () => {
    writeFileSync(join(dir, 'rules.json'), JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 22' }, { action: 'block', expression: 'ip.src == 10.0.0.0/8' }] }));
    const f = join(dir, 'ok.jsonc');
    writeFileSync(f, JSON.stringify({ mode: 'monitor', interfaces: ['eth0'], rules: { account: 'rules.json' } }));
    const r = await moat('daemon', '--config', f, '--check');
    expect(r.code).toBe(1);
    expect(r.stderr).toBe('moat: error 1010: account ruleset, rule 1: a CIDR can only be used inside a set (hint: write "in {10.0.0.0/8}")');
  });
});
