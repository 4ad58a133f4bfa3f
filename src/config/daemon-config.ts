// The daemon's configuration: a typed schema with defaults (units in the
// comments), unknown keys rejected, every error naming its key, and the result
// deep-frozen. Files are JSON with comments (see config/daemon.example.jsonc).

import { isIPv4, isIPv6 } from 'node:net';
import { dirname, isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import { MoatError, escapeControls, quoteInput, readRegularFile, setFileLimits } from '../errors/index.js';
import { UnterminatedComment, position, stripJsonComments } from './jsonc.js';

const listName = z.string().regex(/^\$?[a-z0-9_]+(\.[a-z0-9_]+)*$/, 'a list name: lowercase letters, digits, "_" and inner "."');
/** Hostname syntax (RFC 1123): dot-separated labels of letters, digits and inner hyphens, 63 characters each, 253 in all. */
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

/**
 * Why `s` is not a HOST:PORT to listen on, or undefined when it is: HOST an
 * IPv4 literal, an IPv6 literal in brackets or a host name; PORT 1-65535, or
 * 0 (the kernel picks one) when `allowZero`.
 */
export function hostPortProblem(s: string, allowZero = false): string | undefined {
  const m = /^(?:\[([^\]]*)\]|([^:[\]]*)):([0-9]+)$/.exec(s);
  if (m === null) return 'expected HOST:PORT, e.g. 127.0.0.1:9490 or [::1]:9490';
  const port = m[3]!.length > 5 ? Infinity : Number(m[3]);
  if (port > 65535 || (port === 0 && !allowZero)) return `port ${m[3]} is out of range: ${allowZero ? '0' : '1'}-65535`;
  if (m[1] !== undefined) return isIPv6(m[1]) ? undefined : `${m[1]} is not an IPv6 address`;
  const host = m[2]!;
  // All digits and dots: meant as IPv4, so it must be one (1.2.3.999 is not a host name either).
  if (/^[0-9.]+$/.test(host)) return isIPv4(host) ? undefined : `${host} is not an IPv4 address`;
  if (!HOSTNAME.test(host)) return `${JSON.stringify(host)} is not an IP address or a host name`;
  return undefined;
}

/** Why `s` is not a control channel URL (ws:// or wss://, a host, no credentials), or undefined when it is one. */
export function channelUrlProblem(s: string): string | undefined {
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return `${quoteInput(s)} is not a URL: expected ws://HOST:PORT or wss://HOST:PORT`;
  }
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:') return `the scheme must be ws:// or wss://, not ${quoteInput(u.protocol.replace(/:$/, '') + '://')}`;
  if (u.hostname === '') return 'the URL names no host';
  if (u.username !== '' || u.password !== '') return 'the URL must not carry credentials: give token or tokenFile';
  return undefined;
}

const channelUrlSchema = z.string().superRefine((s, ctx) => {
  const why = channelUrlProblem(s);
  if (why !== undefined) ctx.addIssue({ code: 'custom', message: why });
});

/** Control plane URLs a daemon may list (replicas or load balancers): more would be a fleet, not a failover list. */
export const MAX_CONTROL_PLANE_URLS = 16;

/** A controlPlane.url as the list of URLs it names (one, or the replicas in the order given). */
export function controlPlaneUrls(url: string | readonly string[]): readonly string[] {
  return typeof url === 'string' ? [url] : url;
}

/**
 * A file path: at most PATH_MAX (4,096 bytes on Linux) characters. A longer
 * one cannot be opened, and the read error would echo all of it (twice).
 */
export const MAX_PATH_LENGTH = 4096;
const filePath = z
  .string()
  .min(1)
  .max(MAX_PATH_LENGTH, `a file path of at most ${MAX_PATH_LENGTH} characters`)
  // The system cannot open it, and node throws a TypeError rather than a system error.
  .refine((s) => !s.includes('\0'), 'a file path cannot contain a NUL byte');

/** A network interface name: at most IFNAMSIZ - 1 (15) bytes on Linux. */
const interfaceName = z.string().min(1).max(15);

