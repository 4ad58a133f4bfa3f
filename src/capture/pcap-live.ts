// Live capture and injection on a network interface, through libpcap and the `cap`
// addon (0.2.1). This is the only module of the project that touches `cap`; it is
// loaded lazily, on the first open() or interfaces(), so importing this module costs
// nothing and does not need libpcap.
//
//   const ga = LiveCapture.open('ga');
//   const gb = LiveCapture.open('gb');
//   ga.onPacket((frame, length) => { if (allowed(frame, length)) gb.send(frame, length); });
//   gb.onPacket((frame, length) => { ga.send(frame, length); });
//
// What `cap` gives, and what it does not (read from its source and measured):
// * snaplen is fixed at 65535, promiscuous mode is always on, immediate mode is on;
// * every frame is copied into one Buffer, reused for every packet: the handler gets
//   that Buffer and must decide synchronously, or copy what it keeps
//   (`Buffer.from(frame.subarray(0, length))`);
// * no timestamp, no wire length, no kernel drop counters: a caller that needs time
//   stamps it at delivery (process.hrtime.bigint());
// * no direction setting. A handle does not see the frames it sends itself, but a
//   second handle on the same port sees them as outgoing. The BPF qualifier `inbound`
//   works, but libpcap 1.10 drops the first packet after a filter using it is set.
//
// Native lifetime: handles are never closed or freed, they live until the process ends.
// `cap` 0.2.1 has memory-safety bugs that make anything else unsafe:
//   1. open() keeps only a raw pointer to the capture Buffer. If the Buffer is garbage
//      collected, the next packet is copied into freed memory and corrupts the heap
//      (reproduced: `malloc(): unsorted double linked list corrupted`, abort).
//   2. close() stops its libuv poll handle but never uv_close()s it, so freeing the Cap
//      object leaves a dangling entry in libuv's handle queue (valgrind: invalid writes
//      into freed memory).
//   3. A failed open() (bad filter, no such device...) leaves a half-built native object
//      that is not referenced natively; when GC collects it, its destructor stops a poll
//      handle that was never initialised: the process aborts (`uv_poll_stop: Assertion`)
//      or segfaults at the next full GC (reproduced with --expose-gc).
// So every Cap object ever constructed, with its Buffer, goes into NATIVE_HANDLES below
// and stays there; stop() only detaches the JS handler. Open captures once, at start-up.
// Consequences: a failed open leaks its native object, and after a bad filter also its
// packet socket and ring (an unknown interface name is caught before any native call);
// an open capture keeps the event loop alive even after stop(), so a program using
// LiveCapture ends with process.exit().
//
// Another `cap` defect this module cannot catch: when a captured interface goes down or
// disappears, libuv reports a poll error and `cap` fails an assertion: the process
// aborts (`Pcap::cb_packets: Assertion 'status == 0' failed`). Run the daemon under a
// supervisor that restarts it, and stop the process before deleting its interfaces.
//
// Noise: every open() of an interface without an IPv4 address (the gateway ports of an
// inline bridge have none, by design) makes libpcap print
//   Warning: <iface>: no IPv4 address assigned - This may not actually work
// to the process's stderr from native code. It is harmless: the address is only used
// for the netmask of `ip broadcast` filters.
//
// Errors are MoatErrors:
//   3009 CAPTURE_NO_DEVICE   no interface of that name (in this network namespace)
//   3010 CAPTURE_PERMISSION  the process lacks CAP_NET_RAW (and CAP_NET_ADMIN)
//   3011 CAPTURE_BAD_FILTER  the BPF filter does not compile (or the kernel refuses it)
//   3012 CAPTURE_OPEN        anything else (interface down, libpcap or the addon missing...)

import { createRequire } from 'node:module';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { MoatError } from '../errors/index.js';
import { LINKTYPE } from '../packet/index.js';

