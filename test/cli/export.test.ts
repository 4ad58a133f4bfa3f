// `moat export` writes an account's deployed bundle from the control plane's
// database: entrypoint, executed managed rulesets and the lists they name. The
// files, as they are, drive `moat replay` and pass `moat daemon --check`.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildPcap } from '../../src/capture/index.js';
import { Database } from '../../src/store/index.js';
import { moat } from '../support/cli.js';
import { startApi } from '../support/api.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-export-'));
// Operator commands never create a database: `moat serve` would have made this one.
Database.open(join(dir, 'data')).close();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('moat export', () => {
  it('writes the entrypoint, managed rulesets and lists that replay and the daemon read', async () => {
    const data = join(dir, 'data');
    writeFileSync(join(dir, 'malware.txt'), '# feed\n203.0.113.0/25\n');
    expect((await moat('lists', 'load-managed', '--data-dir', data, '--name', 'svc.malware', '--file', join(dir, 'malware.txt'))).code).toBe(0);
    writeFileSync(join(dir, 'm.json'), JSON.stringify({ name: 'legacy', rules: [{ id: 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb01', action: 'block', expression: 'tcp.dstport == 23', categories: ['telnet'] }] }));
    expect((await moat('managed', 'import', '--data-dir', data, '--file', join(dir, 'm.json'))).code).toBe(0);
    const managedId = (JSON.parse((await moat('managed', 'list', '--data-dir', data, '--json')).stdout) as { id: string }[])[0]!.id;

    const api = await startApi({ dataDir: data });
    try {
      const base = `/accounts/${api.accountId}`;
      const list = await api.call('POST', `${base}/rules/lists`, { name: 'office_blocklist', kind: 'ip' });
      const op = await api.call('POST', `${base}/rules/lists/${list.json.result.id}/items`, [{ ip: '198.51.100.0/24' }, { ip: '2001:db8::/64' }]);
      for (let i = 0; i < 100; i++) {
        const s = await api.call('GET', `${base}/rules/lists/bulk_operations/${op.json.result.operation_id}`);
        if (s.json.result.status === 'completed') break;
        await new Promise((r) => setTimeout(r, 20));
      }
      const put = await api.call('PUT', `${base}/rulesets/phases/network_transit/entrypoint`, {
        rules: [
          { action: 'block', expression: 'ip.src in $office_blocklist', description: 'office' },
          { action: 'execute', expression: 'true', action_parameters: { id: managedId } },
          { action: 'block', expression: 'ip.src in $cf.malware and tcp.dstport == 443', description: 'malware' },
        ],
      });
      expect(put.status, put.text).toBe(200);
      const r = await moat('export', '--data-dir', data, '--account', api.accountId, '--out', join(dir, 'out'));
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/account entrypoint version 1, 1 managed ruleset\(s\), 2 list\(s\)/);
    } finally {
      await api.stop();
    }
    const out = join(dir, 'out');
    expect(readFileSync(join(out, 'lists/office_blocklist.txt'), 'utf8')).toContain('198.51.100.0/24\n2001:db8::/64\n');
    expect(readFileSync(join(out, 'lists/svc.malware.txt'), 'utf8')).toContain('203.0.113.0/25');
    const rules = JSON.parse(readFileSync(join(out, 'daemon-rules.json'), 'utf8')) as { rules: { account: string; managed: string[] }; lists: Record<string, string> };
    expect(Object.keys(rules.lists).sort()).toEqual(['office_blocklist', 'svc.malware']);

    const frame = (src: string, port: number) => buildFrame({ ip: { version: 4, src, dst: '192.0.2.1', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: port, flags: TCP.SYN } });
    writeFileSync(join(dir, 't.pcap'), buildPcap([frame('198.51.100.9', 80), frame('192.0.2.50', 23), frame('203.0.113.5', 443), frame('203.0.113.200', 443), frame('192.0.2.50', 80)].map((data) => ({ data }))));
    const replay = await moat(
      'replay', join(dir, 't.pcap'), '--rules', rules.rules.account, ...rules.rules.managed.flatMap((m) => ['--managed', m]),
      ...Object.entries(rules.lists).flatMap(([n, f]) => ['--list', `${n}=${f}`]), '--verdicts', join(dir, 'v.jsonl'),
    );
    expect(replay.code, replay.stderr).toBe(0);
    const verdicts = readFileSync(join(dir, 'v.jsonl'), 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { verdict: string }).verdict);
    expect(verdicts).toEqual(['drop', 'drop', 'drop', 'pass', 'pass']);

    // the daemon accepts the same keys
    writeFileSync(join(dir, 'daemon.json'), JSON.stringify({ mode: 'monitor', interfaces: ['lo'], ...rules }));
    const check = await moat('daemon', '--config', join(dir, 'daemon.json'), '--check');
    expect(check.code, check.stderr).toBe(0);
    expect(check.stdout).toMatch(/^OK: monitor on lo; capture engine [a-z]+[^;]*; 3 rules/) // office, the managed telnet rule in place of the execute rule, malware;
  });

  it('says so when the account has no entrypoint', async () => {
    const api = await startApi({ dataDir: join(dir, 'empty') });
    await api.stop();
    const r = await moat('export', '--data-dir', join(dir, 'empty'), '--account', api.accountId, '--out', join(dir, 'none'));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/has no network_transit entrypoint/);
  });
});
