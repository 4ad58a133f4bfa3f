// `moat daemons` and the control channel across processes: a real `moat
// serve` process, the operator commands run as the built binary (other
// processes on the same SQLite file), and a WebSocket client speaking the
// protocol. Tokens are shown once or written 0600; `moat lists load-managed`
// and `moat managed import` reach a connected daemon; `moat daemons revoke`
// closes its connection within a second; a second `moat serve` on the same
// data directory reaches it too; `moat daemons list` shows the fleet;
// TLS serves the API and the channel on one port.
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { get } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printedCredentials, serveProcess, type ServeProcess } from '../support/api.js';
import { ChannelClient, listDigest, type Msg } from '../support/channel-client.js';
import { BIN, ROOT, ensureBuilt, moatBinary, type CliRun } from '../support/cli.js';
import { peerTool } from '../support/tools.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-daemons-cli-'));
const data = join(dir, 'data');
let serve: ServeProcess;
let creds: { email: string; key: string; accountId: string };
let channelUrl: string;

beforeAll(async () => {
  ensureBuilt();
  serve = await serveProcess(data, ['--channel-heartbeat', '0.5']);
  creds = printedCredentials(serve);
  channelUrl = serve.lines.map((l) => /control channel for daemons on (\S+)/.exec(l)?.[1]).find((u) => u !== undefined)!;
}, 30_000);
afterAll(async () => {
  serve?.child.kill('SIGTERM');
  await serve?.exited;
  rmSync(dir, { recursive: true, force: true });
});

const cli = (...argv: string[]) => moatBinary([...argv, '--data-dir', data]);
/**
 * The binary run without blocking this process: a test's channel client must
 * keep answering pings while another process works (spawnSync would stall it
 * past three heartbeats and the hub would rightly close it as dead).
 */
const cliAsync = (...argv: string[]) =>
  new Promise<CliRun>((resolve) => {
    execFile(process.execPath, [BIN, ...argv, '--data-dir', data], { cwd: ROOT, encoding: 'utf8' }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout, stderr });
    });
  });

