// Control-plane throughput and latency: `moat serve` (the built binary, its own
// process, a real SQLite file) under a load generator (autocannon) on loopback.
//   * reading an entrypoint of 50 rules (GET .../rulesets/phases/network_transit/entrypoint),
//     authenticated as a client would be: with X-Auth-Email/X-Auth-Key, with an
//     API token (Authorization: Bearer), and revalidating with If-None-Match (304, no body);
//   * adding a rule (POST .../rulesets/{id}/rules), round-robin over 100 rulesets
//     so none reaches the 200-rule cap; every add is a new durable version.
// References in the same run:
//   * a bare node:http server in its own process answering the same entrypoint
//     bytes (the ceiling of any Node HTTP server on this machine);
//   * the durable-write floor: one IMMEDIATE transaction per insert of a
//     rule-sized row with synchronous=FULL (what each add must at least pay).
// The GET loads and the bare server take turns of one second (see interleaved);
// beside req/s each line gives the server's CPU per request.
// Knobs: MOAT_BENCH_API_SECONDS (default 10), MOAT_BENCH_API_CONNECTIONS (default 16).

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import BetterSqlite3 from 'better-sqlite3';
import { Database, Tokens, Users, newId } from '../src/store/index.js';

const SECONDS = Number(process.env.MOAT_BENCH_API_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.MOAT_BENCH_API_CONNECTIONS ?? 16);
const BIN = new URL('../src/cli/main.js', import.meta.url).pathname;

function rules50(): object[] {
  const out: object[] = [{ action: 'skip', action_parameters: { ruleset: 'current' }, expression: 'tcp.dstport in {22 443 8000..8080}', description: 'allow admin and web' }];
  const countries = ['CN', 'RU', 'KP', 'IR', 'BR', 'IN', 'VN', 'NG'];
  for (let i = 1; i < 50; i++) {
    const kind = i % 5;
    const expression =
      kind === 0
        ? `ip.geoip.country in {"${countries[i % 8]}" "${countries[(i + 3) % 8]}"}`
        : kind === 1
          ? `tcp.dstport in {${1000 + i} ${2000 + i}..${2100 + i}} and ip.src in {10.${i}.0.0/16}`
          : kind === 2
            ? `ip.src in $svc.malware or ip.dst in $svc.botnetcc`
            : kind === 3
              ? `udp.dstport == ${5000 + i} and ip.len > ${i * 10}`
              : `tcp.flags.syn and not tcp.flags.ack and ip.ttl < ${i + 10}`;
    out.push({ action: i % 7 === 0 ? 'log' : 'block', expression, description: `rule ${i}` });
  }
  return out;
}

function startServer(dataDir: string): Promise<{ child: ChildProcess; base: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, 'serve', '--data-dir', dataDir, '--listen', '127.0.0.1:0', '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const m = /listening on (http:\/\/\S+)/.exec(buf);
      if (m !== null) resolve({ child, base: m[1]! });
    });
    child.once('exit', (code) => reject(new Error(`moat serve exited with ${code}`)));
  });
}

function bareServer(body: string): Promise<{ child: ChildProcess; url: string }> {
  const script = `
    const http = require('node:http');
    const body = Buffer.from(process.env.BODY);
    const s = http.createServer((req, res) => { res.writeHead(200, {'content-type': 'application/json', 'content-length': body.length}); res.end(body); });
    s.listen(0, '127.0.0.1', () => console.log('port ' + s.address().port));`;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['-e', script], { env: { ...process.env, BODY: body }, stdio: ['ignore', 'pipe', 'inherit'] });
    child.stdout!.once('data', (d: Buffer) => resolve({ child, url: `http://127.0.0.1:${/port (\d+)/.exec(d.toString())![1]}` }));
  });
}

interface Load {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  status304: number;
  errors: number;
  total: number;
  /** The server process's CPU microseconds per request, when known. */
  cpuPerRequest: number | undefined;
}

/**
 * CPU time (user + system, microseconds) a process has used, from
 * /proc/PID/stat (Linux; undefined elsewhere). Throughput here is shared with
 * the load generator on the same cores, and the bare server is often limited
 * by the client, not by itself: the server's CPU per request is the figure
 * that does not depend on who else runs.
 */
