// `moat managed`: the operator imports a managed ruleset from a file, a
// customer deploys it through the API with an execute rule and overrides, and
// the entrypoint the API returns, with the managed ruleset the operator lists,
// drives `moat replay`: the managed rules run in place with the overrides.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildPcap } from '../../src/capture/index.js';
import { Database } from '../../src/store/index.js';
import { moat } from '../support/cli.js';
import { startApi } from '../support/api.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-managed-'));
// Operator commands never create a database: `moat serve` would have made these.
for (const d of ['data', 'data2']) Database.open(join(dir, d)).close();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const file = (name: string, content: unknown) => {
  const p = join(dir, name);
  writeFileSync(p, typeof content === 'string' ? content : JSON.stringify(content));
  return p;
};

const MANAGED = {
  name: 'moat legacy protocols',
  description: 'blocks legacy cleartext protocols',
  rules: [
    { id: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa01', action: 'block', expression: 'tcp.dstport == 23', description: 'telnet', categories: ['telnet', 'legacy'] },
    { id: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa02', action: 'block', expression: 'tcp.dstport == 21', description: 'ftp', categories: ['ftp', 'legacy'] },
    { id: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa03', action: 'log', expression: 'tcp.dstport == 69', description: 'tftp', categories: ['legacy'], enabled: false },
  ],
};

describe('moat managed', () => {
  it('imports, re-imports as a new version, deploys through the API and runs in moat replay', async () => {
    const data = join(dir, 'data');
    const first = await moat('managed', 'import', '--data-dir', data, '--file', file('m.json', MANAGED));
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/imported managed ruleset "moat legacy protocols" [0-9a-f]{32} version 1: 3 rules/);
    const again = await moat('managed', 'import', '--data-dir', data, '--file', file('m.json', MANAGED));
    expect(again.stdout).toMatch(/version 2: 3 rules/);
    const listed = await moat('managed', 'list', '--data-dir', data, '--json');
    const [managed] = JSON.parse(listed.stdout) as Array<{ id: string; version: string; rules: Array<{ id: string; version: string; expression: string }> }>;
    expect(managed!.version).toBe('2');
    // unchanged rules keep their ids and their version
    expect(managed!.rules.map((r) => [r.id, r.version])).toEqual(MANAGED.rules.map((r) => [r.id, '1']));
    expect(managed!.rules[0]!.expression).toBe('tcp.dstport == 23');

    const api = await startApi({ dataDir: data });
    try {
      const put = await api.call('PUT', `/accounts/${api.accountId}/rulesets/phases/network_transit/entrypoint`, {
        rules: [
          { action: 'skip', action_parameters: { ruleset: 'current' }, expression: 'ip.src in {192.0.2.7}' },
          {
            action: 'execute',
            expression: 'true',
            action_parameters: {
              id: managed!.id,
              overrides: { categories: [{ category: 'legacy', enabled: true }], rules: [{ id: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa02', action: 'log' }] },
            },
          },
          { action: 'block', expression: 'tcp.dstport == 69' },
        ],
      });
      expect(put.status, put.text).toBe(200);
      writeFileSync(join(dir, 'entry.json'), put.text);
      // the operator cannot delete it while it is deployed
      const refused = await moat('managed', 'delete', '--data-dir', data, '--id', managed!.id);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/deployed by an execute rule/);
    } finally {
      await api.stop();
    }

    const frame = (src: string, port: number) => buildFrame({ ip: { version: 4, src, dst: '198.51.100.1', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: port, flags: TCP.SYN } });
    const pcap = file('t.pcap', '');
    writeFileSync(pcap, buildPcap([frame('203.0.113.1', 23), frame('203.0.113.1', 21), frame('203.0.113.1', 69), frame('192.0.2.7', 23), frame('203.0.113.1', 80)].map((data) => ({ data }))));
    const shown = await moat('managed', 'show', '--data-dir', data, '--id', managed!.id);
    expect(JSON.parse(shown.stdout)).toEqual(managed);
    const run = await moat('replay', pcap, '--rules', join(dir, 'entry.json'), '--managed', file('managed.json', shown.stdout), '--verdicts', join(dir, 'v.jsonl'), '--json');
    expect(run.code, run.stderr).toBe(0);
    const verdicts = readFileSync(join(dir, 'v.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { verdict: string; rule?: string | null; logged?: string[] });
    expect(verdicts.map((v) => v.verdict)).toEqual([
      'drop', // telnet: managed block
      'pass', // ftp: overridden to log
      'drop', // tftp: enabled by category, logs, then the rule after the execute rule blocks 69
      'pass', // skip before the execute rule
      'pass',
    ]);
    expect(verdicts[0]!.rule).toBe('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa01');
    expect(verdicts[1]!.logged).toEqual(['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa02']);
    expect(verdicts[2]!.logged).toEqual(['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa03']);

    // without the managed file the bundle is refused, naming the execute rule
    const missing = await moat('replay', pcap, '--rules', join(dir, 'entry.json'));
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/rule 1 .*executes managed ruleset [0-9a-f]{32}, which was not given/);
  });

  it('rejects a file with a bad rule, naming the file, the pointer and the code', async () => {
    const bad = await moat('managed', 'import', '--data-dir', join(dir, 'data2'), '--file', file('bad.json', { name: 'x', rules: [{ action: 'skip', expression: 'tcp.dstport == 1' }, { action: 'block', expression: 'tcp.dstport == "a"' }] }));
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/bad\.json: at \/rules\/0\/action: error 6007/);
    const list = await moat('managed', 'list', '--data-dir', join(dir, 'data2'));
    expect(list.stdout).toBe('no managed rulesets');
  });
});
