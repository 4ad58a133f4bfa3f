// The control channel's wire protocol, version 1: the messages a daemon and
// the control plane exchange over one WebSocket, their validation, and the
// close codes. Both planes import it (the daemon's client, the control
// plane's hub); README "The control channel protocol" documents it for third
// parties, and this file is its reference: every message is a JSON object in
// one text frame, with a "type".

import { z } from 'zod';

/** The protocol version this build speaks; a hello with another is closed with CLOSE.UNSUPPORTED_PROTOCOL. */
export const PROTOCOL_VERSION = 1;

/** The path of the channel on the control plane's listener (the API's port). */
export const CHANNEL_PATH = '/moat/channel';

/** The WebSocket subprotocol a client may offer (optional; the hello's `protocol` is what counts). */
export const SUBPROTOCOL = 'moat.channel.v1';

/**
 * Seconds between heartbeats, each way, unless the welcome says otherwise: the
 * control plane pings every interval and the daemon sends its status every
 * interval. A side that hears nothing (message or pong) for 3 intervals
 * closes the connection as dead: 30 s by default.
 */
export const HEARTBEAT_SECONDS = 10;

/** Seconds a client has after connecting to send its hello. */
export const HELLO_TIMEOUT_SECONDS = 10;

/** Largest message a daemon may send (hello, ack, status): bigger is closed with 1009. */
export const MAX_DAEMON_MESSAGE = 64 * 1024;

/**
 * Close codes (RFC 6455 leaves 4000-4999 to applications). The reason text
 * says more; a daemon logs both. For UNAUTHORIZED and REVOKED a daemon waits
 * its longest back-off before trying again: the token will not become valid
 * by retrying.
 */
export const CLOSE = Object.freeze({
  /** Standard: the server shuts down (or restarts); reconnect with back-off. */
  GOING_AWAY: 1001,
  /** Standard: a frame bigger than the receiver accepts. */
  TOO_BIG: 1009,
  /** Standard: the other side failed unexpectedly. */
  INTERNAL: 1011,
  /** Malformed JSON, an unknown type, a message before hello, a field of the wrong shape. */
  PROTOCOL_ERROR: 4000,
  /** The token is unknown (never issued, or malformed). */
  UNAUTHORIZED: 4001,
  /** The token was revoked (also sent to an open connection the moment it is revoked). */
  REVOKED: 4003,
  /** No hello within HELLO_TIMEOUT_SECONDS. */
  HELLO_TIMEOUT: 4004,
  /** The hello's protocol version is not spoken here; the reason lists the versions that are. */
  UNSUPPORTED_PROTOCOL: 4005,
  /** Nothing heard for 3 heartbeat intervals. */
  DEAD: 4008,
  /** The same daemon connected again: the older connection is closed. */
  REPLACED: 4009,
  /** Too many connections, or connections too fast, from one address. */
  TOO_MANY: 4029,
});

/** sha256 hex, lowercase. */
const digest = z.string().regex(/^[0-9a-f]{64}$/, 'a SHA-256 digest: 64 lowercase hex characters');

// ---- Daemon to control plane ----

/** First message of a connection. */
export const helloSchema = z.strictObject({
  type: z.literal('hello'),
  /** PROTOCOL_VERSION of the daemon. */
  protocol: z.number().int().min(1),
  /** The daemon's token, as `moat daemons create` printed it. */
  token: z.string().min(1).max(200),
  /** The daemon's Moat version (package version). */
  moat: z.string().min(1).max(64),
  /** The digest of the bundle the daemon enforces (the `digest` of the bundle message it applied), or null with none. */
  digest: digest.nullable(),
  /** Digests of the list contents the daemon holds in its state directory: those need not travel again. */
  lists: z.array(digest).max(4096).default([]),
});

/** The daemon's answer to a bundle, sent after it was swapped in (and written to the state directory) or rejected. */
export const ackSchema = z.discriminatedUnion('result', [
  z.strictObject({
    type: z.literal('ack'),
    /** The bundle's seq. */
    seq: z.number().int().min(1),
    result: z.literal('applied'),
    digest,
    /** The entrypoints' versions the daemon now runs ("3"), null for a level without an entrypoint. */
    versions: z.strictObject({ account: z.string().max(32).nullable(), zone: z.string().max(32).nullable() }),
  }),
  z.strictObject({
    type: z.literal('ack'),
    seq: z.number().int().min(1),
    result: z.literal('rejected'),
    digest,
    /** The engine's coded errors (at most 100 travel); the running bundle stays in force. */
    errors: z
      .array(z.strictObject({ code: z.number().int(), message: z.string().max(2000), pointer: z.string().max(500).optional() }))
      .max(100),
  }),
]);

