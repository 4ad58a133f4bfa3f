// End to end, in network namespaces (root; runs in CI): `moat daemon`'s thread
// priorities (capture.priority), read from /proc/<pid>/task/<tid>/stat of the
// real daemon process. The packet workers run raised (nice -10 by default) and
// the bundle loader lowered (10), with either engine; the main thread stays at
// 0 (the libpcap engine's packet loop too: see README); a daemon without CAP_SYS_NICE keeps its packet workers at 0
// and says so in its log and in moat_thread_nice. CPU affinity (capture.cpus),
// read from Cpus_allowed_list in /proc/<pid>/task/<tid>/status: packet workers
// on their CPUs, every other thread on the background CPUs.
import { readdirSync, readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt } from '../support/cli.js';
import { exec, gatewayTopology, requireRoot, spawnIn, type GatewayTopology, type NsProcess } from '../support/netns.js';

const RUN = requireRoot(['setpriv', 'taskset']);
const dir = mkdtempSync(join(tmpdir(), 'moat-priority-e2e-'));
const ACCOUNT = join(dir, 'account.json');

/** A process's threads by name (comm) with their nice values: field 19 of /proc/<pid>/task/<tid>/stat; the main thread's tid is the pid. */
function threads(pid: number): Array<{ name: string; main: boolean; nice: number }> {
  return readdirSync(`/proc/${pid}/task`).map((tid) => {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    // Fields after the name, which is in parentheses: state (3) is the first, nice (19) the 17th.
    const after = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { name: readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim(), main: Number(tid) === pid, nice: Number(after[16]) };
  });
}

/** Nice values by thread name ('main' for the main thread), for the daemon's own threads. */
function nices(pid: number): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const t of threads(pid)) {
    const key = t.main ? 'main' : t.name;
    if (key === 'main' || key.startsWith('moat-')) (out[key] ??= []).push(t.nice);
  }
  return out;
}

/** The CPUs each of a process's threads may run on (Cpus_allowed_list), by name ('main' for the main thread). */
function cpus(pid: number): Array<{ name: string; cpus: string }> {
  return readdirSync(`/proc/${pid}/task`).map((tid) => {
    const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
    const name = Number(tid) === pid ? 'main' : readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
    return { name, cpus: /^Cpus_allowed_list:\s*(\S+)/m.exec(status)![1]! };
  });
}

/** Two CPUs this test process may use (capture.cpus needs two); undefined on a one-CPU host. */
const CPUS = (() => {
  const list = /^Cpus_allowed_list:\s*(\S+)/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]!;
  const all = list.split(',').flatMap((r) => {
    const [a, b] = r.split('-').map(Number);
    return Array.from({ length: (b ?? a!) - a! + 1 }, (_, i) => a! + i);
  });
  return all.length >= 2 ? ([all[0]!, all[1]!] as const) : undefined;
})();

