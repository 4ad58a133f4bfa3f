// End-to-end test harness in Linux network namespaces: namespaces, veth pairs,
// addresses, offloads, sysctls, commands and long-running processes inside them, and
// a ready-made inline-gateway topology. Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN),
// iproute2 (`ip`) and ethtool; requireRoot() decides whether the tests run.
//
// Everything created here is torn down, whatever happens:
// * namespaces are named `moat-t-<pid>-<n>`, so they never collide with a concurrent run,
//   and are tracked with the processes started in them;
// * destroy()/destroyAll() kill the processes (the tracked ones, then any other found in
//   the namespace by `ip netns pids`), then delete the namespaces; call them from afterAll;
// * on process exit and on SIGINT/SIGTERM/SIGHUP the same cleanup runs synchronously;
// * a detached reaper shell cleans up when the process dies without running its exit
//   handlers (SIGKILL) or when its parent, the test runner, is gone;
// * the sweeper deletes the `moat-t-<pid>-*` namespaces whose process is gone (runs that
//   crashed or were killed), with the processes still inside them. It runs once per
//   process, before the first namespace is created.
//
// Processes are killed before their namespaces are deleted on purpose: deleting a
// namespace destroys its veths, and a `cap` capture on a vanished or downed interface
// aborts its process (see src/capture/pcap-live.ts).
//
// Node child processes (nodeIn) run an ES module given as source text. It may import
// the project's TypeScript sources by file URL (projectUrl('src/...')): the child runs
// with a small ESM loader that transpiles .ts with the project's `typescript` package and
// maps './x.js' specifiers to './x.ts', like tsc's NodeNext resolution.

import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** Prefix of every namespace the harness creates. */
// MOAT_NETNS_PREFIX (letters, digits, '-') renames them, so that runs sharing a
// machine (parallel worktrees) never sweep each other's namespaces.
export const NETNS_PREFIX = /^[a-z][a-z0-9-]{0,8}$/.test(process.env.MOAT_NETNS_PREFIX ?? '') ? process.env.MOAT_NETNS_PREFIX! : 'moat-t-';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const NS_NAME = new RegExp(`^${NETNS_PREFIX}(\\d+)-(\\d+)$`);
const DEFAULT_TIMEOUT_MS = 30_000;

/** File URL of a file of the project (for imports in nodeIn scripts). */
export function projectUrl(relativePath: string): string {
  return pathToFileURL(join(ROOT, relativePath)).href;
}

// ---------------------------------------------------------------------------------
// Running commands

/** What a finished command printed and returned. */
export interface ExecResult {
  code: number;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface ExecOptions {
  /** Reject when the command exits non-zero or by a signal (default true). */
  check?: boolean;
  /** Kill the command after this many ms (default 30 s). */
  timeoutMs?: number;
  /** Text written to the command's standard input. */
  input?: string;
}

function describeCommand(cmd: string, args: readonly string[]): string {
  return [cmd, ...args].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : JSON.stringify(a))).join(' ');
}

function run(cmd: string, args: readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      cmd,
      args,
      { timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS, maxBuffer: 64 * 1024 * 1024, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const e = err as (Error & { code?: unknown; signal?: NodeJS.Signals | null }) | null;
        if (e !== null && typeof e.code !== 'number' && e.signal == null) {
          reject(new Error(`${describeCommand(cmd, args)}: ${e.message}`));
          return;
        }
        const result: ExecResult = {
          code: e === null ? 0 : typeof e.code === 'number' ? e.code : -1,
          signal: e?.signal ?? null,
          stdout,
          stderr,
        };
        if ((options.check ?? true) && (result.code !== 0 || result.signal !== null)) {
          const how = result.signal !== null ? `was killed by ${result.signal}` : `exited with ${result.code}`;
          reject(new Error(`${describeCommand(cmd, args)} ${how}\n${stderr}${stdout}`.trimEnd()));
        } else resolve(result);
      },
    );
    if (options.input !== undefined) child.stdin?.end(options.input);
    else child.stdin?.end();
  });
}

function runSync(cmd: string, args: readonly string[]): ExecResult {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: DEFAULT_TIMEOUT_MS, stdio: ['ignore', 'pipe', 'pipe'] });
  return { code: r.status ?? -1, signal: r.signal, stdout: r.stdout ?? '', stderr: r.stderr ?? (r.error?.message || '') };
}

