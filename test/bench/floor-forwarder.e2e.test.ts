// End to end, in network namespaces (root, cc): the inline benchmark's floor,
// bench/floor-forwarder.c, compiled as the benchmark compiles it, bridges host A
// and host B through the gateway's ports in both directions, and counts what it
// forwarded; nothing crosses before it starts or after it stops. Without this,
// a floor that forwarded nothing would leave the benchmark's floor path
// failing every rung with no hint why.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exec, gatewayTopology, projectUrl, requireRoot, spawnIn, type GatewayTopology, type NsProcess } from '../support/netns.js';

const RUN = requireRoot(['cc']);

interface Counters {
  forwarded: number;
  captured: number;
  drops: number;
  sendErrors: number;
}

describe.runIf(RUN)('the floor forwarder of the inline benchmark', () => {
  const dir = mkdtempSync(join(tmpdir(), 'moat-floor-e2e-'));
  const bin = join(dir, 'floor-forwarder');
  let topo: GatewayTopology;

  beforeAll(async () => {
    const src = fileURLToPath(projectUrl('bench/floor-forwarder.c'));
    const cc = spawnSync('cc', ['-O2', '-Wall', '-Werror', '-o', bin, src], { encoding: 'utf8' });
    expect(cc.stderr).toBe('');
    expect(cc.status).toBe(0);
    topo = await gatewayTopology({ staticNeighbors: true });
  }, 60_000);

  afterAll(async () => {
    await topo?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  const ping = async (count: number): Promise<number> => {
    const r = await exec(topo.a.ns, 'ping', ['-n', '-c', String(count), '-i', '0.05', '-W', '1', topo.b.ipv4], { check: false });
    return Number(/(\d+) received/.exec(r.stdout)?.[1] ?? -1);
  };

  async function counters(proc: NsProcess): Promise<Counters> {
    const from = proc.lines.length;
    proc.write('\n');
    return proc.waitForJson<Counters>((m) => typeof m.forwarded === 'number', 5_000, from);
  }

  it('bridges A and B both ways while it runs, counting every frame it forwarded, and nothing crosses without it', async () => {
    expect(await ping(2)).toBe(0);

    const gw = topo.gateway;
    const proc = spawnIn(gw.ns, bin, [gw.portA, gw.portB, String(4 << 20)]);
    await proc.waitForLine(/^ready$/, 10_000);
    const before = await counters(proc);
    expect(await ping(10)).toBe(10);
    const after = await counters(proc);
    // 10 echo requests A->B and 10 replies B->A, at least (the hosts may send more of their own).
    expect(after.forwarded - before.forwarded).toBeGreaterThanOrEqual(20);
    expect(after.captured - before.captured).toBe(after.forwarded - before.forwarded);
    expect(after.drops).toBe(0);
    expect(after.sendErrors).toBe(0);

    await proc.stop(2_000);
    expect(proc.exitText()).toBe('signal SIGTERM');
    expect(await ping(2)).toBe(0);
  }, 60_000);
});
