// Issue #16 item 12, daemon configurations: broken configurations made from
// config/daemon.example.jsonc (wrong types and out-of-range values at every
// key, keys removed and unknown keys added, device files, FIFOs, directories
// and impossible paths at every path key, huge values, and the example's text
// cut, flipped and padded) through `moat daemon --check`: in process all of
// them, as a process a sample. Each must end with exit 1 or 2 and coded lines
// only (a configuration error is one line), no stack trace, in bounded time;
// a process must print exactly what the in-process run printed.
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stripJsonComments } from '../../src/config/index.js';
import { ERRORS } from '../../src/errors/index.js';
import { BIN, ROOT, ensureBuilt, moat } from '../support/cli.js';
import { Rng } from '../support/diff-generator.js';

const SEED = 16_004;
const dir = mkdtempSync(join(tmpdir(), 'moat-hardening-configs-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const CODES = new Set(Object.values(ERRORS).map((d) => d.code));

const RULES = join(dir, 'account.json');
const LIST = join(dir, 'office.txt');
const FIFO = join(dir, 'fifo');
const LOOP = join(dir, 'loop');
const GEO = join(ROOT, 'native-fixtures/geoip');

/** The example's text, made to pass --check on this host: monitor on lo, files that exist, no metrics port. */
function baseText(): string {
  const text = readFileSync(join(ROOT, 'config/daemon.example.jsonc'), 'utf8')
    .replace('"mode": "inline"', '"mode": "monitor"')
    // Monitor mode takes a list of interfaces and judges both directions (the example is inline).
    .replace('{ "outside": "ga", "inside": "gb" }', '["lo"]')
    .replace('"judge": "inbound"', '"judge": "both"')
    .replace('"rules/account-entrypoint.json"', JSON.stringify(RULES))
    .replace('// "office_blocklist": "lists/office.txt"', `"office_blocklist": ${JSON.stringify(LIST)}`)
    .replace('// "country": "/var/lib/GeoIP/GeoLite2-Country.mmdb",', `"country": ${JSON.stringify(join(GEO, 'test-country.mmdb'))},`)
    .replace('// "asn": "/var/lib/GeoIP/GeoLite2-ASN.mmdb"', `"asn": ${JSON.stringify(join(GEO, 'test-asn.mmdb'))}`)
    .replace('"enabled": true', '"enabled": false')
    .replace('// "dropCapture": { "path": "/var/lib/moat/dropped.pcap"', `"dropCapture": { "path": ${JSON.stringify(join(dir, 'dropped.pcap'))}`);
  return text;
}

// ---------------------------------------------------------------- mutations

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

interface Broken {
  what: string;
  text: string;
  /** When the mutation determines it: a regular expression the first error line must match. */
  expect?: RegExp;
}

const WRONG: ReadonlyArray<readonly [string, Json]> = [
  ['null', null], ['true', true], ['0', 0], ['-1', -1], ['0.5', 0.5], ['2^53+2', 2 ** 53 + 2], ['1e308', 1e308], ['-1e308', -1e308],
  ['""', ''], ['"x"', 'x'], ['control characters', '\u0000\u001b[2J\u0007'], ['a 100,000-character string', 'y'.repeat(100_000)],
  ['[]', []], ['[1]', [1]], ['{}', {}], ['{"a":1}', { a: 1 }],
];

/** Every key path of an object (arrays: their first element). */
function paths(v: Json, at: string[] = []): string[][] {
  if (v === null || typeof v !== 'object') return [at];
  const kids = Array.isArray(v) ? (v.length > 0 ? [['0', v[0]!] as const] : []) : Object.entries(v);
  return [...(at.length > 0 ? [at] : []), ...kids.flatMap(([k, c]) => paths(c, [...at, String(k)]))];
}

function setAt(base: Json, path: string[], value: Json | undefined): Json {
  const copy = structuredClone(base) as Record<string, Json>;
  let o = copy as Record<string, Json>;
  for (const k of path.slice(0, -1)) o = o[k] as Record<string, Json>;
  const last = path.at(-1)!;
  if (value === undefined) {
    if (Array.isArray(o)) o.splice(Number(last), 1);
    else delete o[last];
  } else o[last] = value;
  return copy;
}

const PATH_KEYS = [['rules', 'account'], ['rules', 'zone'], ['rules', 'managed', '0'], ['lists', 'office_blocklist'], ['geoip', 'country'], ['geoip', 'asn'], ['dropCapture', 'path']];

function* mutations(text: string, rng: Rng): Generator<Broken> {
  const base = JSON.parse(stripJsonComments(text)) as Json & Record<string, Json>;
  const json = (v: Json): string => JSON.stringify(v, null, 2);
  for (const p of paths(base)) {
    const key = p.join('.');
    for (const [name, v] of WRONG) yield { what: `${key} = ${name}`, text: json(setAt(base, p, v)) };
    yield { what: `${key} removed`, text: json(setAt(base, p, undefined)) };
  }
  // Unknown keys at the top and in every object; the error names the key.
  for (const p of [[], ...paths(base).filter((q) => { const v = q.reduce<Json>((o, k) => (o as Record<string, Json>)[k]!, base); return v !== null && typeof v === 'object' && !Array.isArray(v) && q[0] !== 'lists'; })]) {
    for (const k of ['unknownKey', 'constructor', 'toString', 'k\u001b[2J']) {
      const m = structuredClone(base) as Record<string, Json>;
      const o = p.reduce<Record<string, Json>>((x, q) => x[q] as Record<string, Json>, m);
      o[k] = 1;
      yield { what: `unknown key ${JSON.stringify(k)} in ${p.join('.') || 'the top level'}`, text: json(m), expect: /^moat: error 5002: .*unknown key "/ };
    }
  }
  // Files that are not regular files, or cannot be opened, at every path key.
  const bad: ReadonlyArray<readonly [string, string, RegExp]> = [
    ['/dev/zero', '/dev/zero', /character device, not a regular file/],
    ['/dev/urandom', '/dev/urandom', /character device, not a regular file/],
    ['/dev/null', '/dev/null', /./],
    ['a FIFO', FIFO, /FIFO \(named pipe\), not a regular file/],
    ['a directory', dir, /directory|EISDIR/i],
    ['a missing file', join(dir, 'missing'), /ENOENT|no such file/i],
    ['a symlink loop', LOOP, /ELOOP|too many/i],
    ['a 5,000-character path', join(dir, 'x'.repeat(5000)), /a file path of at most 4096 characters/],
    ['a path with a NUL byte', join(dir, 'a\u0000b'), /cannot contain a NUL byte/],
  ];
  for (const p of PATH_KEYS) {
    for (const [name, file, why] of bad) {
      // The drop capture is written and rotated: it must be a regular file too (or not exist yet).
      const expect = p[0] === 'dropCapture' && name === 'a missing file' ? undefined : new RegExp(`^moat: error \\d+: .*${why.source}`, why.flags);
      yield { what: `${p.join('.')} = ${name}`, text: json(setAt(base, p[1] === 'managed' ? ['rules', 'managed'] : p, p[1] === 'managed' ? [file] : file)), expect };
    }
  }
  // Huge values.
  const huge: ReadonlyArray<readonly [string, string[], Json]> = [
    ['100,000 interfaces', ['interfaces'], Array.from({ length: 100_000 }, (_, i) => `if${i}`)],
    ['100,000 wrong interfaces', ['interfaces'], Array.from({ length: 100_000 }, () => 5)],
    ['10,000 lists', ['lists'], Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`l${i}`, LIST]))],
    ['10,000 managed rulesets', ['rules', 'managed'], Array.from({ length: 10_000 }, () => '/dev/zero')],
    ['ringBytes 2^60', ['capture', 'ringBytes'], 2 ** 60],
    ['a 1 MB filter', ['capture', 'filter'], 'tcp or '.repeat(150_000) + 'tcp'],
    ['a 1 MB colo name', ['colo', 'name'], 'n'.repeat(1_000_000)],
    ['maxBytes 1e300', ['dropCapture', 'maxBytes'], 1e300],
    ['limits 2^31', ['limits', 'listMiB'], 2 ** 31],
  ];
  for (const [name, p, v] of huge) yield { what: name, text: json(setAt(base, p, v)) };
  yield { what: '100,000 nested arrays', text: `{"mode": ${'['.repeat(100_000)}${']'.repeat(100_000)}}` };
  yield { what: '100,000 nested objects as an unknown key', text: `{"x": ${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}}` };
  // The text itself: cut, flipped, padded.
  for (let i = 0; i < 30; i++) {
    const n = rng.int(0, text.length - 1);
    yield { what: `the text cut at ${n}`, text: text.slice(0, n) };
  }
  for (let i = 0; i < 30; i++) {
    const n = rng.int(0, text.length - 1);
    const b = Buffer.from(text);
    b[n]! ^= 1 << rng.int(0, 7);
    yield { what: `a bit flip at byte ${n}`, text: b.toString('latin1') };
  }
  yield { what: 'an empty file', text: '', expect: /^moat: error 5002: / };
  for (const t of ['null', '[]', '1', '"x"', '{}', '{"mode": "monitor"}', '\ufeff\ufeff{}', '{/*', '{"a": "\\ud800"}', '{"a"\u0000: 1}']) yield { what: `the text ${JSON.stringify(t)}`, text: t };
  yield { what: 'a 1 MB comment', text: `// ${'c'.repeat(1_000_000)}\n${text}` };
  yield { what: 'invalid UTF-8 in a string', text: text.replace('"monitor"', '"mon\udcffitor"') };
}