/** Default size of the kernel ring of a capture: 128 MiB. */
export const LIVE_CAPTURE_DEFAULT_RING_BYTES = 128 * 1024 * 1024;
/** Smallest ring accepted: 1 MiB (16 slots of 64 KiB). */
export const LIVE_CAPTURE_MIN_RING_BYTES = 1024 * 1024;
/** Largest ring accepted (libpcap takes an int). */
export const LIVE_CAPTURE_MAX_RING_BYTES = 0x7fff_ffff;
/** Snapshot length `cap` sets (not configurable): frames longer than this are cut. */
export const LIVE_CAPTURE_SNAPLEN = 65_535;

/** Options of {@link LiveCapture.open}. */
export interface LiveCaptureOptions {
  /**
   * Size of the kernel packet ring in bytes; default 128 MiB. Each slot takes about
   * 64 KiB (snaplen is 65535), so 16 MiB holds only about 256 frames: use 64-128 MiB
   * for a bridge port. The ring is kernel memory held for the life of the process.
   */
  ringBytes?: number;
  /**
   * BPF filter in pcap-filter(7) syntax; default '' (every frame). Avoid `inbound` and
   * `outbound` unless losing the first packet is acceptable (libpcap 1.10 drops it).
   */
  filter?: string;
}

/**
 * Receives one captured frame. `frame` is the capture's one shared Buffer: bytes
 * [0, length) are the frame, and they are valid only during this call (the next packet
 * overwrites them). `truncated` is true when the frame was cut to the snaplen.
 */
export type LivePacketHandler = (frame: Buffer, length: number, truncated: boolean) => void;

/** Counters of a live capture since it was opened. */
export interface LiveCaptureStats {
  /** Frames delivered by libpcap (also those arriving after stop(), which are discarded). */
  readonly packets: number;
  /** Bytes of those frames. */
  readonly bytes: number;
  /** Frames cut to the snaplen. */
  readonly truncated: number;
  /** Frames sent successfully by send(). */
  readonly sent: number;
  /** Bytes of those frames. */
  readonly sentBytes: number;
  /** send() calls that failed. */
  readonly sendErrors: number;
  /** Message of the last failed send(), e.g. 'send: Message too long' (GRO/GSO left on). */
  readonly lastSendError: string | undefined;
  /** Exceptions thrown by the packet handler (each is rethrown asynchronously). */
  readonly handlerErrors: number;
}

// ---- the `cap` addon, typed by hand (it ships no types) ----

interface CapHandle {
  open(device: string, filter: string, bufSize: number, buffer: Buffer): string;
  send(buffer: Buffer, length: number): void;
  on(event: 'packet', listener: (nbytes: number, truncated: boolean) => void): unknown;
  removeAllListeners(event: 'packet'): unknown;
}

interface CapDevice {
  name: string;
  description?: string;
  flags?: string;
}

interface CapModule {
  Cap: {
    new (): CapHandle;
    deviceList(): CapDevice[];
  };
}

let capModule: CapModule | undefined;

function loadCap(): CapModule {
  if (capModule === undefined) {
    try {
      capModule = createRequire(import.meta.url)('cap') as CapModule;
    } catch (cause) {
      throw new MoatError(
        'CAPTURE_OPEN',
        `cannot load the libpcap binding (npm package cap): ${errorText(cause)}; ` +
          'it needs libpcap-dev installed (apt-get install libpcap-dev) before npm install builds it',
        { cause },
      );
    }
  }
  return capModule;
}

/**
 * Every Cap object ever constructed, opened or not, with the Buffer given to its open():
 * kept for the life of the process. See the header: freeing either is unsafe in cap 0.2.1.
 * Never remove entries.
 */
const NATIVE_HANDLES: { readonly cap: CapHandle; readonly buffer: Buffer; readonly iface: string }[] = [];

