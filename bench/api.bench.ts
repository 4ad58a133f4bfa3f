// Control-plane throughput and latency: `moat serve` (the built binary, its own
// process) under a load generator (autocannon) on loopback, on each side of
// bench/backends.ts: SQLite (a real file) and PostgreSQL with 1, 2 and 3
// replicas sharing one database (fsync on), the load spread over a side's
// replicas (an autocannon run per replica, the connections shared out).
//   * reads: an entrypoint of 50 rules (GET .../rulesets/phases/network_transit/entrypoint),
//     authenticated as a client would be: with X-Auth-Email/X-Auth-Key, with an
//     API token (Authorization: Bearer), and revalidating with If-None-Match (304,
//     no body); the first page of a list of 1,000 items;
//   * writes: adding a rule (POST .../rulesets/{id}/rules), round-robin over 100
//     rulesets so none reaches the 200-rule cap, every add a new durable version;
//     adding a list item (POST .../items, a queued bulk operation).
// Every figure of a PostgreSQL side is printed beside the first side's (SQLite
// unless deselected), measured in the same run: the sides of one load take
// turns of one second (see interleaved). References in the same run:
//   * a bare node:http server in its own process answering the same entrypoint
//     bytes (the ceiling of any Node HTTP server on this machine);
//   * the durable-write floors: one IMMEDIATE transaction per insert of a
//     rule-sized row with synchronous=FULL (SQLite), one committed INSERT per
//     round trip (PostgreSQL): what each add must at least pay.
// Beside req/s each line gives the side's server CPU per request.
// Knobs: MOAT_BENCH_API_SECONDS (default 10), MOAT_BENCH_API_CONNECTIONS (default 16),
// MOAT_BENCH_API_WARMUP (unmeasured 1-s turns before each load's, default 2),
// MOAT_BENCH_API_BACKENDS (sqlite,pg1,pg2,pg3 by default).

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { newId } from '../src/store/index.js';
import { Backends, cpuMicros, selectedSides, type Side, type SideName } from './backends.js';

const SECONDS = Number(process.env.MOAT_BENCH_API_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.MOAT_BENCH_API_CONNECTIONS ?? 16);
const WARMUP = Number(process.env.MOAT_BENCH_API_WARMUP ?? 2);

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
  /** The side's CPU microseconds per request (its servers, and PostgreSQL's processes), when known. */
  cpuPerRequest: number | undefined;
}

/**
 * One load: an autocannon run per server of a side, all at once, the
 * connections shared out among them (so a side of three replicas gets the same
 * 16 connections as one server), and the CPU to charge to it. Server CPU per
 * request is the figure that does not depend on who else runs: throughput here
 * is shared with the load generator on the same cores.
 */
interface LoadSpec {
  targets: autocannon.Options[];
  cpu: () => number | undefined;
}

/** Connections of target `i` of `n` out of `total`. */
function share(total: number, n: number, i: number): number {
  return Math.max(1, Math.floor(total / n) + (i < total % n ? 1 : 0));
}

async function load(spec: LoadSpec, duration: number): Promise<Load> {
  const cpu0 = spec.cpu();
  const rs = await Promise.all(spec.targets.map((opts, i) => autocannon({ connections: share(CONNECTIONS, spec.targets.length, i), duration, ...opts })));
  const cpu1 = spec.cpu();
  const total = rs.reduce((n, r) => n + r.requests.total, 0);
  const status304 = rs.reduce((n, r) => n + ((r as unknown as { statusCodeStats?: Record<string, { count: number }> }).statusCodeStats?.['304']?.count ?? 0), 0);
  const cpuPerRequest = cpu0 === undefined || cpu1 === undefined || total === 0 ? undefined : (cpu1 - cpu0) / total;
  return {
    rps: rs.reduce((n, r) => n + r.requests.average, 0),
    // Several servers at once: the worst server's percentiles (an upper bound; exact with one server).
    p50: Math.max(...rs.map((r) => r.latency.p50)),
    p99: Math.max(...rs.map((r) => r.latency.p99)),
    non2xx: rs.reduce((n, r) => n + r.non2xx, 0),
    status304,
    errors: rs.reduce((n, r) => n + r.errors + r.timeouts, 0),
    total,
    cpuPerRequest,
  };
}