const hostPort = z.string().superRefine((s, ctx) => {
  const why = hostPortProblem(s);
  if (why !== undefined) ctx.addIssue({ code: 'custom', message: `HOST:PORT: ${why}` });
});

const schema = z.strictObject({
  /** monitor: capture and judge, forward nothing; inline: bridge two interfaces and drop what is blocked. */
  mode: z.enum(['monitor', 'inline']),
  /**
   * monitor: one or more interfaces. inline: the bridge's two ports, as
   * {"outside": NAME, "inside": NAME}, or as a list of two names: the first
   * outside, the second inside. Kept as a list, outside first.
   */
  interfaces: z
    .union([z.array(interfaceName).min(1), z.strictObject({ outside: interfaceName, inside: interfaceName })], {
      error: 'expected a list of interface names, or {"outside": NAME, "inside": NAME}',
    })
    .transform((v) => (Array.isArray(v) ? v : [v.outside, v.inside])),
  /**
   * inline: which frames network_transit judges. "inbound": those arriving on
   * the outside port (traffic entering the protected network); frames from
   * inside are forwarded unjudged (counted in moat_passed_unjudged_total).
   * "both": every frame, from either port. Monitor mode judges every frame it
   * sees (a mirror port does not say which side a frame came from).
   */
  judge: z.enum(['inbound', 'both']).default('inbound'),
  /** Rules from files (file mode); absent with `controlPlane`, which sends them. */
  rules: z
    .strictObject({
      /** The account-level network_transit entrypoint (ruleset JSON as the API returns it). */
      account: filePath,
      /** The zone-level entrypoint, run after the account's. */
      zone: filePath.optional(),
      /** Managed rulesets (JSON with their ids) that execute rules of the entrypoints run. */
      managed: z.array(filePath).default([]),
    })
    .optional(),
  /**
   * Rules, managed rulesets and lists from the control plane over its channel
   * (README "Connect a daemon"): instead of `rules` and `lists`.
   */
  controlPlane: z
    .strictObject({
      /**
       * The control plane's channel: ws://HOST:PORT or wss://HOST:PORT (the path
       * /moat/channel is added when absent); or a list of replicas' URLs, tried
       * in turn (README "Running the control plane highly available").
       */
      url: z.union([channelUrlSchema, z.array(channelUrlSchema).min(1, 'give at least one URL').max(MAX_CONTROL_PLANE_URLS, `at most ${MAX_CONTROL_PLANE_URLS} URLs`)]),
      /** The daemon's token (`moat daemons create` prints it); or tokenFile. */
      token: z.string().min(1).max(200).optional(),
      /** A file holding the token (0600, owned by the daemon's user): what a service should use. */
      tokenFile: filePath.optional(),
      /** PEM file of the CA that signed the control plane's certificate, for wss:// with a private CA. */
      ca: filePath.optional(),
      /** Where the last applied bundle is kept (created 0700): the daemon enforces it when it starts without its control plane. */
      stateDir: filePath,
      /** Seconds between status messages, and a third of the silence that marks the connection dead; default: what the control plane's welcome says (10). */
      heartbeatSeconds: z.number().min(0.05).max(3600).optional(),
      /** Longest wait between reconnection attempts, seconds (back-off from 1 s, doubling, jittered). */
      maxBackoffSeconds: z.number().min(0.1).max(3600).default(30),
    })
    .optional(),
  /**
   * Inline mode with `controlPlane`, before any bundle is there (none cached,
   * the control plane not reached yet): false forwards nothing; true forwards
   * everything unjudged.
   */
  failOpen: z.boolean().default(false),
  /** List contents by name: { "svc.malware": "/etc/moat/lists/malware.txt" }. */
  lists: z.record(listName, filePath).default({}),
  geoip: z
    .strictObject({
      country: filePath.optional(),
      asn: filePath.optional(),
    })
    .default({}),
  colo: z.strictObject({ name: z.string().optional(), region: z.string().optional() }).default({}),
  capture: z
    .strictObject({
      /**
       * "ring": batched AF_PACKET rings read in place by packet worker threads
       * (the default); "libpcap": one frame at a time through libpcap (cap),
       * needed for `filter`. Absent: "ring", or "libpcap" with a filter, or when
       * the ring engine cannot run here (said in the start log). See the
       * daemon's start (src/daemon/capture-plan.ts).
       */
      engine: z.enum(['ring', 'libpcap']).optional(),
      /**
       * Packet worker threads (ring engine): each reads every interface through
       * a PACKET_FANOUT_HASH group, so a flow stays on one worker. Absent: one per
       * core, at most the interfaces' RX queues (a veth has one).
       */
      workers: z.number().int().min(1).max(256).optional(),
      /** Kernel ring per interface, bytes (ring engine: split between the workers). Default 128 MiB: cap's slots are 64 KiB each (snaplen 65535). */
      ringBytes: z.number().int().min(1 << 20).max(1 << 30).default(128 << 20),
      /** Ring engine: bytes per ring slot; a longer frame is counted as truncated and never forwarded cut. Default 2048 (MTU 1500 with VLAN tags). */
      slotBytes: z.number().int().min(256).max(65536).default(2048),
      /** Ring engine: most frames handed to a worker at once (a lone frame is never held back to fill one). */
      batchMax: z.number().int().min(1).max(1024).default(64),
      /** BPF filter applied in the kernel (libpcap engine only); empty: every frame. */
      filter: z.string().default(''),
      /**
       * Thread priorities (Linux nice, -20..19; lower runs first): `packet`, the
       * ring engine's packet workers (the libpcap engine's packet loop, the main
       * thread, is left at 0), default 0: raised (e.g. -10, needs root or
       * CAP_SYS_NICE, else they keep 0, said in the log and moat_thread_nice)
       * they preempt the traffic's sender at each frame and run batches of one:
       * the inline bench measured 10.1 us a frame at 50k/s and loss above 50k/s
       * at -10, against 4.5 us and no loss to 400k/s at 0 (quiet, same run);
       * `background`, the bundle loader and intake threads, default 10.
       */
      priority: z
        .strictObject({ packet: z.number().int().min(-20).max(19).default(0), background: z.number().int().min(-20).max(19).default(10) })
        .default({ packet: 0, background: 10 }),
      /**
       * CPU affinity (ring engine; Linux CPU numbers, as `taskset -c` and
       * /proc/cpuinfo give them): `packet`, the CPUs of the packet workers,
       * worker i pinned to packet[i mod n] (the workers default to one per
       * CPU given, at most the RX queues); `background`, where every other
       * thread of the daemon runs (the main thread with the channel, the
       * bundle loader and intake, node's and V8's helper threads). Giving
       * both keeps a swap's work off the packet cores: on the 2-core bench
       * machine, with the control plane on the background CPU, the packet
       * worker's longest pause during updates fell to its own steps
       * (README, "Connect a daemon"). Absent: threads run where the kernel
       * puts them.
       */
      cpus: z
        .strictObject({
          packet: z.array(z.number().int().min(0).max(1023)).min(1).max(256),
          background: z.array(z.number().int().min(0).max(1023)).min(1).max(1024).optional(),
        })
        .optional(),
    })
    .default({ ringBytes: 128 << 20, slotBytes: 2048, batchMax: 64, filter: '', priority: { packet: 0, background: 10 } }),
  metrics: z
    .strictObject({
      /** Address of the Prometheus and health endpoints; loopback by default. */
      listen: hostPort.default('127.0.0.1:9490'),
      enabled: z.boolean().default(true),
    })
    .default({ listen: '127.0.0.1:9490', enabled: true }),
  log: z
    .strictObject({
      level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'),
      /** Log a line per dropped packet (rate-limited to 100 per second). */
      drops: z.boolean().default(false),
    })
    .default({ level: 'info', drops: false }),
  /** What to do with a packet whose evaluation throws: the packet is counted either way. */
  onError: z.enum(['pass', 'drop']).default('pass'),
  /** What to do with a frame whose IP header cannot be read. */
  undecodable: z.enum(['pass', 'drop']).default('pass'),
  /** A rule reading GeoIP data or a list the configuration does not give: log it (warn) or refuse the bundle (error). */
  missingData: z.enum(['warn', 'error']).default('warn'),
  /** Optional: write dropped packets to a size-capped, rotating pcap file. */
  dropCapture: z
    .strictObject({
      path: filePath,
      /** Bytes per file before rotating. Default 64 MiB. */
      maxBytes: z.number().int().min(4096).default(64 << 20),
      /** Files kept: path, path.1, ... path.(files-1). */
      files: z.number().int().min(1).max(100).default(4),
    })
    .optional(),
  /**
   * Verify the TCP/UDP checksum of 1 in N forwarded frames (inline), counted in
   * moat_checksum_sampled_total and moat_bad_checksum_sampled_total; 0: off.
   * Bad ones are usually an end host's checksum offload on a veth lab.
   */
  checksumSample: z.number().int().min(0).max(1_000_000).default(1000),
  /**
   * Size limits of the files the daemon reads, MiB: a larger file (or a
   * device, a FIFO) is refused with its read error before it is read.
   */
  limits: z
    .strictObject({
      listMiB: z.number().int().min(1).max(2047).default(256),
      geoipMiB: z.number().int().min(1).max(2047).default(512),
      rulesMiB: z.number().int().min(1).max(2047).default(16),
    })
    .default({ listMiB: 256, geoipMiB: 512, rulesMiB: 16 }),
  /** Reload when the ruleset, list or GeoIP files change (SIGHUP always reloads). */
  watch: z.boolean().default(true),
});