/** Runs `cmd args` inside namespace `ns` (`ip netns exec`); rejects on failure unless check is false. */
export function exec(ns: string, cmd: string, args: readonly string[] = [], options: ExecOptions = {}): Promise<ExecResult> {
  return run('ip', ['netns', 'exec', ns, cmd, ...args], options);
}

/** Runs an `ip` command in the current namespace (add `-n <ns>` to aim at a namespace). */
export function ip(args: readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
  return run('ip', args, options);
}

// ---------------------------------------------------------------------------------
// Can the tests run?

function onPath(name: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && existsSync(join(dir, name)));
}

/** Debian packages of the tools the harness and the tests use. */
const TOOL_PACKAGES: Record<string, string> = {
  ip: 'iproute2',
  ethtool: 'ethtool',
  ping: 'iputils-ping',
  tcpdump: 'tcpdump',
  setpriv: 'util-linux',
  taskset: 'util-linux',
  cc: 'gcc', // the inline benchmark's floor forwarder (bench/floor-forwarder.c); .ci/install's g++ brings it
};

let probeResult: string | null | undefined; // undefined: not probed; null: fine; string: the problem

function probeNamespaces(): string | null {
  if (process.platform !== 'linux') return 'network namespaces need Linux';
  if (process.getuid?.() !== 0) return 'not running as root';
  for (const tool of ['ip', 'ethtool']) {
    if (!onPath(tool)) return `${tool} is not installed (apt-get install -y ${TOOL_PACKAGES[tool]})`;
  }
  const name = `${NETNS_PREFIX}${process.pid}-probe`;
  const added = runSync('ip', ['netns', 'add', name]);
  if (added.code !== 0) return `ip netns add fails: ${added.stderr.trim() || `exit ${added.code}`}`;
  runSync('ip', ['netns', 'del', name]);
  return null;
}

/**
 * Whether the namespace tests can run here: root, `ip netns` usable, ip and ethtool (and
 * `tools`) installed. When they cannot: throws under CI=true (a CI run must not skip them
 * silently), otherwise warns and returns false so the tests skip.
 */
export function requireRoot(tools: readonly string[] = []): boolean {
  if (probeResult === undefined) probeResult = probeNamespaces();
  let problem = probeResult;
  if (problem === null) {
    const missing = tools.find((t) => !onPath(t));
    if (missing !== undefined) problem = `${missing} is not installed (apt-get install -y ${TOOL_PACKAGES[missing] ?? missing})`;
  }
  if (problem === null) return true;
  if (process.env.CI === 'true') {
    throw new Error(`the network-namespace tests cannot run: ${problem}; they are required when CI=true (.ci/run runs them as root)`);
  }
  console.warn(`${problem}: the network-namespace tests are skipped`);
  return false;
}

// ---------------------------------------------------------------------------------
// Tracking and cleanup

const liveNamespaces = new Set<string>();
const liveProcesses = new Set<NsProcess>();
let nsCounter = 0;
let swept = false;
let hooksInstalled = false;
let scratchDir: string | undefined;

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function namespacePids(ns: string): number[] {
  const r = runSync('ip', ['netns', 'pids', ns]);
  if (r.code !== 0) return [];
  return r.stdout
    .split('\n')
    .map((l) => Number(l.trim()))
    .filter((p) => Number.isInteger(p) && p > 0 && p !== process.pid);
}