function cpuMicros(pid: number | undefined): number | undefined {
  const file = `/proc/${pid}/stat`;
  if (pid === undefined || !existsSync(file)) return undefined;
  // Fields after the command name: utime and stime are the 12th and 13th, in clock ticks (100 per second on Linux).
  const f = readFileSync(file, 'utf8').split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10_000;
}

async function load(opts: autocannon.Options, server?: ChildProcess): Promise<Load> {
  const cpu0 = cpuMicros(server?.pid);
  const r = await autocannon({ connections: CONNECTIONS, duration: SECONDS, ...opts });
  const cpu1 = cpuMicros(server?.pid);
  const status304 = (r as unknown as { statusCodeStats?: Record<string, { count: number }> }).statusCodeStats?.['304']?.count ?? 0;
  const cpuPerRequest = cpu0 === undefined || cpu1 === undefined || r.requests.total === 0 ? undefined : (cpu1 - cpu0) / r.requests.total;
  return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, status304, errors: r.errors + r.timeouts, total: r.requests.total, cpuPerRequest };
}

/**
 * Runs several loads in turns of one second each until every one has had
 * `SECONDS`: the machine is shared, and back-to-back loads of several seconds
 * each met different conditions (the bare server's rate moved 2x between runs
 * minutes apart), which made their ratio meaningless. Turns see the same
 * conditions. Latency percentiles are the median p50 and the worst p99 of the turns.
 */
async function interleaved(loads: readonly { opts: autocannon.Options; server: ChildProcess }[]): Promise<Load[]> {
  const turns = loads.map(() => [] as Load[]);
  for (let t = 0; t < Math.max(1, SECONDS); t++) {
    for (const [i, l] of loads.entries()) turns[i]!.push(await load({ ...l.opts, duration: 1 }, l.server));
  }
  return turns.map((ts) => {
    const total = ts.reduce((n, l) => n + l.total, 0);
    const cpu = ts.every((l) => l.cpuPerRequest !== undefined) ? ts.reduce((n, l) => n + l.cpuPerRequest! * l.total, 0) / Math.max(1, total) : undefined;
    const p50s = ts.map((l) => l.p50).sort((a, b) => a - b);
    return {
      rps: total / ts.length,
      p50: p50s[p50s.length >> 1]!,
      p99: Math.max(...ts.map((l) => l.p99)),
      non2xx: ts.reduce((n, l) => n + l.non2xx, 0),
      status304: ts.reduce((n, l) => n + l.status304, 0),
      errors: ts.reduce((n, l) => n + l.errors, 0),
      total,
      cpuPerRequest: cpu,
    };
  });
}

function line(name: string, l: Load, ref?: Load): void {
  const ratio = ref === undefined ? '' : `  (${(l.rps / ref.rps).toFixed(2)}x the reference)`;
  const cpu = l.cpuPerRequest === undefined ? '' : `  server CPU ${l.cpuPerRequest.toFixed(0)} us/req`;
  console.log(
    `${name.padEnd(46)} ${l.rps.toFixed(0).padStart(7)} req/s  p50 ${String(l.p50).padStart(4)} ms  p99 ${String(l.p99).padStart(4)} ms  (${l.total} requests, ${l.status304 > 0 ? `${l.status304} 304, ` : ''}${l.non2xx - l.status304} other non-2xx, ${l.errors} errors)${cpu}${ratio}`,
  );
}