// ---------------------------------------------------------------- running them

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** What is wrong with a run of a broken configuration, or undefined. */
function judge(b: Broken, r: Run): string | undefined {
  const lines = r.stderr.split('\n').filter((l) => l !== '');
  // A JS stack frame or an error class's name (`onError:` is a key, not one).
  if (/^\s+at |\b(?:[A-Z][A-Za-z]*)?Error: /m.test(r.stderr)) return `a stack trace or an uncoded error: ${r.stderr.slice(0, 300)}`;
  const errors = lines.filter((l) => !l.startsWith('moat: warning '));
  // eslint-disable-next-line no-control-regex -- what must not reach a terminal raw
  if (/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/.test(r.stderr)) return `a raw control character: ${JSON.stringify(r.stderr.slice(0, 300))}`;
  // What a terminal can show: a few lines, none of them megabytes (inputs are quoted cut, lists counted).
  if (lines.length > 20) return `${lines.length} lines`;
  if (r.code === 0) return b.expect === undefined ? undefined : `accepted (${r.stdout.slice(0, 100)}), expected ${b.expect}`;
  if (r.code !== 1 && r.code !== 2) return `exit ${r.code}`;
  if (errors.length === 0) return `exit ${r.code} and no error line`;
  for (const l of lines) {
    const m = /^moat: (?:.+: )?(?:error|warning) (\d+): /.exec(l);
    if (m === null || !CODES.has(Number(m[1]))) return `an uncoded line: ${l.slice(0, 200)}`;
    if (l.length > 4000) return `a ${l.length}-character line: ${l.slice(0, 200)}…`;
  }
  // A configuration that does not load is one line.
  if (/^moat: error 500[12]: /.test(errors[0]!) && lines.length !== 1) return `${lines.length} lines for a configuration error: ${r.stderr.slice(0, 300)}`;
  if (b.expect !== undefined && !b.expect.test(errors[0]!)) return `${errors[0]!.slice(0, 300)} does not match ${b.expect}`;
  return undefined;
}