function killPid(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

/** Kills what runs in `ns` and deletes it, synchronously. */
function deleteNamespaceSync(ns: string): void {
  for (const p of liveProcesses) if (p.ns === ns) p.kill('SIGKILL');
  for (const pid of namespacePids(ns)) killPid(pid, 'SIGKILL');
  runSync('ip', ['netns', 'del', ns]);
  liveNamespaces.delete(ns);
}

function cleanupSync(): void {
  for (const p of liveProcesses) p.kill('SIGKILL');
  for (const ns of liveNamespaces) for (const pid of namespacePids(ns)) killPid(pid, 'SIGKILL');
  for (const ns of [...liveNamespaces]) deleteNamespaceSync(ns);
  if (scratchDir !== undefined) {
    rmSync(scratchDir, { recursive: true, force: true });
    scratchDir = undefined;
  }
}

// Waits until this process or its parent (the test runner) is gone, then deletes what
// this process may have left: it dies by SIGKILL without exit handlers, or is orphaned
// when the runner is interrupted (vitest 3.2 leaves such a worker spinning forever in its
// uncaughtException handler). Own session, so a terminal's ^C does not stop it first.
const REAPER = `
while kill -0 "$3" 2>/dev/null && kill -0 "$4" 2>/dev/null; do sleep 1; done
for ns in $(ip netns list | awk '{print $1}' | grep "^$1"); do
  for p in $(ip netns pids "$ns"); do [ "$p" = "$3" ] || kill -9 "$p"; done
  ip netns del "$ns"
done
rm -rf "$2"/"$1"*
`;

function startReaper(): void {
  const prefix = `${NETNS_PREFIX}${process.pid}-`;
  const args = ['-c', REAPER, 'sh', prefix, tmpdir(), String(process.pid), String(process.ppid)];
  const reaper = spawn('sh', args, { detached: true, stdio: 'ignore' });
  reaper.on('error', () => undefined);
  reaper.unref();
}

function installHooks(): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  startReaper();
  process.on('exit', cleanupSync);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const handler = (): void => {
      cleanupSync();
      process.removeListener(signal, handler);
      // Keep the default outcome (death by this signal) unless someone else handles it.
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, handler);
  }
}

/**
 * Deletes the `moat-t-<pid>-<n>` namespaces whose creating process no longer exists,
 * killing the processes left inside them, and the scratch directories of such processes.
 * Returns the namespace names deleted.
 */
export function sweepStaleNamespaces(): string[] {
  swept = true;
  try {
    for (const entry of readdirSync(tmpdir())) {
      const m = new RegExp(`^${NETNS_PREFIX}(\\d+)-`).exec(entry);
      if (m !== null && Number(m[1]) !== process.pid && !pidAlive(Number(m[1]))) {
        rmSync(join(tmpdir(), entry), { recursive: true, force: true });
      }
    }
  } catch {
    // no scratch directories to sweep
  }
  const list = runSync('ip', ['netns', 'list']);
  if (list.code !== 0) return [];
  const deleted: string[] = [];
  for (const line of list.stdout.split('\n')) {
    const name = line.trim().split(/\s+/)[0] ?? '';
    const m = NS_NAME.exec(name) ?? new RegExp(`^${NETNS_PREFIX}(\\d+)-probe$`).exec(name);
    if (m === null) continue;
    const pid = Number(m[1]);
    if (pid === process.pid || pidAlive(pid)) continue;
    for (const p of namespacePids(name)) killPid(p, 'SIGKILL');
    if (runSync('ip', ['netns', 'del', name]).code === 0) deleted.push(name);
  }
  return deleted;
}

// ---------------------------------------------------------------------------------
// Namespaces, links, addresses, settings

/** Creates a uniquely named namespace with its loopback up; it is deleted at cleanup. */
export async function createNamespace(): Promise<string> {
  installHooks();
  if (!swept) sweepStaleNamespaces();
  const name = `${NETNS_PREFIX}${process.pid}-${++nsCounter}`;
  await ip(['netns', 'add', name]);
  liveNamespaces.add(name);
  await ip(['-n', name, 'link', 'set', 'lo', 'up']);
  return name;
}

/** Stops the processes started in `ns` (SIGTERM, then SIGKILL), kills any other left in it, and deletes it. */
export async function deleteNamespace(ns: string): Promise<void> {
  await deleteNamespaces([ns]);
}

/**
 * Deletes several namespaces: stops the processes of all of them first, then deletes
 * them (a capture must not see its interface vanish because a peer namespace went first).
 */
export async function deleteNamespaces(names: readonly string[]): Promise<void> {
  await Promise.all([...liveProcesses].filter((p) => names.includes(p.ns)).map((p) => p.stop()));
  for (const ns of names) for (const pid of namespacePids(ns)) killPid(pid, 'SIGKILL');
  for (const ns of names) {
    await ip(['netns', 'del', ns], { check: false });
    liveNamespaces.delete(ns);
  }
}

