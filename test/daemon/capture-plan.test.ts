// The daemon's choice of capture engine and packet workers, from its
// configuration and what the host offers (ring engine usable or not, cores,
// RX queues), with what the start log says about it.
import { describe, expect, it } from 'vitest';
import { validateDaemonConfig } from '../../src/config/index.js';
import { capturePlan, rxQueues, type CaptureHost } from '../../src/daemon/index.js';
import { MoatError } from '../../src/errors/index.js';

const inline = (capture: Record<string, unknown> = {}) => validateDaemonConfig({ mode: 'inline', interfaces: ['ga', 'gb'], rules: { account: 'a.json' }, capture });
const host = (over: Partial<CaptureHost> = {}): CaptureHost => ({ ringProblem: undefined, cores: 8, rxQueues: () => 4, ...over });

describe('the capture plan', () => {
  it('defaults to the ring engine with one worker per core, at most the fewest RX queues of the interfaces', () => {
    expect(capturePlan(inline(), host({ cores: 2 }))).toMatchObject({ engine: 'ring', workers: 2, warnings: [] });
    const veth = capturePlan(inline(), host({ rxQueues: (i) => (i === 'gb' ? 1 : 4) }));
    expect(veth.workers).toBe(1);
    expect(veth.notes.join(' ')).toContain('gb has 1 RX queue');
  });

  it('with capture.cpus starts one worker per packet CPU (at most the RX queues), and warns that nothing is pinned when it falls back to libpcap', () => {
    expect(capturePlan(inline({ cpus: { packet: [2, 3, 5], background: [0] } }), host({ cores: 8 }))).toMatchObject({ engine: 'ring', workers: 3, notes: ['capture engine ring (the default)', '3 packet workers: one per packet CPU (capture.cpus)'] });
    expect(capturePlan(inline({ cpus: { packet: [2, 3, 5] } }), host({ rxQueues: () => 2 })).workers).toBe(2);
    expect(capturePlan(inline({ workers: 4, cpus: { packet: [1] } }), host()).workers).toBe(4);
    expect(capturePlan(inline({ cpus: { packet: [1] } }), host({ ringProblem: 'no AF_PACKET' })).warnings).toEqual([expect.stringContaining('no AF_PACKET'), "capture.cpus is the ring engine's: no thread is pinned"]);
  });

  it('refuses capture.cpus naming a CPU this process may not run on (5012 with its pointer), and checks nothing when the CPUs are not known', () => {
    let err: unknown;
    try {
      capturePlan(inline({ cpus: { packet: [1], background: [0, 4] } }), host({ allowedCpus: [0, 1, 2, 3] }), 'd.jsonc');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(MoatError);
    expect([(err as MoatError).code, (err as MoatError).pointer]).toEqual([5012, '/capture/cpus/background/1']);
    expect((err as MoatError).message).toBe('d.jsonc: capture.cpus.background: CPU 4 is not one this process may run on (0-3: the host\'s CPUs, as narrowed by taskset or a cpuset); name CPUs among them');
    expect(capturePlan(inline({ cpus: { packet: [7] } }), host({ allowedCpus: [] })).workers).toBe(1);
  });

  it('takes capture.workers as given, saying when it exceeds the RX queues', () => {
    const p = capturePlan(inline({ workers: 3 }), host({ rxQueues: () => 1 }));
    expect(p.workers).toBe(3);
    expect(p.notes.join(' ')).toContain('3 packet workers (capture.workers) for 1 RX queue');
  });

  it('chooses libpcap for a filter and says why; an explicit libpcap has no workers', () => {
    const f = capturePlan(inline({ filter: 'tcp' }), host());
    expect([f.engine, f.workers]).toEqual(['libpcap', 0]);
    expect(f.notes.join(' ')).toContain('chosen for capture.filter');
    expect(capturePlan(inline({ engine: 'libpcap' }), host()).engine).toBe('libpcap');
  });

  it('falls back to libpcap with a warning when the defaulted ring engine cannot run, and refuses an explicit ring with the reason (5012)', () => {
    const why = 'PACKET_IGNORE_OUTGOING needs Linux >= 4.20';
    const p = capturePlan(inline(), host({ ringProblem: why }));
    expect(p.engine).toBe('libpcap');
    expect(p.warnings[0]).toContain(why);
    let err: unknown;
    try {
      capturePlan(inline({ engine: 'ring' }), host({ ringProblem: why }), 'd.jsonc');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(MoatError);
    expect((err as MoatError).code).toBe(5012);
    expect((err as MoatError).message).toContain(why);
    expect((err as MoatError).message).toContain('"engine": "libpcap"');
    expect((err as MoatError).pointer).toBe('/capture/engine');
  });

  it('reads RX queues from /sys (the loopback has one), and nothing for a missing interface', () => {
    expect(rxQueues('lo')).toBe(1);
    expect(rxQueues('no-such-if0')).toBeUndefined();
  });
});