/** A validated, frozen daemon configuration. Paths are absolute. */
export type DaemonConfig = Readonly<z.infer<typeof schema>>;

function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null) {
    for (const k of Object.keys(v)) deepFreeze((v as Record<string, unknown>)[k]);
    Object.freeze(v);
  }
  return v;
}

/** Problems a configuration error lists; the rest are counted. */
export const MAX_REPORTED_ISSUES = 10;

/**
 * A union's failure, as the problems of the branch the value was shaped for:
 * a list of interfaces with a number in it says `interfaces.1: expected
 * string`, not zod's bare "Invalid input". A value of neither shape keeps
 * the union's own message.
 */
function expandUnions(issues: readonly z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  return issues.flatMap((i) => {
    if (i.code !== 'invalid_union') return [i];
    // A branch whose only problem is the value's type at its root is a branch for another shape.
    const shaped = i.errors.filter((b) => !(b.length === 1 && b[0]!.code === 'invalid_type' && b[0]!.path.length === 0));
    if (shaped.length !== 1) return [i];
    return expandUnions(shaped[0]!.map((sub) => ({ ...sub, path: [...i.path, ...sub.path] })));
  });
}

/** Validates a parsed configuration object; `file` names it in errors and anchors relative paths. */
export function validateDaemonConfig(raw: unknown, file = '<config>'): DaemonConfig {
  const r = schema.safeParse(raw);
  if (!r.success) {
    const issues = expandUnions(r.error.issues);
    // The first few problems: a value repeated wrong 100,000 times is one line, not megabytes.
    const lines = issues.slice(0, MAX_REPORTED_ISSUES).map((i) => {
      // Keys come from the file: quoted cut and escaped, like any input a message echoes.
      const key = i.path.length === 0 ? '(top level)' : i.path.map((p) => (typeof p === 'string' && !/^[A-Za-z0-9_.$-]{1,80}$/.test(p) ? quoteInput(p) : String(p))).join('.');
      const msg = i.code === 'unrecognized_keys' ? `unknown key${i.keys.length > 1 ? 's' : ''} ${i.keys.map((k) => quoteInput(k)).join(', ')}` : escapeControls(i.message);
      return `${key}: ${msg}`;
    });
    if (issues.length > MAX_REPORTED_ISSUES) lines.push(`and ${issues.length - MAX_REPORTED_ISSUES} more problems`);
    const first = issues[0]!;
    throw new MoatError('CONFIG_INVALID', `${file}: ${lines.join('; ')}`, {
      file,
      pointer: '/' + first.path.map(String).join('/'),
    });
  }
  const c = r.data;
  if (c.mode === 'inline' && c.interfaces.length !== 2) {
    throw new MoatError('CONFIG_INVALID', `${file}: interfaces: inline mode bridges exactly two interfaces, not ${c.interfaces.length}`, {
      file,
      pointer: '/interfaces',
    });
  }
  const given = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>) : {};
  const sides = !Array.isArray(given.interfaces);
  if (new Set(c.interfaces).size !== c.interfaces.length) {
    throw new MoatError('CONFIG_INVALID', `${file}: interfaces: ${sides ? 'outside and inside name the same interface' : 'an interface is listed twice'}`, { file, pointer: sides ? '/interfaces/inside' : '/interfaces' });
  }
  if (c.mode === 'monitor') {
    // A mirror port delivers both directions mixed: there is no outside to name, no inbound to judge alone.
    if (sides) {
      throw new MoatError('CONFIG_INVALID', `${file}: interfaces: outside and inside name the ports of an inline bridge; monitor mode takes a list of interfaces (it judges every frame it sees, in both directions)`, { file, pointer: '/interfaces' });
    }
    if (given.judge === 'inbound') {
      throw new MoatError('CONFIG_INVALID', `${file}: judge: "inbound" is for inline mode; monitor mode judges every frame it sees, in both directions (a mirror port does not say which side a frame came from): remove judge or give "both"`, { file, pointer: '/judge' });
    }
  }
  const cap = c.capture;
  if (cap.filter !== '' && cap.engine === 'ring') {
    throw new MoatError('CONFIG_INVALID', `${file}: capture.engine: the ring engine takes no BPF filter; give "engine": "libpcap" with capture.filter, or remove the filter`, { file, pointer: '/capture/engine' });
  }
  if (cap.priority.packet > cap.priority.background) {
    throw new MoatError('CONFIG_INVALID', `${file}: capture.priority: packet (${cap.priority.packet}) is above background (${cap.priority.background}): the packet threads would lose the CPU to the daemon's own update work; give packet a nice value at most background's`, { file, pointer: '/capture/priority/packet' });
  }
  const libpcap = cap.engine === 'libpcap' || (cap.engine === undefined && cap.filter !== '');
  if (libpcap && cap.workers !== undefined) {
    throw new MoatError('CONFIG_INVALID', `${file}: capture.workers: packet workers are the ring engine's; the libpcap engine${cap.engine === undefined ? ' (chosen for capture.filter)' : ''} reads on the main thread: remove workers`, { file, pointer: '/capture/workers' });
  }
  if (cap.cpus !== undefined) {
    if (libpcap) {
      throw new MoatError('CONFIG_INVALID', `${file}: capture.cpus: CPU affinity is the ring engine's (its packet workers); the libpcap engine${cap.engine === undefined ? ' (chosen for capture.filter)' : ''} reads on the main thread: remove cpus, or pin the whole process with taskset`, { file, pointer: '/capture/cpus' });
    }
    for (const key of ['packet', 'background'] as const) {
      const list = cap.cpus[key] ?? [];
      const twice = list.findIndex((cpu, i) => list.indexOf(cpu) !== i);
      if (twice >= 0) throw new MoatError('CONFIG_INVALID', `${file}: capture.cpus.${key}: CPU ${list[twice]} is named twice`, { file, pointer: `/capture/cpus/${key}/${twice}` });
    }
    const shared = (cap.cpus.background ?? []).findIndex((cpu) => cap.cpus!.packet.includes(cpu));
    if (shared >= 0) {
      throw new MoatError('CONFIG_INVALID', `${file}: capture.cpus: CPU ${cap.cpus.background![shared]} is both a packet and a background CPU; the point of pinning is to keep the daemon's other work off the packet CPUs: name each CPU once (or leave background out)`, { file, pointer: `/capture/cpus/background/${shared}` });
    }
  }
  if (c.controlPlane !== undefined) {
    const both = ['rules', 'lists'].filter((k) => given[k] !== undefined);
    if (both.length > 0) {
      throw new MoatError('CONFIG_INVALID', `${file}: controlPlane and ${both.join(' and ')}: give one or the other: with controlPlane, rules and lists come from the control plane`, { file, pointer: `/${both[0]}` });
    }
    const cp = c.controlPlane;
    if ((cp.token === undefined) === (cp.tokenFile === undefined)) {
      throw new MoatError('CONFIG_INVALID', `${file}: controlPlane: give exactly one of token and tokenFile${cp.token === undefined ? '' : ', not both'}`, { file, pointer: '/controlPlane' });
    }
    const urls = controlPlaneUrls(cp.url);
    const plain = urls.find((u) => !u.startsWith('wss:'));
    if (cp.ca !== undefined && plain !== undefined) {
      throw new MoatError('CONFIG_INVALID', `${file}: controlPlane.ca: a CA is for a wss:// URL; ${quoteInput(plain)} is not one`, { file, pointer: '/controlPlane/ca' });
    }
    // The same replica twice would be tried twice in a row, as if it were two.
    const twice = urls.findIndex((u, i) => urls.findIndex((v) => new URL(v).href === new URL(u).href) !== i);
    if (twice >= 0) {
      throw new MoatError('CONFIG_INVALID', `${file}: controlPlane.url: ${quoteInput(urls[twice]!)} is listed twice`, { file, pointer: `/controlPlane/url/${twice}` });
    }
  } else if (c.rules === undefined) {
    throw new MoatError('CONFIG_INVALID', `${file}: neither rules nor controlPlane: give rules (ruleset files) or controlPlane (a control plane to take them from)`, { file, pointer: '/rules' });
  }
  // Relative paths are relative to the config file's folder.
  const base = file.startsWith('<') ? process.cwd() : dirname(resolve(file));
  const abs = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  if (c.rules !== undefined) {
    c.rules.account = abs(c.rules.account);
    if (c.rules.zone !== undefined) c.rules.zone = abs(c.rules.zone);
    c.rules.managed = c.rules.managed.map(abs);
  }
  if (c.controlPlane !== undefined) {
    const cp = c.controlPlane;
    cp.stateDir = abs(cp.stateDir);
    if (cp.tokenFile !== undefined) cp.tokenFile = abs(cp.tokenFile);
    if (cp.ca !== undefined) cp.ca = abs(cp.ca);
  }
  for (const k of Object.keys(c.lists)) c.lists[k] = abs(c.lists[k]!);
  if (c.geoip.country !== undefined) c.geoip.country = abs(c.geoip.country);
  if (c.geoip.asn !== undefined) c.geoip.asn = abs(c.geoip.asn);
  if (c.dropCapture !== undefined) c.dropCapture.path = abs(c.dropCapture.path);
  // The readers of lists, GeoIP databases and rules files apply these from now on.
  setFileLimits({ list: c.limits.listMiB * 1024 * 1024, geoip: c.limits.geoipMiB * 1024 * 1024, rules: c.limits.rulesMiB * 1024 * 1024 });
  return deepFreeze(c);
}

/** Reads, parses (JSON with comments) and validates a daemon configuration file. */
export function loadDaemonConfig(file: string): DaemonConfig {
  let text: string;
  try {
    text = readRegularFile(file, 'config', 'configuration file').toString('utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new MoatError('CONFIG_READ', `${file}: cannot read: ${code === 'ENOENT' ? 'no such file' : (code ?? (err as Error).message)}`, { file, cause: err });
  }
  let stripped: string;
  try {
    stripped = stripJsonComments(text);
  } catch (err) {
    if (!(err instanceof UnterminatedComment)) throw err;
    const p = position(text, err.offset);
    throw new MoatError('CONFIG_INVALID', `${file}:${p.line}:${p.column}: ${err.message}`, { file, line: p.line });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(stripped);
  } catch (err) {
    const m = /position (\d+)/.exec((err as Error).message);
    const at = m === null ? '' : (() => {
      const p = position(text, Number(m[1]));
      return `:${p.line}:${p.column}`;
    })();
    throw new MoatError('CONFIG_INVALID', `${file}${at}: ${escapeControls((err as Error).message)}`, { file, cause: err });
  }
  return validateDaemonConfig(raw, file);
}
