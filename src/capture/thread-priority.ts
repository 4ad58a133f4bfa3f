// Thread priorities (issue #17 item 11): a thread of the daemon sets its own
// nice value and name through the ring engine's addon (moat-ring.c), so the
// packet workers win the CPU from the daemon's own update work (bundle intake,
// loading, the control plane on the same host). Linux nice is per thread, and
// a thread inherits its creator's value when it starts: a packet worker is
// started by the main thread (nice 0) and raises itself; a background worker
// lowers itself. Raising needs root or CAP_SYS_NICE: without it the thread
// keeps its value and says why (logged, and moat_thread_nice shows it).

import { readdirSync, readFileSync } from 'node:fs';
import { ringAddon } from './ring-port.js';

/** What setting a thread's priority did. */
export interface ThreadPriority {
  /** The name the thread was given. */
  readonly name: string;
  /** The kernel's id of the thread (its /proc/self/task/<tid>); 0 when the addon is not there. */
  readonly tid: number;
  /** The nice value asked for (undefined: none, the thread only named). */
  readonly asked: number | undefined;
  /** The nice value the thread runs at now. */
  readonly nice: number;
  /** Why `asked` was not applied (not permitted, the addon missing); absent when it was. */
  readonly refused?: string | undefined;
}

/**
 * Names the calling thread (as top -H and /proc/<pid>/task/<tid>/comm show
 * it; 15 bytes at most; '': not renamed) and sets its nice value to `nice` (-20..19; undefined:
 * left as inherited). Never throws: a refusal is in the answer.
 */
export function setThreadPriority(name: string, nice: number | undefined): ThreadPriority {
  const a = ringAddon();
  if (!('native' in a)) return { name, tid: 0, asked: nice, nice: 0, refused: nice === undefined ? undefined : a.problem };
  const n = a.native;
  if (name !== '') n.setThreadName(name);
  const tid = n.threadId();
  const before = n.threadNice();
  if (nice === undefined || before === nice) return { name, tid, asked: nice, nice: before };
  const errno = n.setThreadNice(nice);
  const now = n.threadNice();
  if (errno === 0) return { name, tid, asked: nice, nice: now };
  const why = errno === 1 || errno === 13 ? 'not permitted (raising a thread\'s priority needs root or CAP_SYS_NICE)' : `setpriority failed with errno ${errno}`;
  return { name, tid, asked: nice, nice: now, refused: why };
}

/** A process's threads (default this one's) whose name starts with `prefix`, with their nice values, read from /proc (field 19 of stat); the main thread's tid is the pid. */
export function threadNices(prefix = '', pid: number | 'self' = 'self'): Array<{ tid: number; name: string; nice: number }> {
  const dir = `/proc/${pid}/task`;
  const out: Array<{ tid: number; name: string; nice: number }> = [];
  let tids: string[];
  try {
    tids = readdirSync(dir);
  } catch {
    return out; // not Linux
  }
  for (const tid of tids) {
    try {
      const name = readFileSync(`${dir}/${tid}/comm`, 'utf8').trimEnd();
      if (!name.startsWith(prefix)) continue;
      // The name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
      const stat = readFileSync(`${dir}/${tid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out.push({ tid: Number(tid), name, nice: Number(fields[16]) });
    } catch {
      // the thread ended meanwhile
    }
  }
  return out.sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : x.tid - y.tid));
}

/** What pinning a thread did: the CPUs it may run on now, and why it is not pinned as asked (absent: it is). */
export interface ThreadCpus {
  readonly cpus: readonly number[];
  readonly refused?: string | undefined;
  /** The thread ended before it could be pinned (ESRCH). */
  readonly ended?: boolean | undefined;
}

/**
 * Pins thread `tid` of this process (0: the calling thread) to `cpus`
 * (capture.cpus). Never throws: a refusal is in the answer (a CPU this
 * process may not use, as a cpuset or `taskset` narrowed it, is EINVAL).
 */
export function setThreadCpus(cpus: readonly number[], tid = 0): ThreadCpus {
  const a = ringAddon();
  if (!('native' in a)) return { cpus: [], refused: a.problem };
  const errno = a.native.setThreadAffinity(cpus, tid);
  const now = a.native.threadAffinity(tid);
  if (errno === 0) return { cpus: now };
  if (errno === 3) return { cpus: now, refused: 'the thread has ended', ended: true };
  const why = errno === 22 ? `CPU${cpus.length === 1 ? '' : 's'} ${cpus.join(',')} not available to this process (it may run on ${cpuList(threadCpus(process.pid))})` : `sched_setaffinity failed with errno ${errno}`;
  return { cpus: now, refused: why };
}

/** The CPUs thread `tid` (0: the calling thread; the pid: the main thread) may run on; [] where that cannot be read. */
export function threadCpus(tid = 0): number[] {
  const a = ringAddon();
  return 'native' in a ? a.native.threadAffinity(tid) : [];
}

/**
 * Pins every thread this process has now (/proc/self/task: the main thread,
 * node's and V8's helpers, worker threads) to `cpus`; threads started after
 * inherit their starter's CPUs. The first refusal, if any, is in the answer
 * (the others are alike).
 */
export function setProcessCpus(cpus: readonly number[]): ThreadCpus & { readonly threads: number } {
  let tids: string[];
  try {
    tids = readdirSync('/proc/self/task');
  } catch {
    return { cpus: [], refused: 'not Linux (no /proc/self/task)', threads: 0 };
  }
  let refused: string | undefined;
  let threads = 0;
  for (const tid of tids) {
    const r = setThreadCpus(cpus, Number(tid));
    if (r.refused === undefined) threads++;
    else if (r.ended !== true) refused ??= r.refused;
  }
  return { cpus: threadCpus(process.pid), refused, threads };
}

/** CPUs as `taskset -c` writes them: 0-3,6. */
export function cpuList(cpus: readonly number[]): string {
  const out: string[] = [];
  for (let i = 0; i < cpus.length; i++) {
    let j = i;
    while (j + 1 < cpus.length && cpus[j + 1] === cpus[j]! + 1) j++;
    out.push(j > i ? `${cpus[i]}-${cpus[j]}` : String(cpus[i]));
    i = j;
  }
  return out.join(',');
}
