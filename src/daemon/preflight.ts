// What `moat daemon` needs from the host before it captures, checked without
// capturing: the interfaces exist (in this network namespace), the process may
// capture (CAP_NET_RAW), the metrics address can be bound, the drop capture can
// be written. `moat daemon --check` runs it, and so does a start, before any
// capture is opened: each failure is one coded line, not a libpcap abort.

import { accessSync, constants, existsSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { networkInterfaces } from 'node:os';
import { dirname } from 'node:path';
import type { DaemonConfig } from '../config/index.js';
import { MoatError, notRegular, quoteInput } from '../errors/index.js';

/** Linux capability numbers (linux/capability.h). */
const CAP_NET_ADMIN = 12;
const CAP_NET_RAW = 13;

/** The names of the network interfaces of this namespace. */
export function interfaceNames(): string[] {
  const names = new Set(Object.keys(networkInterfaces()));
  try {
    // Interfaces without an address (bridge ports) are absent from networkInterfaces().
    for (const n of readFileSync('/proc/net/dev', 'utf8').split('\n').slice(2)) {
      const name = n.split(':')[0]!.trim();
      if (name !== '') names.add(name);
    }
  } catch {
    // not Linux: networkInterfaces() is what there is
  }
  return [...names].sort();
}

/** The effective capability set of this process (from /proc/self/status), or undefined where it cannot be read. */
export function effectiveCapabilities(status = '/proc/self/status'): bigint | undefined {
  try {
    const m = /^CapEff:\s*([0-9a-f]+)$/m.exec(readFileSync(status, 'utf8'));
    return m === null ? undefined : BigInt('0x' + m[1]!);
  } catch {
    return undefined;
  }
}

/** Missing interfaces named one per line; the rest are counted in one more line. */
export const MAX_MISSING_LINES = 10;

const has = (caps: bigint, cap: number) => (caps & (1n << BigInt(cap))) !== 0n;

/** Every reason the daemon could not start on this host with `config`; empty when it can. */
export async function preflight(config: DaemonConfig, options: { capabilities?: bigint | undefined } = {}): Promise<MoatError[]> {
  const errors: MoatError[] = [];
  const present = new Set(interfaceNames());
  const missing = config.interfaces.filter((name) => !present.has(name) && !existsSync(`/sys/class/net/${name}`));
  // A line per missing interface, up to a few: a generated list of thousands is one more line, not thousands.
  for (const name of missing.slice(0, MAX_MISSING_LINES)) {
    errors.push(new MoatError('CAPTURE_NO_DEVICE', `interfaces: no such network interface ${quoteInput(name)} in this network namespace (there are: ${[...present].join(', ') || 'none'})`, { pointer: '/interfaces' }));
  }
  if (missing.length > MAX_MISSING_LINES) {
    errors.push(new MoatError('CAPTURE_NO_DEVICE', `interfaces: and ${missing.length - MAX_MISSING_LINES} more interfaces that do not exist in this network namespace`, { pointer: '/interfaces' }));
  }
  const caps = 'capabilities' in options ? options.capabilities : effectiveCapabilities();
  if (caps !== undefined && !has(caps, CAP_NET_RAW)) {
    errors.push(
      new MoatError('CAPTURE_PERMISSION', `the process lacks CAP_NET_RAW${has(caps, CAP_NET_ADMIN) ? '' : ' and CAP_NET_ADMIN'}: run as root or grant them (config/moat-daemon.service does)`, {
        hint: 'setcap cap_net_raw,cap_net_admin+ep "$(command -v node)", or AmbientCapabilities= in a systemd unit',
      }),
    );
  }
  if (config.metrics.enabled) {
    const err = await tryBind(config.metrics.listen);
    if (err !== undefined) errors.push(new MoatError('DAEMON_PRECHECK', `metrics.listen ${config.metrics.listen}: cannot listen: ${err}`, { pointer: '/metrics/listen' }));
  }
  if (config.dropCapture !== undefined) {
    const p = config.dropCapture.path;
    const why = unwritable(p);
    if (why !== undefined) errors.push(new MoatError('DAEMON_PRECHECK', `dropCapture.path ${p}: cannot write: ${why}`, { pointer: '/dropCapture/path' }));
  }
  return errors;
}

// Binds HOST:PORT for a moment; the reason it cannot be bound, or undefined.
function tryBind(at: string): Promise<string | undefined> {
  const colon = at.lastIndexOf(':');
  const host = at.slice(0, colon).replace(/^\[|\]$/g, '');
  const port = Number(at.slice(colon + 1));
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'EADDRINUSE' ? 'address already in use' : err.code === 'EADDRNOTAVAIL' ? 'no such local address' : (err.code ?? err.message)));
    s.listen(port, host, () => s.close(() => resolve(undefined)));
  });
}

// Why a file cannot be created or appended to, or undefined when it can.
// It must be a regular file or not exist yet: the drop capture is rotated
// (renamed to path.1, the oldest removed), so /dev/null would be moved away
// or removed, and a FIFO would block the start until something reads it.
function unwritable(path: string): string | undefined {
  try {
    const st = statSync(path);
    if (!st.isFile()) return notRegular(st);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') return 'too many levels of symbolic links';
    if (code !== 'ENOENT' && code !== 'ENOTDIR') return code ?? String(err);
  }
  const dir = dirname(path);
  try {
    if (!statSync(dir).isDirectory()) return `${dir} is not a directory`;
  } catch {
    return `no such directory ${dir}`;
  }
  try {
    if (existsSync(path)) accessSync(path, constants.W_OK);
    else accessSync(dir, constants.W_OK);
  } catch {
    return 'permission denied';
  }
  return undefined;
}