function spawnCheck(file: string): Promise<Run & { ms: number; signal: string | null }> {
  const started = performance.now();
  const child = spawn(process.execPath, [BIN, 'daemon', '--config', file, '--check'], { cwd: ROOT });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  return new Promise((resolve) =>
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, signal, stdout, stderr, ms: performance.now() - started });
    }),
  );
}

describe('broken daemon configurations through moat daemon --check', () => {
  const sample: Array<{ b: Broken; file: string; inProcess: Run }> = [];

  beforeAll(() => {
    writeFileSync(RULES, JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 23 or ip.src in $office_blocklist or ip.src.country == "RU"' }] }));
    writeFileSync(LIST, '192.0.2.0/24\n2001:db8::/48\n');
    execFileSync('mkfifo', [FIFO]);
    symlinkSync(LOOP, LOOP);
    mkdirSync(join(dir, 'configs'));
  });

  it(`in process: exit 1 or 2, coded lines only, one line for a configuration error, no stack trace (seed ${SEED})`, async () => {
    const base = join(dir, 'base.jsonc');
    writeFileSync(base, baseText());
    const ok = await moat('daemon', '--config', base, '--check');
    // The unbroken configuration passes on this host, so each failure below is its mutation's.
    expect(ok.stderr).toBe('');
    expect(ok.stdout).toMatch(/^OK: monitor on lo; capture engine ring, 1 packet worker; 1 rules/);
    const rng = new Rng(SEED);
    const t = { inputs: 0, accepted: 0, crashes: [] as string[], wrong: [] as string[], slowestMs: 0, slowest: '', codes: new Map<number, number>() };
    for (const b of mutations(baseText(), rng)) {
      const file = join(dir, 'configs', `${t.inputs}.jsonc`);
      writeFileSync(file, b.text);
      t.inputs++;
      const started = performance.now();
      let r: Run;
      try {
        r = await moat('daemon', '--config', file, '--check');
      } catch (err) {
        t.crashes.push(`${b.what}: ${(err as Error).stack?.slice(0, 500) ?? String(err)}`);
        continue;
      }
      const ms = performance.now() - started;
      if (ms > t.slowestMs) [t.slowestMs, t.slowest] = [ms, b.what];
      if (r.code === 0) t.accepted++;
      const code = /error (\d+)/.exec(r.stderr)?.[1];
      if (code !== undefined) t.codes.set(Number(code), (t.codes.get(Number(code)) ?? 0) + 1);
      const why = judge(b, r);
      if (why !== undefined) t.wrong.push(`${b.what}: ${why}`);
      // Every 47th (a prime: the kinds vary) again as a process below.
      if (t.inputs % 47 === 1) sample.push({ b, file, inProcess: r });
    }
    const codes = [...t.codes].sort(([a], [b]) => a - b).map(([c, n]) => `${c}: ${n}`).join(', ');
    console.log(
      `daemon configurations in process: ${t.inputs} broken configurations, ${t.accepted} accepted (valid after all), first error codes {${codes}}; ` +
        `crashes ${t.crashes.length}, hangs ${t.slowestMs > 10_000 ? 1 : 0} (slowest ${t.slowestMs.toFixed(0)} ms: ${t.slowest}), wrong answers ${t.wrong.length}`,
    );
    expect(t.crashes.slice(0, 3)).toEqual([]);
    expect(t.wrong.slice(0, 10)).toEqual([]);
    expect(t.slowestMs).toBeLessThan(10_000);
    expect(t.inputs).toBeGreaterThan(500);
  }, 120_000);

  it('a sample as processes: the same lines and exit code, within 20 s', async () => {
    ensureBuilt();
    expect(sample.length).toBeGreaterThan(12);
    const t = { runs: 0, crashes: 0, hangs: 0, wrong: [] as string[], slowestMs: 0 };
    const queue = [...sample];
    await Promise.all([0, 1].map(async () => {
      for (let s = queue.shift(); s !== undefined; s = queue.shift()) {
        const r = await spawnCheck(s.file);
        t.runs++;
        t.slowestMs = Math.max(t.slowestMs, r.ms);
        if (r.signal !== null) {
          t.hangs++;
          t.wrong.push(`${s.b.what}: killed by ${r.signal} after ${r.ms.toFixed(0)} ms`);
          continue;
        }
        const why = judge(s.b, r);
        if (why !== undefined) {
          t.crashes++;
          t.wrong.push(`${s.b.what}: ${why}`);
        } else if (r.code !== s.inProcess.code || r.stderr.trimEnd() !== s.inProcess.stderr.trimEnd()) {
          t.wrong.push(`${s.b.what}: the process exits ${r.code} with ${JSON.stringify(r.stderr.slice(0, 200))}, in process ${s.inProcess.code} with ${JSON.stringify(s.inProcess.stderr.slice(0, 200))}`);
        }
      }
    }));
    console.log(`daemon configurations as processes: ${t.runs} runs, crashes ${t.crashes}, hangs ${t.hangs} (slowest ${t.slowestMs.toFixed(0)} ms), wrong answers ${t.wrong.length}`);
    expect(t.wrong.slice(0, 5)).toEqual([]);
    expect(t.runs).toBe(sample.length);
  }, 120_000);
});