/** Deletes every namespace this process created (and stops what runs in them). */
export async function destroyAll(): Promise<void> {
  await deleteNamespaces([...liveNamespaces]);
}

/** Creates a veth pair: `ifA` in `nsA`, `ifB` in `nsB` (created in place, never in the host namespace). */
export async function addVethPair(nsA: string, ifA: string, nsB: string, ifB: string): Promise<void> {
  await ip(['link', 'add', ifA, 'netns', nsA, 'type', 'veth', 'peer', 'name', ifB, 'netns', nsB]);
}

/** Sets the MAC address of an interface. */
export async function setMac(ns: string, iface: string, mac: string): Promise<void> {
  await ip(['-n', ns, 'link', 'set', iface, 'address', mac]);
}

/** Adds an address (`10.77.1.1/24`, `fd77::1/64`); IPv6 ones skip duplicate address detection (usable at once). */
export async function addAddress(ns: string, iface: string, cidr: string): Promise<void> {
  const args = ['-n', ns, 'addr', 'add', cidr, 'dev', iface];
  if (cidr.includes(':')) args.push('nodad');
  await ip(args);
}

/** Sets an interface up. */
export async function linkUp(ns: string, iface: string): Promise<void> {
  await ip(['-n', ns, 'link', 'set', iface, 'up']);
}

/** Adds a permanent neighbour (ARP/ND) entry, so traffic leaves without resolution. */
export async function addNeighbor(ns: string, iface: string, address: string, mac: string): Promise<void> {
  await ip(['-n', ns, 'neigh', 'replace', address, 'lladdr', mac, 'dev', iface, 'nud', 'permanent']);
}

/** `ethtool -K iface feature on|off...` inside `ns`, e.g. { tx: 'off' } or { gro: 'off', gso: 'off' }. */
export async function setOffloads(ns: string, iface: string, features: Record<string, 'on' | 'off'>): Promise<void> {
  const args = ['-K', iface];
  for (const [k, v] of Object.entries(features)) args.push(k, v);
  await exec(ns, 'ethtool', args);
}

/**
 * Sets a sysctl inside `ns` (`net.ipv4.ip_forward`, `net.ipv6.conf.ga.disable_ipv6`...),
 * by writing /proc/sys from inside the namespace (needs no procps). Keys with dots in an
 * interface name are not supported.
 */
export async function setSysctl(ns: string, key: string, value: string | number): Promise<void> {
  const path = `/proc/sys/${key.replace(/\./g, '/')}`;
  await exec(ns, 'sh', ['-c', 'printf "%s\\n" "$1" > "$2"', 'sh', String(value), path]);
}

/** The MAC address of an interface. */
export async function macOf(ns: string, iface: string): Promise<string> {
  const r = await ip(['-n', ns, '-j', 'link', 'show', 'dev', iface]);
  const info = JSON.parse(r.stdout) as { address: string }[];
  return info[0]!.address;
}

// ---------------------------------------------------------------------------------
// Long-running processes

/** A process started in a namespace; killed at cleanup if still running. */
export class NsProcess {
  readonly ns: string;
  readonly child: ChildProcess;
  readonly description: string;
  /** Complete lines printed on stdout so far. */
  readonly lines: string[] = [];
  /** Everything printed on stderr so far. */
  stderr = '';
  /** Resolves when the process has exited (never rejects). */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private partial = '';
  private exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private readonly waiters = new Set<() => void>();

  constructor(ns: string, cmd: string, args: readonly string[], env?: NodeJS.ProcessEnv) {
    this.ns = ns;
    this.description = describeCommand(cmd, args);
    this.child = spawn('ip', ['netns', 'exec', ns, cmd, ...args], { stdio: ['pipe', 'pipe', 'pipe'], env: env ?? process.env });
    this.child.stdout!.setEncoding('utf8');
    this.child.stderr!.setEncoding('utf8');
    this.child.stdout!.on('data', (chunk: string) => {
      const parts = (this.partial + chunk).split('\n');
      this.partial = parts.pop()!;
      this.lines.push(...parts);
      this.notify();
    });
    this.child.stderr!.on('data', (chunk: string) => {
      this.stderr += chunk;
    });
    this.child.stdin!.on('error', () => undefined); // EPIPE when it has exited
    this.exited = new Promise((resolve) => {
      this.child.on('error', (err) => {
        this.stderr += `\n${err.message}`;
        this.exitInfo = { code: -1, signal: null };
        liveProcesses.delete(this);
        this.notify();
        resolve(this.exitInfo);
      });
      this.child.on('close', (code, signal) => {
        if (this.partial !== '') this.lines.push(this.partial);
        this.partial = '';
        this.exitInfo = { code, signal };
        liveProcesses.delete(this);
        this.notify();
        resolve(this.exitInfo);
      });
    });
    liveProcesses.add(this);
  }