/** The durable-write floor: one committed, fsynced transaction per rule-sized insert. */
function writeFloor(dir: string): { perSec: number; p99: number } {
  const db = new BetterSqlite3(join(dir, 'floor.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)');
  const ins = db.prepare('INSERT INTO t (body) VALUES (?)');
  const body = JSON.stringify(rules50().slice(0, 10));
  const lat: number[] = [];
  const end = Date.now() + Math.min(5, SECONDS) * 1000;
  const t0 = process.hrtime.bigint();
  while (Date.now() < end) {
    const s = process.hrtime.bigint();
    db.transaction(() => ins.run(body)).immediate();
    lat.push(Number(process.hrtime.bigint() - s) / 1e6);
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  db.close();
  lat.sort((a, b) => a - b);
  return { perSec: lat.length / secs, p99: lat[Math.floor(lat.length * 0.99)]! };
}

/** Runs the API benchmark. */
export async function runApiBench(): Promise<void> {
  console.log(`\n## Control plane API (moat serve, ${CONNECTIONS} connections, ${SECONDS} s per load)`);
  const dir = mkdtempSync(join(tmpdir(), 'moat-api-bench-'));
  const dataDir = join(dir, 'data');
  const email = 'bench@example.com';
  const account = newId();
  const key = 'k' + newId();
  let token: string;
  {
    const store = Database.open(dataDir);
    const users = new Users(store);
    users.create({ email, accounts: [account], key });
    token = new Tokens(store, users).create({ email, name: 'bench', readOnly: true }).token;
    store.close();
  }
  const { child, base } = await startServer(dataDir);
  const headers = { 'x-auth-email': email, 'x-auth-key': key, 'content-type': 'application/json' };
  const children: ChildProcess[] = [child];
  try {
    const put = await fetch(`${base}/accounts/${account}/rulesets/phases/network_transit/entrypoint`, { method: 'PUT', headers, body: JSON.stringify({ rules: rules50() }) });
    if (put.status !== 200) throw new Error(`setup PUT failed: ${put.status} ${await put.text()}`);
    const entryUrl = `${base}/accounts/${account}/rulesets/phases/network_transit/entrypoint`;
    const first = await fetch(entryUrl, { headers });
    const entryBody = await first.text();
    const etag = first.headers.get('etag');
    if (etag === null) throw new Error('GET entrypoint answered without an ETag');

    const bare = await bareServer(entryBody);
    children.push(bare.child);
    const bearer = { authorization: `Bearer ${token}` };
    const [ref, get, getToken, revalidate] = (await interleaved([
      { opts: { url: bare.url }, server: bare.child },
      { opts: { url: entryUrl, headers }, server: child },
      { opts: { url: entryUrl, headers: bearer }, server: child },
      { opts: { url: entryUrl, headers: { ...bearer, 'if-none-match': etag } }, server: child },
    ])) as [Load, Load, Load, Load];
    line(`bare node:http, same ${entryBody.length}-byte body`, ref);
    line('GET entrypoint (50 rules), X-Auth-Key', get, ref);
    line('GET entrypoint (50 rules), API token', getToken, ref);
    line('GET entrypoint, API token, If-None-Match: 304', revalidate, ref);
    bare.child.kill();
    // 304 is not 2xx: count what was not a 304 as the failures of that load.
    const not304 = revalidate.total - revalidate.status304;

    const ids: string[] = [];
    for (let i = 0; i < 100; i++) {
      const r = await fetch(`${base}/accounts/${account}/rulesets`, { method: 'POST', headers, body: JSON.stringify({ name: `bench ${i}`, kind: 'custom', phase: 'network_transit' }) });
      ids.push(((await r.json()) as { result: { id: string } }).result.id);
    }
    let n = 0;
    const floor = writeFloor(dir);
    const add = await load(
      {
        url: base,
        headers,
        // Cap the adds so that no ruleset passes the 200-rule limit (100 rulesets x 190 rules).
        amount: 19_000,
        requests: [
          {
            method: 'POST',
            setupRequest: (req) => {
              const i = n++;
              return {
                ...req,
                path: `/client/v4/accounts/${account}/rulesets/${ids[i % ids.length]}/rules`,
                body: JSON.stringify({ action: 'block', expression: `tcp.dstport == ${1 + (i % 65535)} and ip.src in {192.0.2.0/24}`, description: `bench ${i}` }),
              };
            },
          },
        ],
      },
      child,
    );
    console.log(`${'durable-write floor (1 fsynced tx per insert)'.padEnd(46)} ${floor.perSec.toFixed(0).padStart(7)} tx/s               p99 ${floor.p99.toFixed(1)} ms (in process, no HTTP)`);
    line('POST rule (new version each, 100 rulesets)', add);
    console.log(`add-rule throughput is ${(add.rps / floor.perSec).toFixed(2)}x the durable-write floor; database now ${(statSync(join(dataDir, 'moat.db')).size / 1e6).toFixed(1)} MB`);
    if (get.non2xx + get.errors + getToken.non2xx + getToken.errors + not304 + revalidate.errors + add.non2xx + add.errors > 0) console.log('WARNING: some requests failed; the figures above are not valid');
  } finally {
    for (const c of children) c.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
}
