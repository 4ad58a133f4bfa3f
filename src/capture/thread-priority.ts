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