describe.runIf(RUN)('moat daemon thread priorities (capture.priority)', () => {
  let topo: GatewayTopology;
  let port = 9590;

  async function metrics(listen: number): Promise<string> {
    return (await exec(topo.gateway.ns, process.execPath, ['-e', `fetch('http://127.0.0.1:${listen}/metrics').then(r => r.text()).then(t => process.stdout.write(t))`])).stdout;
  }

  function metric(text: string, thread: string): number {
    const line = text.split('\n').find((l) => l.startsWith(`moat_thread_nice{thread="${thread}"}`));
    return line === undefined ? NaN : Number(line.split(' ').pop());
  }

  /** Starts a daemon with `capture` (under `prefix`, e.g. setpriv), waits until it runs; returns it and its metrics port. */
  async function daemon(capture: object, prefix: string[] = []): Promise<{ d: NsProcess; listen: number }> {
    const listen = ++port;
    const file = join(dir, `daemon-${listen}.jsonc`);
    writeFileSync(file, JSON.stringify({ mode: 'inline', interfaces: { outside: topo.gateway.portA, inside: topo.gateway.portB }, rules: { account: ACCOUNT }, capture, metrics: { listen: `127.0.0.1:${listen}` } }));
    const argv = [process.execPath, BIN, 'daemon', '--config', file];
    const d = spawnIn(topo.gateway.ns, prefix.length > 0 ? prefix[0]! : argv[0]!, [...prefix.slice(1), ...(prefix.length > 0 ? argv : argv.slice(1))]);
    await d.waitForLine(/"msg":"daemon running"/, 20_000);
    return { d, listen };
  }

  async function stop(d: NsProcess): Promise<void> {
    d.child.kill('SIGTERM');
    await d.exited;
  }

  beforeAll(async () => {
    ensureBuilt();
    topo = await gatewayTopology();
    writeFileSync(ACCOUNT, JSON.stringify({ phase: 'network_transit', rules: [{ id: 'r', action: 'block', expression: 'tcp.dstport == 23' }] }));
  }, 120_000);

  afterAll(async () => {
    await topo?.destroy();
  }, 60_000);

  it('runs the ring engine\'s packet workers at nice 0 and the bundle loader at 10 by default, raises the workers to -10 when asked, the main thread left at 0, and says so in moat_thread_nice', async () => {
    const defaults = await daemon({ engine: 'ring', workers: 1, ringBytes: 4 << 20 });
    try {
      const n = nices(defaults.d.child.pid!);
      expect({ packet0: n['moat-packet-0'], loader: n['moat-loader'], main: n['main'] }).toEqual({ packet0: [0], loader: [10], main: [0] });
    } finally {
      await stop(defaults.d);
    }
    const { d, listen } = await daemon({ engine: 'ring', workers: 2, ringBytes: 4 << 20, priority: { packet: -10, background: 10 } });
    try {
      const n = nices(d.child.pid!);
      expect({ packet0: n['moat-packet-0'], packet1: n['moat-packet-1'], loader: n['moat-loader'], main: n['main'] }).toEqual({ packet0: [-10], packet1: [-10], loader: [10], main: [0] });
      const m = await metrics(listen);
      expect([metric(m, 'moat-packet-0'), metric(m, 'moat-packet-1'), metric(m, 'moat-loader'), metric(m, 'main')]).toEqual([-10, -10, 10, 0]);
    } finally {
      await stop(d);
    }
  }, 60_000);

  it('takes other values from capture.priority, and lowers the libpcap engine\'s loader but leaves its main thread (its packet loop) at 0', async () => {
    const ring = await daemon({ engine: 'ring', workers: 1, ringBytes: 4 << 20, priority: { packet: -3, background: 7 } });
    try {
      const n = nices(ring.d.child.pid!);
      expect({ packet0: n['moat-packet-0'], loader: n['moat-loader'], main: n['main'] }).toEqual({ packet0: [-3], loader: [7], main: [0] });
    } finally {
      await stop(ring.d);
    }
    const libpcap = await daemon({ engine: 'libpcap', ringBytes: 4 << 20 });
    try {
      const n = nices(libpcap.d.child.pid!);
      expect({ main: n['main'], loader: n['moat-loader'], packet: n['moat-packet-0'] }).toEqual({ main: [0], loader: [10], packet: undefined });
    } finally {
      await stop(libpcap.d);
    }
  }, 60_000);

  it('pins the packet workers to capture.cpus.packet and every other thread, node\'s helpers included, to capture.cpus.background', async () => {
    // Under CI=true a one-CPU host fails here rather than skip (the machine this runs on has 2).
    if (CPUS === undefined) expect.fail('capture.cpus needs two CPUs; this host has one');
    const [bg, pk] = CPUS!;
    const { d } = await daemon({ engine: 'ring', workers: 2, ringBytes: 4 << 20, cpus: { packet: [pk], background: [bg] } });
    try {
      const threads = cpus(d.child.pid!);
      const packet = threads.filter((t) => t.name.startsWith('moat-packet-'));
      const other = threads.filter((t) => !t.name.startsWith('moat-packet-'));
      expect(packet.map((t) => t.cpus)).toEqual([String(pk), String(pk)]);
      // The main thread, the loader, libuv's and V8's threads (started before the daemon's code ran): all on the background CPU.
      expect(other.length).toBeGreaterThan(3);
      expect(other.filter((t) => t.cpus !== String(bg))).toEqual([]);
      expect(other.map((t) => t.name)).toEqual(expect.arrayContaining(['main', 'moat-loader']));
      const info = d.lines.map((l) => JSON.parse(l) as { msg: string }).find((l) => l.msg.startsWith('capture.cpus:'));
      expect(info?.msg).toMatch(new RegExp(`^capture.cpus: packet workers on CPU ${pk}; the daemon's other \\d+ threads \\(and those it starts\\) on CPU ${bg}$`));
    } finally {
      await stop(d);
    }
  }, 60_000);

  it('refuses a packet CPU the process may not run on (taskset), with 5012 naming it, before starting anything', async () => {
    if (CPUS === undefined) expect.fail('capture.cpus needs two CPUs; this host has one');
    const [bg, pk] = CPUS!;
    const listen = ++port;
    const file = join(dir, `daemon-${listen}.jsonc`);
    writeFileSync(file, JSON.stringify({ mode: 'inline', interfaces: { outside: topo.gateway.portA, inside: topo.gateway.portB }, rules: { account: ACCOUNT }, capture: { engine: 'ring', cpus: { packet: [pk], background: [bg] } }, metrics: { listen: `127.0.0.1:${listen}` } }));
    const r = await exec(topo.gateway.ns, 'taskset', ['-c', String(bg), process.execPath, BIN, 'daemon', '--config', file], { check: false });
    expect(r.code).toBe(1);
    expect(r.stderr + r.stdout).toContain(`capture.cpus.packet: CPU ${pk} is not one this process may run on (${bg}`);
    expect(r.stderr + r.stdout).toContain('5012');
    // moat daemon --check says the same.
    const c = await exec(topo.gateway.ns, 'taskset', ['-c', String(bg), process.execPath, BIN, 'daemon', '--config', file, '--check'], { check: false });
    expect(c.code).toBe(1);
    expect(c.stderr).toContain(`capture.cpus.packet: CPU ${pk} is not one this process may run on (${bg}`);
  }, 60_000);

  it('leaves every thread at 0 with both priorities 0', async () => {
    const { d } = await daemon({ engine: 'ring', workers: 1, ringBytes: 4 << 20, priority: { packet: 0, background: 0 } });
    try {
      const n = nices(d.child.pid!);
      expect({ packet0: n['moat-packet-0'], loader: n['moat-loader'], main: n['main'] }).toEqual({ packet0: [0], loader: [0], main: [0] });
    } finally {
      await stop(d);
    }
  }, 60_000);

  it('without CAP_SYS_NICE keeps the packet workers at 0, logs why, and still lowers the loader', async () => {
    // Root without CAP_SYS_NICE (dropped from the bounding set, so not regained at exec): raising is refused (EACCES).
    const { d, listen } = await daemon({ engine: 'ring', workers: 1, ringBytes: 4 << 20, priority: { packet: -10, background: 10 } }, ['setpriv', '--inh-caps=-sys_nice', '--bounding-set=-sys_nice']);
    try {
      const n = nices(d.child.pid!);
      expect({ packet0: n['moat-packet-0'], loader: n['moat-loader'] }).toEqual({ packet0: [0], loader: [10] });
      const warn = d.lines.map((l) => JSON.parse(l) as { level: number; msg: string; asked?: number; nice?: number }).find((l) => l.msg.startsWith('packet workers: nice -10'));
      expect(warn).toMatchObject({ level: 40, asked: -10, nice: 0 });
      expect(warn!.msg).toContain('not permitted (raising a thread\'s priority needs root or CAP_SYS_NICE)');
      expect(metric(await metrics(listen), 'moat-packet-0')).toBe(0);
    } finally {
      await stop(d);
    }
  }, 60_000);
});