/**
 * Runs several loads in turns of one second each until every one has had
 * `SECONDS`: the machine is shared, and back-to-back loads of several seconds
 * each met different conditions (the bare server's rate moved 2x between runs
 * minutes apart), which made their ratio meaningless. Turns see the same
 * conditions. Latency percentiles are the median p50 and the worst p99 of the turns.
 */
async function interleaved(loads: readonly LoadSpec[]): Promise<Load[]> {
  // Unmeasured turns first: a side of N replicas gives each process 1/N of the
  // requests, so measured from cold its JIT warm-up weighed N times more (a
  // replica's 304 rate grew 1,500 -> 7,000 req/s over its first four 1-s turns
  // on the loaded machine).
  for (let t = 0; t < WARMUP; t++) for (const l of loads) await load(l, 1);
  const turns = loads.map(() => [] as Load[]);
  for (let t = 0; t < Math.max(1, SECONDS); t++) {
    for (const [i, l] of loads.entries()) turns[i]!.push(await load(l, 1));
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

function line(name: string, l: Load, ref?: { load: Load; name: string }): void {
  const ratio = ref === undefined ? '' : `  (${(l.rps / ref.load.rps).toFixed(2)}x ${ref.name})`;
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

/** PostgreSQL's durable-write floor: one committed INSERT of a rule-sized row per round trip, from one client over TCP. */
async function pgWriteFloor(url: string): Promise<{ perSec: number; p99: number }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('CREATE TABLE floor (id bigserial PRIMARY KEY, body text)');
    const body = JSON.stringify(rules50().slice(0, 10));
    const lat: number[] = [];
    const end = Date.now() + Math.min(5, SECONDS) * 1000;
    const t0 = process.hrtime.bigint();
    while (Date.now() < end) {
      const s = process.hrtime.bigint();
      await client.query('INSERT INTO floor (body) VALUES ($1)', [body]);
      lat.push(Number(process.hrtime.bigint() - s) / 1e6);
    }
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    lat.sort((a, b) => a - b);
    return { perSec: lat.length / secs, p99: lat[Math.floor(lat.length * 0.99)]! };
  } finally {
    await client.end();
  }
}

const SIDE_LABEL: Record<SideName, string> = {
  sqlite: 'SQLite, 1 server',
  pg1: 'PostgreSQL, 1 replica',
  pg2: 'PostgreSQL, 2 replicas',
  pg3: 'PostgreSQL, 3 replicas',
};

/** A side set up for the API loads. */
interface ApiSide {
  side: Side;
  account: string;
  headers: Record<string, string>;
  bearer: Record<string, string>;
  etag: string;
  entryBody: string;
  rulesets: string[];
  listId: string;
  /** Adds made so far (rule adds, item adds): requests of every replica count together. */
  ruleAdds: number;
  itemAdds: number;
}

async function ok(res: Promise<Response>, what: string): Promise<{ result: Record<string, unknown> }> {
  const r = await res;
  if (r.status !== 200) throw new Error(`setup ${what} failed: ${r.status} ${await r.text()}`);
  return (await r.json()) as { result: Record<string, unknown> };
}

/** Starts side `name` with a user, a read-only API token, an entrypoint of 50 rules, 100 rulesets to add rules to and a list of 1,000 items. */
async function prepare(backends: Backends, name: SideName): Promise<ApiSide> {
  const email = 'bench@example.com';
  const account = newId();
  const key = 'k' + newId();
  let token = '';
  const side = await backends.start(name, async (store) => {
    await store.users.create({ email, accounts: [account], key });
    token = (await store.tokens.create({ email, name: 'bench', readOnly: true })).token;
  });
  const base = side.replicas[0]!.base;
  const headers = { 'x-auth-email': email, 'x-auth-key': key, 'content-type': 'application/json' };
  const entryUrl = `${base}/accounts/${account}/rulesets/phases/network_transit/entrypoint`;
  await ok(fetch(entryUrl, { method: 'PUT', headers, body: JSON.stringify({ rules: rules50() }) }), 'PUT entrypoint');
  const first = await fetch(entryUrl, { headers });
  const entryBody = await first.text();
  const etag = first.headers.get('etag');
  if (etag === null) throw new Error('GET entrypoint answered without an ETag');
  const rulesets: string[] = [];
  for (let i = 0; i < 100; i++) {
    const r = await ok(fetch(`${base}/accounts/${account}/rulesets`, { method: 'POST', headers, body: JSON.stringify({ name: `bench ${i}`, kind: 'custom', phase: 'network_transit' }) }), 'POST ruleset');
    rulesets.push(r.result.id as string);
  }
  const lists = `${base}/accounts/${account}/rules/lists`;
  const listId = (await ok(fetch(lists, { method: 'POST', headers, body: JSON.stringify({ name: 'bench', kind: 'ip', description: 'bench' }) }), 'POST list')).result.id as string;
  const items = Array.from({ length: 1000 }, (_, i) => ({ ip: `10.0.${i >> 8}.${i & 255}`, comment: `item ${i}` }));
  const op = (await ok(fetch(`${lists}/${listId}/items`, { method: 'PUT', headers, body: JSON.stringify(items) }), 'PUT list items')).result.operation_id as string;
  for (let i = 0; ; i++) {
    const s = (await ok(fetch(`${lists}/bulk_operations/${op}`, { headers }), 'GET bulk operation')).result;
    if (s.status === 'completed') break;
    if (s.status === 'failed' || i > 3000) throw new Error(`setup list items: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return { side, account, headers, bearer: { authorization: `Bearer ${token}` }, etag, entryBody, rulesets, listId, ruleAdds: 0, itemAdds: 0 };
}

/** A load of `s`: the same request to each of its replicas. */
function spec(s: ApiSide, make: (base: string) => autocannon.Options): LoadSpec {
  return { targets: s.side.replicas.map((r) => make(r.base)), cpu: () => s.side.cpuMicros() };
}

/** Runs the API benchmark. */
export async function runApiBench(): Promise<void> {
  const names = selectedSides('MOAT_BENCH_API_BACKENDS');
  console.log(`\n## Control plane API (moat serve, ${CONNECTIONS} connections shared by a side's servers, ${SECONDS} s per load in 1-s turns after ${WARMUP} unmeasured; sides: ${names.map((n) => SIDE_LABEL[n]).join('; ')})`);
  const dir = mkdtempSync(join(tmpdir(), 'moat-api-bench-'));
  const backends = new Backends();
  const children: ChildProcess[] = [];
  try {
    const sides: ApiSide[] = [];
    for (const n of names) sides.push(await prepare(backends, n));
    const settings = await backends.settings();
    if (settings !== '') console.log(`(PostgreSQL: one throwaway cluster on loopback, ${settings}; SQLite: WAL, synchronous=FULL; server CPU on PostgreSQL counts the database's processes too)`);
    const [refSide] = sides as [ApiSide];
    const vsRef = (i: number, loads: Load[]) => (i === 0 ? undefined : { load: loads[0]!, name: refSide.side.name });
    const entry = (s: ApiSide, base: string) => `${base}/accounts/${s.account}/rulesets/phases/network_transit/entrypoint`;

    const bare = await bareServer(refSide.entryBody);
    children.push(bare.child);
    const failures: Load[] = [];
    const block = async (title: string, make: (s: ApiSide) => LoadSpec, withBare = false): Promise<Load[]> => {
      const specs = sides.map(make);
      if (withBare) specs.unshift({ targets: [{ url: bare.url }], cpu: () => cpuMicros(bare.child.pid) });
      const loads = await interleaved(specs);
      console.log(title);
      if (withBare) line(`  bare node:http, same ${refSide.entryBody.length}-byte body`, loads.shift()!);
      for (const [k, s] of sides.entries()) line(`  ${SIDE_LABEL[s.side.name]}`, loads[k]!, vsRef(k, loads));
      return loads;
    };
    const reads = [
      ...(await block('GET entrypoint (50 rules), X-Auth-Key', (s) => spec(s, (b) => ({ url: entry(s, b), headers: s.headers })), true)),
      ...(await block('GET entrypoint (50 rules), API token', (s) => spec(s, (b) => ({ url: entry(s, b), headers: s.bearer })))),
      ...(await block('GET list items (first page of 25 of 1,000), API token', (s) => spec(s, (b) => ({ url: `${b}/accounts/${s.account}/rules/lists/${s.listId}/items`, headers: s.bearer })))),
    ];
    const revalidate = await block('GET entrypoint, API token, If-None-Match: 304', (s) => spec(s, (b) => ({ url: entry(s, b), headers: { ...s.bearer, 'if-none-match': s.etag } })));
    bare.child.kill();
    const before = await Promise.all(sides.map((s) => backends.transactions(s.side)));
    // Each add is a new durable version; round-robin over 100 rulesets so that none passes the 200-rule cap (100 x 190 adds per side at most).
    const addRule = await block('POST rule (a new ruleset version each, 100 rulesets)', (s) =>
      spec(s, (b) => ({
        url: b,
        headers: s.headers,
        requests: [
          {
            method: 'POST',
            setupRequest: (req) => {
              const i = s.ruleAdds++;
              return {
                ...req,
                path: `/client/v4/accounts/${s.account}/rulesets/${s.rulesets[i % s.rulesets.length]}/rules`,
                body: JSON.stringify({ action: 'block', expression: `tcp.dstport == ${1 + (i % 65535)} and ip.src in {192.0.2.0/24}`, description: `bench ${i}` }),
              };
            },
          },
        ],
      })),
    );
    // An item write queues a bulk operation (committed before the answer); the runner applies it in the background meanwhile.
    const addItem = await block('POST list item (one new address, a queued bulk operation)', (s) =>
      spec(s, (b) => ({
        url: b,
        headers: s.headers,
        requests: [
          {
            method: 'POST',
            setupRequest: (req) => {
              const i = s.itemAdds++;
              return { ...req, path: `/client/v4/accounts/${s.account}/rules/lists/${s.listId}/items`, body: JSON.stringify([{ ip: `10.${128 + ((i >> 16) & 127)}.${(i >> 8) & 255}.${i & 255}` }]) };
            },
          },
        ],
      })),
    );
    const floor = names.includes('sqlite') ? writeFloor(dir) : undefined;
    if (floor !== undefined) console.log(`${'durable-write floor, SQLite (1 fsynced tx per insert)'.padEnd(54)} ${floor.perSec.toFixed(0).padStart(7)} tx/s  p99 ${floor.p99.toFixed(1)} ms (in process, no HTTP)`);
    const pgFloor = backends.pg === undefined ? undefined : await pgWriteFloor(await backends.pg.createDatabase('bench_floor'));
    if (pgFloor !== undefined) console.log(`${'durable-write floor, PostgreSQL (1 committed INSERT)'.padEnd(54)} ${pgFloor.perSec.toFixed(0).padStart(7)} tx/s  p99 ${pgFloor.p99.toFixed(1)} ms (one client, TCP loopback, no HTTP)`);
    for (const [k, s] of sides.entries()) {
      const f = s.side.name === 'sqlite' ? floor : pgFloor;
      if (f !== undefined) console.log(`${SIDE_LABEL[s.side.name]}: add-rule throughput is ${(addRule[k]!.rps / f.perSec).toFixed(2)}x its durable-write floor`);
    }
    // Read after the floors: backends report their statistics within seconds (at most every 1 s while busy, 10 s when idle).
    const after = await Promise.all(sides.map((s) => backends.transactions(s.side)));
    for (const [k, s] of sides.entries()) {
      const [b, a] = [before[k], after[k]];
      if (b !== undefined && a !== undefined) console.log(`${SIDE_LABEL[s.side.name]}: during the writes ${a.commits - b.commits} transactions committed (reads, the bulk-operation runner's and the replicas' own included), ${a.serializationFailures - b.serializationFailures} serialization failures retried`);
    }
    const sqliteDb = join(backends.dataDir('sqlite'), 'moat.db');
    if (names.includes('sqlite')) console.log(`SQLite database now ${(statSync(sqliteDb).size / 1e6).toFixed(1)} MB`);
    failures.push(...reads, ...addRule, ...addItem);
    // 304 is not 2xx: count what was not a 304 as the failures of that load.
    const bad = failures.reduce((n, l) => n + l.non2xx + l.errors, 0) + revalidate.reduce((n, l) => n + (l.total - l.status304) + l.errors, 0);
    if (bad > 0) console.log(`WARNING: ${bad} requests failed; the figures above are not valid`);
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await backends.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