  /** Whether the process has exited. */
  get done(): boolean {
    return this.exitInfo !== undefined;
  }

  /** Writes text to the process's standard input. */
  write(text: string): void {
    if (!this.done) this.child.stdin!.write(text);
  }

  /**
   * Waits until some stdout line satisfies `test` (earlier lines count too) and returns it.
   * Rejects on timeout or when the process exits first, quoting its output.
   */
  waitForLine(test: RegExp | ((line: string) => boolean), timeoutMs = 10_000, from = 0): Promise<string> {
    const matches = typeof test === 'function' ? test : (l: string): boolean => test.test(l);
    return new Promise((resolve, reject) => {
      let next = from;
      const check = (): boolean => {
        for (; next < this.lines.length; next++) {
          const line = this.lines[next]!;
          if (matches(line)) {
            resolve(line);
            return true;
          }
        }
        if (this.exitInfo !== undefined) {
          reject(new Error(`${this.description} exited (${this.exitText()}) before printing the expected line\n${this.transcript()}`));
          return true;
        }
        return false;
      };
      if (check()) return;
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for a line from ${this.description}\n${this.transcript()}`));
      }, timeoutMs);
      const waiter = (): void => {
        if (check()) {
          clearTimeout(timer);
          this.waiters.delete(waiter);
        }
      };
      this.waiters.add(waiter);
    });
  }

  /** Waits for the next stdout line that is a JSON object satisfying `test`, parsed. */
  async waitForJson<T = Record<string, unknown>>(test: (msg: T) => boolean = () => true, timeoutMs = 10_000, from = 0): Promise<T> {
    const parse = (line: string): T | undefined => {
      if (!line.startsWith('{')) return undefined;
      try {
        return JSON.parse(line) as T;
      } catch {
        return undefined;
      }
    };
    const line = await this.waitForLine((l) => {
      const msg = parse(l);
      return msg !== undefined && test(msg);
    }, timeoutMs, from);
    return parse(line)!;
  }

  /** Sends a signal (no effect once exited). */
  kill(signal: NodeJS.Signals = 'SIGTERM'): void {
    if (!this.done && this.child.pid !== undefined) killPid(this.child.pid, signal);
  }

  /** SIGTERM, then SIGKILL after `graceMs`; resolves once it has exited. */
  async stop(graceMs = 2_000): Promise<void> {
    if (this.done) return;
    this.kill('SIGTERM');
    const timer = setTimeout(() => this.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  /** Exit status as text, for messages. */
  exitText(): string {
    const e = this.exitInfo;
    if (e === undefined) return 'running';
    return e.signal !== null ? `signal ${e.signal}` : `code ${e.code}`;
  }

  /** stdout and stderr so far, for failure messages. */
  transcript(): string {
    return `--- stdout\n${[...this.lines, this.partial].join('\n')}\n--- stderr\n${this.stderr}`;
  }

  private notify(): void {
    for (const w of [...this.waiters]) w();
  }
}

/**
 * A TCP round trip from namespace `ns` to host:port (an echo server answers
 * "ping"): "ok" when the echo came back, "blocked" when nothing did within
 * 1.5 s, "error CODE" when the connection failed.
 */
export async function tcpRoundTrip(ns: string, host: string, port: number): Promise<string> {
  const script = `
    const s = require('node:net').connect({ host: ${JSON.stringify(host)}, port: ${port} });
    const t = setTimeout(() => { console.log('blocked'); process.exit(0); }, 1500);
    s.on('connect', () => s.write('ping'));
    s.on('data', () => { clearTimeout(t); console.log('ok'); process.exit(0); });
    s.on('error', (e) => { clearTimeout(t); console.log('error ' + e.code); process.exit(0); });`;
  return (await exec(ns, process.execPath, ['-e', script], { check: false })).stdout.trim();
}

/** Starts `cmd args` in namespace `ns` (stdin, stdout and stderr are pipes). */
export function spawnIn(ns: string, cmd: string, args: readonly string[] = []): NsProcess {
  installHooks();
  return new NsProcess(ns, cmd, args);
}

// The ESM loader of nodeIn children: .ts files are transpiled with the project's
// TypeScript (type information is erased, nothing is checked), and a relative '.js'
// specifier that does not exist is retried as '.ts'.
const LOADER_HOOKS = `
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
let ts;
export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (err) {
    if (/^(\\.{1,2}\\/|\\/|file:)/.test(specifier) && specifier.endsWith('.js')) {
      return next(specifier.slice(0, -3) + '.ts', context);
    }
    throw err;
  }
}
export async function load(url, context, next) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return next(url, context);
  ts ??= createRequire(__TS_BASE__)('typescript');
  const fileName = fileURLToPath(url);
  const out = ts.transpileModule(await readFile(fileName, 'utf8'), {
    fileName,
    compilerOptions: {
      module: ts.ModuleKind.ESNext,
      target: ts.ScriptTarget.ES2022,
      verbatimModuleSyntax: true,
      inlineSourceMap: true,
    },
  });
  return { format: 'module', source: out.outputText, shortCircuit: true };
}
`;

function scratch(): string {
  if (scratchDir === undefined) {
    scratchDir = mkdtempSync(join(tmpdir(), `${NETNS_PREFIX}${process.pid}-`));
    chmodSync(scratchDir, 0o755); // readable by children that drop privileges
    const hooks = LOADER_HOOKS.replace('__TS_BASE__', JSON.stringify(pathToFileURL(join(ROOT, 'package.json')).href));
    writeFileSync(join(scratchDir, 'ts-hooks.mjs'), hooks, { mode: 0o644 });
    writeFileSync(
      join(scratchDir, 'ts-register.mjs'),
      `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(join(scratchDir, 'ts-hooks.mjs')).href)});\n`,
      { mode: 0o644 },
    );
  }
  return scratchDir;
}

let scriptCounter = 0;

export interface NodeInOptions {
  /** Options for node itself, e.g. ['--expose-gc']. */
  nodeArgs?: readonly string[];
  /** Arguments of the script (process.argv.slice(2)). */
  args?: readonly string[];
  /** Command words run before node inside the namespace, e.g. ['setpriv', '--reuid=65534', ...]. */
  prefix?: readonly string[];
}

/**
 * Runs an ES module, given as source text, with node inside `ns`. The script may import
 * project TypeScript files by URL (projectUrl('src/capture/pcap-live.ts')). The child
 * exits when its standard input closes (so it dies with the test process); a script that
 * must end by itself calls process.exit() (an open LiveCapture keeps the event loop alive).
 */
export function nodeIn(ns: string, source: string, options: NodeInOptions = {}): NsProcess {
  installHooks();
  const dir = scratch();
  const file = join(dir, `script-${++scriptCounter}.mjs`);
  const preamble = "process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0)).resume();";
  writeFileSync(file, `${preamble}\n${source}\n`, { mode: 0o644 });
  const env = { ...process.env };
  delete env.NODE_OPTIONS; // nothing of the test runner's own loaders
  const nodeArgs = [...(options.nodeArgs ?? []), '--import', pathToFileURL(join(dir, 'ts-register.mjs')).href, file, ...(options.args ?? [])];
  const [cmd, ...rest] = [...(options.prefix ?? []), process.execPath, ...nodeArgs];
  return new NsProcess(ns, cmd!, rest, env);
}

// ---------------------------------------------------------------------------------
// The inline gateway topology

/** One end host of the gateway topology. */
export interface TopologyHost {
  /** Namespace name. */
  readonly ns: string;
  /** Its interface towards the gateway. */
  readonly iface: string;
  readonly mac: string;
  readonly ipv4: string;
  readonly ipv6: string;
}

/**
 * host A (a0) --- (ga) gateway (gb) --- (b0) host B. The gateway ports have no addresses,
 * IPv6 disabled and no kernel forwarding: nothing crosses unless a userspace bridge
 * copies frames between ga and gb.
 */
export interface GatewayTopology {
  readonly a: TopologyHost;
  readonly b: TopologyHost;
  readonly gateway: {
    readonly ns: string;
    /** Port towards host A. */
    readonly portA: string;
    /** Port towards host B. */
    readonly portB: string;
    readonly macA: string;
    readonly macB: string;
  };
  /** Stops every process in the three namespaces and deletes them. Idempotent. */
  destroy(): Promise<void>;
}

export interface GatewayTopologyOptions {
  /**
   * Permanent ARP/ND entries on A for B and on B for A, so the hosts send at once
   * without resolution (useful when nothing bridges yet). Default false.
   */
  staticNeighbors?: boolean;
}

/**
 * Builds the inline-gateway topology: A 10.77.1.1/24 fd77::1/64, B 10.77.1.2/24
 * fd77::2/64, fixed MACs, end hosts with TX checksum offload off (reinjected frames
 * would carry partial checksums), gateway ports with GRO/LRO/GSO/TSO off (frames no
 * larger than the MTU). Call destroy() in afterAll (cleanup also runs at exit).
 */
export async function gatewayTopology(options: GatewayTopologyOptions = {}): Promise<GatewayTopology> {
  const created: string[] = [];
  try {
    for (let i = 0; i < 3; i++) created.push(await createNamespace());
    const [nsA, nsGw, nsB] = created as [string, string, string];
    const a: TopologyHost = { ns: nsA, iface: 'a0', mac: '02:77:00:00:01:01', ipv4: '10.77.1.1', ipv6: 'fd77::1' };
    const b: TopologyHost = { ns: nsB, iface: 'b0', mac: '02:77:00:00:01:02', ipv4: '10.77.1.2', ipv6: 'fd77::2' };
    const gateway = { ns: nsGw, portA: 'ga', portB: 'gb', macA: '02:77:00:00:fe:01', macB: '02:77:00:00:fe:02' };

    // The gateway stays silent: no forwarding, no IPv6 (no link-local ND/MLD of its own),
    // set before the ports exist so they inherit it.
    await setSysctl(nsGw, 'net.ipv4.ip_forward', 0);
    await setSysctl(nsGw, 'net.ipv6.conf.all.forwarding', 0);
    await setSysctl(nsGw, 'net.ipv6.conf.all.disable_ipv6', 1);
    await setSysctl(nsGw, 'net.ipv6.conf.default.disable_ipv6', 1);

    await addVethPair(nsA, a.iface, nsGw, gateway.portA);
    await addVethPair(nsB, b.iface, nsGw, gateway.portB);
    await setMac(nsA, a.iface, a.mac);
    await setMac(nsB, b.iface, b.mac);
    await setMac(nsGw, gateway.portA, gateway.macA);
    await setMac(nsGw, gateway.portB, gateway.macB);
    for (const port of [gateway.portA, gateway.portB]) {
      await setSysctl(nsGw, `net.ipv6.conf.${port}.disable_ipv6`, 1);
      await setOffloads(nsGw, port, { gro: 'off', lro: 'off', gso: 'off', tso: 'off' });
    }
    for (const h of [a, b]) {
      await setOffloads(h.ns, h.iface, { tx: 'off' });
      await addAddress(h.ns, h.iface, `${h.ipv4}/24`);
      await addAddress(h.ns, h.iface, `${h.ipv6}/64`);
    }
    if (options.staticNeighbors) {
      await addNeighbor(a.ns, a.iface, b.ipv4, b.mac);
      await addNeighbor(a.ns, a.iface, b.ipv6, b.mac);
      await addNeighbor(b.ns, b.iface, a.ipv4, a.mac);
      await addNeighbor(b.ns, b.iface, a.ipv6, a.mac);
    }
    await linkUp(nsGw, gateway.portA);
    await linkUp(nsGw, gateway.portB);
    await linkUp(nsA, a.iface);
    await linkUp(nsB, b.iface);

    let destroyed: Promise<void> | undefined;
    return {
      a,
      b,
      gateway,
      destroy: () => (destroyed ??= deleteNamespaces(created)),
    };
  } catch (err) {
    await deleteNamespaces(created);
    throw err;
  }
}