/** Counters a daemon reports with each heartbeat: totals since it started. */
export const countersSchema = z.strictObject({
  passed: z.number().int().min(0),
  dropped: z.number().int().min(0),
  undecodable: z.number().int().min(0),
  swaps: z.number().int().min(0),
});

/** The daemon's heartbeat: sent every heartbeat interval. */
export const statusSchema = z.strictObject({
  type: z.literal('status'),
  counters: countersSchema,
});

export type Hello = z.infer<typeof helloSchema>;
export type Ack = z.infer<typeof ackSchema>;
export type Status = z.infer<typeof statusSchema>;
export type Counters = z.infer<typeof countersSchema>;
export type DaemonMessage = Hello | Ack | Status;

// ---- Control plane to daemon ----

/** The answer to a valid hello. */
export interface Welcome {
  type: 'welcome';
  protocol: number;
  daemon: { id: string; name: string; account_id: string; zone_id: string | null };
  /** Heartbeat interval, seconds (HEARTBEAT_SECONDS unless the operator set another). */
  heartbeat_seconds: number;
}

/** A list in a bundle: its contents travel only when the daemon does not hold that digest. */
export interface BundleList {
  /** sha256 hex of the entries joined with "\n" (UTF-8), as the daemon can check. */
  digest: string;
  /** Addresses, CIDRs and `a..b` ranges, one per entry; absent when the daemon holds the digest already. */
  entries?: string[];
}

/**
 * What a daemon runs: the account's network_transit entrypoint, the zone's
 * (for a daemon bound to a zone), the managed rulesets their execute rules
 * run, and every list they name; rulesets in the API's own shape (with
 * expressions), as `moat export` writes them.
 */
export interface Bundle {
  type: 'bundle';
  /** Increases by one per bundle on a connection; the ack names it. */
  seq: number;
  /** Identifies the bundle's whole contents (rulesets and list digests); the daemon's hello gives it back. */
  digest: string;
  account: Record<string, unknown> | null;
  zone: Record<string, unknown> | null;
  managed: Array<Record<string, unknown>>;
  /** Lists by canonical name (`office_blocklist`, `svc.malware`). */
  lists: Record<string, BundleList>;
}

/** The answer to a hello whose digest is the current bundle's. */
export interface UpToDate {
  type: 'up_to_date';
  digest: string;
}

export type ControlMessage = Welcome | Bundle | UpToDate;

/** A message that cannot be read: why, for the close reason (at most 123 bytes go on the wire). */
export class ProtocolError extends Error {
  constructor(
    message: string,
    readonly close: number = CLOSE.PROTOCOL_ERROR,
  ) {
    super(message);
    this.name = 'ProtocolError';
  }
}

const daemonMessage = z.discriminatedUnion('type', [helloSchema, statusSchema, z.looseObject({ type: z.literal('ack') })]);

/** A daemon's message read from a text frame; throws ProtocolError naming what is wrong. */
export function parseDaemonMessage(text: string): DaemonMessage {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new ProtocolError('not JSON');
  }
  const first = daemonMessage.safeParse(json);
  if (!first.success) throw new ProtocolError(issueText(first.error));
  if (first.data.type !== 'ack') return first.data as DaemonMessage;
  const ack = ackSchema.safeParse(json);
  if (!ack.success) throw new ProtocolError(issueText(ack.error));
  return ack.data;
}

function issueText(e: z.ZodError): string {
  const i = e.issues[0];
  if (i === undefined) return 'invalid message';
  const at = i.path.length === 0 ? 'message' : i.path.join('.');
  return `${at}: ${i.message}`;
}

/** A close reason cut to the 123 bytes a close frame carries (RFC 6455 5.5). */
export function closeReason(text: string): string {
  const b = Buffer.from(text, 'utf8');
  if (b.length <= 123) return text;
  let end = 120;
  while (end > 0 && (b[end]! & 0xc0) === 0x80) end--; // do not cut a UTF-8 sequence
  return `${b.subarray(0, end).toString('utf8')}...`;
}