async function call(method: string, path: string, body?: unknown): Promise<Msg> {
  const res = await fetch(serve.url + path, {
    method,
    headers: { 'X-Auth-Email': creds.email, 'X-Auth-Key': creds.key, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = (await res.json()) as Msg;
  if (!json.success) throw new Error(JSON.stringify(json.errors));
  return json.result;
}

describe('moat daemons create', () => {
  it('prints the token once and stores only its hash', () => {
    const r = cli('daemons', 'create', '--account', creds.accountId, '--name', 'gw-print');
    expect(r.code, r.stderr).toBe(0);
    const token = /^token: (moatd_[A-Za-z0-9_-]{40}) {3}\(shown once; only a hash is stored\)$/m.exec(r.stdout)?.[1];
    expect(token).toBeDefined();
    expect(readFileSync(join(data, 'moat.db')).includes(Buffer.from(token!))).toBe(false);
    const listed = cli('daemons', 'list');
    expect(listed.stdout).not.toContain(token!);
    expect(listed.stdout).toMatch(/"gw-print" {2}account [0-9a-f]{32} {2}no zone {2}never connected/);
  });

  it('writes the token to a new 0600 file with --token-file, never over an existing one', () => {
    const file = join(dir, 'gw.token');
    const r = cli('daemons', 'create', '--account', creds.accountId, '--name', 'gw-file', '--token-file', file);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`token written to ${file} (mode 0600`);
    const token = readFileSync(file, 'utf8').trim();
    expect(token).toMatch(/^moatd_[A-Za-z0-9_-]{40}$/);
    expect(r.stdout).not.toContain(token);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const again = cli('daemons', 'create', '--account', creds.accountId, '--name', 'gw-file-2', '--token-file', file);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toMatch(/moat: error 5014: .*file exists/);
    expect(readFileSync(file, 'utf8').trim()).toBe(token);
    // The daemon whose token could not be written is not left usable.
    expect(JSON.parse(cli('daemons', 'list', '--json').stdout).find((d: Msg) => d.name === 'gw-file-2').revoked_on).not.toBeNull();
  });

  it('refuses a zone of another account, an unknown account and a name taken in the account, with their codes', () => {
    const other = '0'.repeat(32);
    expect(cli('daemons', 'create', '--account', other, '--name', 'x').stderr).toMatch(/moat: error 7401: no account/);
    expect(cli('daemons', 'create', '--account', creds.accountId, '--zone', other, '--name', 'x').stderr).toMatch(/moat: error 7400: zone .* is not a zone of account/);
    expect(cli('daemons', 'create', '--account', creds.accountId, '--name', 'gw-print').stderr).toMatch(/moat: error 7400: .*already has a daemon named "gw-print"/);
  });
});

describe('a connected daemon', () => {
  let c: ChannelClient;
  let token: string;
  let managedId: string;
  const managedFile = join(dir, 'managed.json');
  const malware = join(dir, 'malware.txt');

  beforeAll(async () => {
    writeFileSync(managedFile, JSON.stringify({ name: 'legacy', rules: [{ id: 'a'.repeat(32), action: 'block', expression: 'tcp.dstport == 23' }] }));
    expect(cli('managed', 'import', '--file', managedFile).code).toBe(0);
    managedId = JSON.parse(cli('managed', 'list', '--json').stdout)[0].id;
    writeFileSync(malware, '192.0.2.1\n');
    expect(cli('lists', 'load-managed', '--name', 'svc.malware', '--file', malware).code).toBe(0);
    await call('PUT', `/accounts/${creds.accountId}/rulesets/phases/network_transit/entrypoint`, {
      rules: [
        { action: 'block', expression: 'ip.src in $svc.malware' },
        { action: 'execute', expression: 'true', action_parameters: { id: managedId } },
      ],
    });
    const r = cli('daemons', 'create', '--account', creds.accountId, '--name', 'gw-live');
    token = /token: (\S+)/.exec(r.stdout)![1]!;
    c = await ChannelClient.hello(channelUrl, token, { moat: '7.7.7' });
    const b = await c.next('bundle');
    expect(b.managed.map((m: Msg) => [m.id, m.version])).toEqual([[managedId, '1']]);
    expect(b.lists['svc.malware']).toEqual({ digest: listDigest(['192.0.2.1']), entries: ['192.0.2.1'] });
    c.applied(b);
  }, 30_000);

  it('shows in moat daemons list as connected, with what it runs', async () => {
    let line = '';
    for (let i = 0; i < 50 && !/runs /.test(line); i++) {
      await new Promise((r) => setTimeout(r, 50));
      line = (await cliAsync('daemons', 'list', '--account', creds.accountId)).stdout.split('\n').find((l) => l.includes('"gw-live"')) ?? '';
    }
    expect(line).toMatch(/connected since \S+ {2}from \S*127\.0\.0\.1 {2}moat 7\.7\.7 {2}runs [0-9a-f]{12} \(account v1, zone v-\) applied \S+/);
  });

  it('gets the new list contents after moat lists load-managed in another process', async () => {
    writeFileSync(malware, '192.0.2.1\n192.0.2.2\n');
    const started = Date.now();
    expect((await cliAsync('lists', 'load-managed', '--name', 'svc.malware', '--file', malware)).code).toBe(0);
    const b = await c.next('bundle', 3000);
    expect(Date.now() - started).toBeLessThan(1500);
    expect(b.lists['svc.malware'].entries).toEqual(['192.0.2.1', '192.0.2.2']);
    c.applied(b);
  });

  it('gets the new managed version after moat managed import in another process, without the list again', async () => {
    writeFileSync(managedFile, JSON.stringify({ name: 'legacy', rules: [{ id: 'a'.repeat(32), action: 'block', expression: 'tcp.dstport == 2323' }] }));
    expect((await cliAsync('managed', 'import', '--file', managedFile)).code).toBe(0);
    const b = await c.next('bundle', 3000);
    expect(b.managed[0].version).toBe('2');
    expect(b.managed[0].rules[0].expression).toBe('tcp.dstport == 2323');
    expect(b.lists['svc.malware']).toEqual({ digest: listDigest(['192.0.2.1', '192.0.2.2']) });
    c.applied(b);
  });

  it('gets a version written through a second moat serve on the same data directory', async () => {
    const second = await serveProcess(data);
    try {
      const started = Date.now();
      const res = await fetch(`${second.url}/accounts/${creds.accountId}/rulesets/phases/network_transit/entrypoint`, {
        method: 'PUT',
        headers: { 'X-Auth-Email': creds.email, 'X-Auth-Key': creds.key, 'Content-Type': 'application/json' },
        body: JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 3389', description: 'via the second server' }] }),
      });
      expect(res.status).toBe(200);
      const b = await c.next('bundle', 3000);
      expect(Date.now() - started).toBeLessThan(1500);
      expect(b.account.rules.map((r: Msg) => r.description)).toEqual(['via the second server']);
      expect(b.managed).toEqual([]);
      c.applied(b);
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
  });

  it('is disconnected with 4003 within a second of moat daemons revoke in another process', async () => {
    const started = Date.now();
    const r = await cliAsync('daemons', 'revoke', 'gw-live');
    expect(r.stdout).toMatch(/revoked daemon [0-9a-f]{32} "gw-live"/);
    const closed = await c.closed;
    expect(closed.code).toBe(4003);
    expect(Date.now() - started).toBeLessThan(1500);
    expect((await cliAsync('daemons', 'revoke', 'gw-live')).stderr).toMatch(/moat: error 7401: .*already revoked/);
    const again = await ChannelClient.hello(channelUrl, token);
    expect((await again.closed).code).toBe(4003);
  });
});

describe('moat serve with --tls-cert and --tls-key', () => {
  const openssl = peerTool('openssl');
  it.skipIf(openssl === undefined)('serves the API over HTTPS and the channel over WSS on one port', async () => {
    const cert = join(dir, 'cert.pem');
    const key = join(dir, 'key.pem');
    execFileSync(openssl!, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
    const ca = readFileSync(cert);
    const tlsData = join(dir, 'tls-data');
    const s = await serveProcess(tlsData, ['--tls-cert', cert, '--tls-key', key]);
    try {
      expect(s.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/client\/v4$/);
      const channel = s.lines.map((l) => /control channel for daemons on (\S+)/.exec(l)?.[1]).find((u) => u !== undefined)!;
      expect(channel).toMatch(/^wss:\/\/127\.0\.0\.1:\d+\/moat\/channel$/);
      const health = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        get(s.url.replace('/client/v4', '/health'), { ca }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        }).on('error', reject);
      });
      expect(health.status).toBe(200);
      expect(JSON.parse(health.body).status).toBe('ok');
      const { accountId } = printedCredentials(s);
      const t = /token: (\S+)/.exec(moatBinary(['daemons', 'create', '--data-dir', tlsData, '--account', accountId, '--name', 'gw-tls']).stdout)![1]!;
      const c = await ChannelClient.hello(channel, t, {}, { ca });
      expect((await c.next('welcome')).daemon.name).toBe('gw-tls');
      expect((await c.next('bundle')).account).toBeNull();
      c.close();
      // A client that does not trust the certificate is refused by TLS itself.
      await expect(ChannelClient.open(channel)).rejects.toThrow(/self[- ]signed|certificate/i);
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
    // A key that is not the certificate's: 7096 at start, nothing listens.
    const otherKey = join(dir, 'other-key.pem');
    execFileSync(openssl!, ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-out', otherKey], { stdio: 'ignore' });
    const bad = await cliAsync('serve', '--listen', '127.0.0.1:0', '--tls-cert', cert, '--tls-key', otherKey);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/moat: error 7096: --tls-cert\/--tls-key: .*(key values mismatch|does not match)/i);
    const notPem = await cliAsync('serve', '--listen', '127.0.0.1:0', '--tls-cert', otherKey, '--tls-key', otherKey);
    expect(notPem.stderr).toMatch(/moat: error 7096: /);
  }, 30_000);

  it('refuses a missing key file with 7096, and one flag without the other with 5010', () => {
    const r = moatBinary(['serve', '--data-dir', join(dir, 'x'), '--listen', '127.0.0.1:0', '--tls-cert', join(dir, 'nope.pem'), '--tls-key', join(dir, 'nope.key')]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/moat: error 7096: --tls-cert .*nope\.pem: cannot read: ENOENT/);
    const half = moatBinary(['serve', '--data-dir', join(dir, 'x'), '--listen', '127.0.0.1:0', '--tls-cert', join(dir, 'nope.pem')]);
    expect(half.code).toBe(2);
    expect(half.stderr).toMatch(/moat: error 5010: --tls-cert and --tls-key go together/);
  });
});

describe('moat serve --channel-heartbeat', () => {
  it('refuses a value that is not a number of seconds from 0.05 to 3600 with 5010', () => {
    for (const v of ['0', 'abc', '-1', '7200']) {
      const r = moatBinary(['serve', '--data-dir', join(dir, 'hb'), '--listen', '127.0.0.1:0', '--channel-heartbeat', v]);
      expect(r.code, v).toBe(2); // usage errors exit 2
      expect(r.stderr, v).toMatch(/moat: error 5010: --channel-heartbeat .*expected seconds between 0\.05 and 3600/);
    }
  });
});