/** Names for a message: sorted, at most 16. */
function listNames(names: string[]): string {
  const sorted = names.sort();
  const shown = sorted.slice(0, 16).join(', ');
  return sorted.length > 16 ? `${shown} and ${sorted.length - 16} more` : shown;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** LINKTYPE number of the link-type string cap's open() returns. */
export function capLinkTypeNumber(name: string): number {
  switch (name) {
    case 'ETHERNET':
      return LINKTYPE.ETHERNET;
    case 'LINUX_SLL':
    case 'LINKTYPE_LINUX_SLL': // what cap 0.2.1 really returns for DLT_LINUX_SLL ('any')
      return LINKTYPE.LINUX_SLL;
    case 'RAW':
      return LINKTYPE.RAW;
    case 'NULL':
      return LINKTYPE.NULL;
    case 'IEEE802_11_RADIO':
      return 127;
  }
  const m = /^Unknown linktype (\d+)$/.exec(name);
  if (m === null) return -1;
  const dlt = Number(m[1]);
  // pcap_datalink() returns DLT_ values; they equal the LINKTYPE_ values except raw IP.
  return dlt === 12 || dlt === 14 ? LINKTYPE.RAW : dlt;
}

// ---- telling a filter error from an activation error ----
//
// cap's open() runs pcap_create, pcap_activate, then pcap_compile/pcap_setfilter, and
// reports every failure the same way. libpcap's compile messages have no common form
// ("can't parse filter expression: syntax error", "unknown host 'x'", "illegal port
// number 99999 > 65535"...), so the stage is found from a side effect instead: a
// successful pcap_activate leaves an AF_PACKET socket open in this process (a failed
// open is never closed, see the header), a failed one closes its socket.

/** Inodes of the socket fds of this process, undefined when /proc cannot tell. */
function socketInodes(): Set<string> | undefined {
  try {
    const inodes = new Set<string>();
    for (const fd of readdirSync('/proc/self/fd')) {
      let target: string;
      try {
        target = readlinkSync(`/proc/self/fd/${fd}`);
      } catch {
        continue; // the fd of the directory listing itself, or closed meanwhile
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m !== null) inodes.add(m[1]!);
    }
    return inodes;
  } catch {
    return undefined;
  }
}

/** Whether one of `fresh` (socket inodes) is an AF_PACKET socket; undefined when /proc cannot tell. */
function anyPacketSocket(fresh: readonly string[]): boolean | undefined {
  try {
    // /proc/self/net/packet: "sk RefCnt Type Proto Iface R Rmem User Inode" (this netns)
    const lines = readFileSync('/proc/self/net/packet', 'utf8').split('\n').slice(1);
    const inodes = new Set(lines.map((l) => l.trim().split(/\s+/)[8]).filter((s) => s !== undefined));
    return fresh.some((i) => inodes.has(i));
  } catch {
    return undefined;
  }
}

/**
 * Names that can be opened: the interfaces of this process's network namespace
 * (/proc/self/net/dev) and libpcap's pseudo-devices ('any', 'nflog'...). Undefined when
 * /proc cannot tell (libpcap then decides).
 */
function knownInterfaces(Cap: CapModule['Cap']): Set<string> | undefined {
  let names: Set<string>;
  try {
    // "Inter-|   Receive ...", " face |bytes ...", then "    lo: 1234 ..."
    const lines = readFileSync('/proc/self/net/dev', 'utf8').split('\n').slice(2);
    names = new Set(lines.filter((l) => l.includes(':')).map((l) => l.slice(0, l.indexOf(':')).trim()));
  } catch {
    return undefined;
  }
  try {
    for (const d of Cap.deviceList()) names.add(d.name);
  } catch {
    return undefined;
  }
  return names;
}

function openError(iface: string, filter: string, cause: unknown, activated: boolean | undefined): MoatError {
  const text = errorText(cause);
  if (/operation not permitted|permission denied|don't have permission/i.test(text)) {
    return new MoatError(
      'CAPTURE_PERMISSION',
      `cannot capture on ${iface}: ${text}: live capture needs the capabilities CAP_NET_RAW and CAP_NET_ADMIN; ` +
        'run as root or grant them (systemd: AmbientCapabilities=CAP_NET_RAW CAP_NET_ADMIN)',
      { cause },
    );
  }
  if (/no such device/i.test(text)) {
    return new MoatError('CAPTURE_NO_DEVICE', `no such network interface: ${JSON.stringify(iface)} (${text})`, {
      cause,
    });
  }
  const filterStage =
    filter !== '' &&
    (activated ?? /filter|syntax|parse|unknown|illegal|invalid|expression|modifier|not supported|setsockopt/i.test(text));
  if (filterStage) {
    return new MoatError('CAPTURE_BAD_FILTER', `invalid capture filter ${JSON.stringify(filter)} on ${iface}: ${text}`, {
      cause,
    });
  }
  return new MoatError('CAPTURE_OPEN', `cannot open live capture on ${iface}: ${text}`, { cause });
}

/**
 * A live capture on one network interface, which can also send frames on it. Opened
 * once and kept for the life of the process (see the module header).
 */
export class LiveCapture {
  /** Interface name, as given to open(). */
  readonly iface: string;
  /** The BPF filter in force ('' for none). */
  readonly filter: string;
  /** Kernel ring size requested, in bytes. */
  readonly ringBytes: number;
  /** LINKTYPE_* of the captured frames (1 Ethernet, 113 Linux SLL, 101 raw IP...), -1 if unknown. */
  readonly linkType: number;
  /** cap's own name of the link type ('ETHERNET', 'LINKTYPE_LINUX_SLL', 'Unknown linktype 276'...). */
  readonly linkTypeName: string;

  private readonly cap: CapHandle;
  private readonly buffer: Buffer;
  private handler: LivePacketHandler | undefined;
  private stopped = false;
  private packets = 0;
  private bytes = 0;
  private truncatedCount = 0;
  private sent = 0;
  private sentBytes = 0;
  private sendErrors = 0;
  private lastSendError: string | undefined;
  private handlerErrors = 0;

  private constructor(iface: string, filter: string, ringBytes: number, cap: CapHandle, buffer: Buffer, linkTypeName: string) {
    this.iface = iface;
    this.filter = filter;
    this.ringBytes = ringBytes;
    this.cap = cap;
    this.buffer = buffer;
    this.linkTypeName = linkTypeName;
    this.linkType = capLinkTypeNumber(linkTypeName);
    cap.on('packet', this.dispatch);
  }

  /**
   * Opens a live capture (promiscuous, snaplen 65535) on `iface` in this process's
   * network namespace. Captured frames are dropped until onPacket() sets a handler.
   * @throws MoatError 3009 no such interface, 3010 missing CAP_NET_RAW/CAP_NET_ADMIN,
   *   3011 invalid filter, 3012 any other failure (interface down, libpcap missing...)
   * @throws RangeError if ringBytes is not an integer in [1 MiB, 2^31 - 1]
   */
  static open(iface: string, options: LiveCaptureOptions = {}): LiveCapture {
    const ringBytes = options.ringBytes ?? LIVE_CAPTURE_DEFAULT_RING_BYTES;
    const filter = options.filter ?? '';
    if (!Number.isInteger(ringBytes) || ringBytes < LIVE_CAPTURE_MIN_RING_BYTES || ringBytes > LIVE_CAPTURE_MAX_RING_BYTES) {
      throw new RangeError(
        `capture ring size must be an integer from ${LIVE_CAPTURE_MIN_RING_BYTES} to ${LIVE_CAPTURE_MAX_RING_BYTES} bytes, got ${ringBytes}`,
      );
    }
    // Caught here rather than by libpcap: a NUL would cut the C strings silently.
    if (iface === '' || iface.includes('\0') || iface.includes('/')) {
      throw new MoatError('CAPTURE_NO_DEVICE', `no such network interface: ${JSON.stringify(iface)}`);
    }
    if (filter.includes('\0')) {
      throw new MoatError('CAPTURE_BAD_FILTER', `invalid capture filter ${JSON.stringify(filter)}: it contains a NUL character`);
    }
    const { Cap } = loadCap();
    // A name known to be absent fails here, before a native handle exists: no handle to
    // pin forever and no libpcap warning on stderr.
    const known = knownInterfaces(Cap);
    if (known !== undefined && !known.has(iface)) {
      throw new MoatError(
        'CAPTURE_NO_DEVICE',
        `no such network interface: ${JSON.stringify(iface)} (there are: ${listNames([...known])})`,
      );
    }
    const cap = new Cap();
    const buffer = Buffer.alloc(LIVE_CAPTURE_SNAPLEN);
    NATIVE_HANDLES.push({ cap, buffer, iface }); // before open(): a failed open must stay referenced too
    const before = filter === '' ? undefined : socketInodes();
    let linkTypeName: string;
    try {
      linkTypeName = cap.open(iface, filter, ringBytes, buffer);
    } catch (cause) {
      let activated: boolean | undefined;
      if (before !== undefined) {
        const after = socketInodes();
        if (after !== undefined) activated = anyPacketSocket([...after].filter((i) => !before.has(i)));
      }
      throw openError(iface, filter, cause, activated);
    }
    return new LiveCapture(iface, filter, ringBytes, cap, buffer, linkTypeName);
  }

  /** Names of the interfaces libpcap can capture on (including pseudo-devices such as 'any'). */
  static interfaces(): string[] {
    const { Cap } = loadCap();
    try {
      return Cap.deviceList().map((d) => d.name);
    } catch (cause) {
      throw new MoatError('CAPTURE_OPEN', `cannot list capture interfaces: ${errorText(cause)}`, { cause });
    }
  }

  /**
   * Sets (or replaces) the function receiving every captured frame. The frame Buffer is
   * shared and overwritten by the next packet: use it only during the call. A handler
   * that throws does not stop the capture: the exception is counted and rethrown from
   * setImmediate (so it reaches 'uncaughtException' outside the native packet loop).
   * No effect after stop().
   */
  onPacket(handler: LivePacketHandler): void {
    if (!this.stopped) this.handler = handler;
  }

  /**
   * Sends bytes [0, length) of `frame` as one link-layer frame (complete, with its own
   * link header) on the interface. Never throws: returns false and counts the error when
   * the frame cannot be sent (bad length, 'Message too long' when GRO/GSO made a frame
   * larger than the MTU, interface down, after stop()...).
   */
  send(frame: Uint8Array, length: number): boolean {
    if (this.stopped) return this.sendFailed('capture is stopped');
    if (!Number.isInteger(length) || length <= 0 || length > frame.byteLength) {
      return this.sendFailed(`bad frame length ${length} (the buffer holds ${frame.byteLength} bytes)`);
    }
    const buf = Buffer.isBuffer(frame) ? frame : Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength);
    try {
      this.cap.send(buf, length);
    } catch (err) {
      return this.sendFailed(errorText(err));
    }
    this.sent++;
    this.sentBytes += length;
    return true;
  }

  /** Counters since open(). */
  get stats(): LiveCaptureStats {
    return {
      packets: this.packets,
      bytes: this.bytes,
      truncated: this.truncatedCount,
      sent: this.sent,
      sentBytes: this.sentBytes,
      sendErrors: this.sendErrors,
      lastSendError: this.lastSendError,
      handlerErrors: this.handlerErrors,
    };
  }

  /** Whether stop() was called. */
  get isStopped(): boolean {
    return this.stopped;
  }

  /**
   * Stops delivering frames to JS: the handler is dropped and send() fails from now on.
   * The native handle is deliberately NOT closed (see the module header): it stays open,
   * keeps reading its ring and discarding the frames, and keeps the event loop alive.
   * Idempotent.
   */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.handler = undefined;
  }

  private sendFailed(message: string): boolean {
    this.sendErrors++;
    this.lastSendError = message;
    return false;
  }

  // Called by cap for every frame, from its native poll callback.
  private readonly dispatch = (nbytes: number, truncated: boolean): void => {
    this.packets++;
    this.bytes += nbytes;
    // cap's own flag only says the frame did not fit the Buffer (never: the Buffer is as
    // large as the snaplen); libpcap cuts longer frames to the snaplen without saying so.
    const cut = truncated || nbytes >= LIVE_CAPTURE_SNAPLEN;
    if (cut) this.truncatedCount++;
    const handler = this.handler;
    if (handler === undefined) return;
    try {
      handler(this.buffer, nbytes, cut);
    } catch (err) {
      this.handlerErrors++;
      setImmediate(() => {
        throw err;
      });
    }
  };
}
