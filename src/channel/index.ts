// Public face of the control channel: the protocol both planes speak over one
// WebSocket (messages, validation, close codes); see README "The control
// channel protocol".
export {
  PROTOCOL_VERSION,
  CHANNEL_PATH,
  SUBPROTOCOL,
  HEARTBEAT_SECONDS,
  HELLO_TIMEOUT_SECONDS,
  MAX_DAEMON_MESSAGE,
  CLOSE,
  ProtocolError,
  parseDaemonMessage,
  closeReason,
  helloSchema,
  ackSchema,
  statusSchema,
  countersSchema,
  type Hello,
  type Ack,
  type Status,
  type Counters,
  type DaemonMessage,
  type Welcome,
  type Bundle,
  type BundleList,
  type UpToDate,
  type ControlMessage,
} from './protocol.js';
