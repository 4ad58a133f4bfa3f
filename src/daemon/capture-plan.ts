// Which capture engine and how many packet workers a daemon starts with,
// decided from its configuration and the host: whether the ring engine can run
// here (ringEngineAvailable), the cores, and the interfaces' RX queues. Kept
// apart from the daemon so that every rule of the choice is tested without
// starting one (test/daemon/capture-plan.test.ts).

import { readdirSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import type { DaemonConfig } from '../config/index.js';
import { MoatError } from '../errors/index.js';
import { cpuList, threadCpus } from '../capture/index.js';

/** What the daemon starts: the engine, its workers (ring), and what to say about the choice in the start log. */
export interface CapturePlan {
  readonly engine: 'ring' | 'libpcap';
  /** Packet worker threads (ring engine); 0 with libpcap (the main thread reads). */
  readonly workers: number;
  /** Info lines for the start log (why this engine, why this many workers). */
  readonly notes: readonly string[];
  /** Warnings (a defaulted ring engine that cannot run here: libpcap instead). */
  readonly warnings: readonly string[];
}

/** What the host offers, as capturePlan reads it (given by tests). */
export interface CaptureHost {
  /** Why the ring engine cannot run here, or undefined when it can (ringEngineAvailable()). */
  readonly ringProblem: string | undefined;
  readonly cores: number;
  /** RX queues of an interface (undefined when not known). */
  readonly rxQueues: (iface: string) => number | undefined;
  /** The CPUs this process may run on (capture.cpus must name some of them); undefined or []: not known, not checked. */
  readonly allowedCpus?: readonly number[] | undefined;
}

/** RX queues of an interface from /sys/class/net/IF/queues (a veth has one unless made with numrxqueues). */
export function rxQueues(iface: string): number | undefined {
  try {
    const n = readdirSync(`/sys/class/net/${iface}/queues`).filter((q) => q.startsWith('rx-')).length;
    return n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The engine and workers for `config` on `host`. Throws 5012 (the daemon
 * cannot start as configured) for an explicit "ring" the host cannot run,
 * with the reason and the way out.
 */
export function capturePlan(config: DaemonConfig, host: CaptureHost, file = 'the configuration'): CapturePlan {
  const cap = config.capture;
  const notes: string[] = [];
  const warnings: string[] = [];
  if (cap.engine === 'libpcap') return { engine: 'libpcap', workers: 0, notes: ['capture engine libpcap (capture.engine)'], warnings };
  if (cap.engine === undefined && cap.filter !== '') {
    return { engine: 'libpcap', workers: 0, notes: ['capture engine libpcap: chosen for capture.filter (the ring engine takes no BPF filter)'], warnings };
  }
  if (host.ringProblem !== undefined) {
    if (cap.engine === 'ring') {
      throw new MoatError('DAEMON_PRECHECK', `${file}: capture.engine "ring" cannot run on this host: ${host.ringProblem}; give "engine": "libpcap" to capture through libpcap instead`, { pointer: '/capture/engine' });
    }
    warnings.push(`the ring engine cannot run on this host (${host.ringProblem}): capturing with libpcap instead, one frame at a time on the main thread (give capture.engine to choose explicitly)`);
    if (cap.cpus !== undefined) warnings.push('capture.cpus is the ring engine\'s: no thread is pinned');
    return { engine: 'libpcap', workers: 0, notes, warnings };
  }
  const allowed = host.allowedCpus ?? [];
  if (cap.cpus !== undefined && allowed.length > 0) {
    for (const [key, list] of [['packet', cap.cpus.packet], ['background', cap.cpus.background ?? []]] as const) {
      const i = list.findIndex((cpu) => !allowed.includes(cpu));
      if (i >= 0) {
        throw new MoatError('DAEMON_PRECHECK', `${file}: capture.cpus.${key}: CPU ${list[i]} is not one this process may run on (${cpuList(allowed)}: the host's CPUs, as narrowed by taskset or a cpuset); name CPUs among them`, { pointer: `/capture/cpus/${key}/${i}` });
      }
    }
  }
  notes.push(`capture engine ring${cap.engine === undefined ? ' (the default)' : ' (capture.engine)'}`);
  const queues = config.interfaces.map((i) => host.rxQueues(i) ?? host.cores);
  const fewest = Math.min(...queues);
  if (cap.workers !== undefined) {
    if (cap.workers > fewest) notes.push(`${cap.workers} packet workers (capture.workers) for ${fewest} RX queue${fewest === 1 ? '' : 's'}: fanout spreads the flows in software`);
    else notes.push(`${cap.workers} packet worker${cap.workers === 1 ? '' : 's'} (capture.workers)`);
    return { engine: 'ring', workers: cap.workers, notes, warnings };
  }
  // With capture.cpus, one worker per packet CPU rather than per core.
  const cores = cap.cpus?.packet.length ?? host.cores;
  const [per, perPlural] = cap.cpus === undefined ? ['core', 'cores'] : ['packet CPU (capture.cpus)', 'packet CPUs (capture.cpus)'];
  const workers = Math.max(1, Math.min(cores, fewest));
  notes.push(
    workers < cores
      ? `${workers} packet worker${workers === 1 ? '' : 's'}: ${cores} ${perPlural}, but ${config.interfaces.map((i, k) => `${i} has ${queues[k]} RX queue${queues[k] === 1 ? '' : 's'}`).join(', ')} (give capture.workers for more)`
      : `${workers} packet worker${workers === 1 ? '' : 's'}: one per ${per}`,
  );
  return { engine: 'ring', workers, notes, warnings };
}

/** The host as it is (for the daemon and `moat daemon --check`). */
export function liveCaptureHost(ringProblem: () => string | undefined): CaptureHost {
  return { ringProblem: ringProblem(), cores: availableParallelism(), rxQueues, allowedCpus: threadCpus(process.pid) };
}
