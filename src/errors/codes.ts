// The one numeric error registry. A code here is exactly `errors[].code` in the
// v4 API envelope, the exit status family of the CLI, and what tests assert on.
// Codes are grouped by range per domain and never reused or renumbered:
//   1xxx expression syntax   2xxx expression types and names
//   3xxx packets and captures 4xxx lists and GeoIP data   5xxx configuration   6xxx rulesets
//   7xxx API   8xxx store   9xxx channel/notify
// A few codes are Cloudflare's own (6003 with 6102/6103, 9103, 10000, 10003, 20125, 20217, 7000, 7003):
// clients of Cloudflare's API match on them, so Moat answers with the same numbers.

/** One registry entry: a stable name, an HTTP status for the API, and a one-line summary. */
export interface ErrorDef {
  readonly code: number;
  readonly status: number;
  readonly summary: string;
}

function def(code: number, status: number, summary: string): ErrorDef {
  return Object.freeze({ code, status, summary });
}

/** Every error Moat can report, keyed by a stable symbolic name. */
export const ERRORS = Object.freeze({
  // 1xxx: expression syntax (lexing and parsing)
  EXPR_UNEXPECTED_CHAR: def(1001, 400, 'unexpected character'),
  EXPR_UNTERMINATED_STRING: def(1002, 400, 'unterminated string literal'),
  EXPR_BAD_ESCAPE: def(1003, 400, 'invalid escape sequence in string'),
  EXPR_BAD_INT: def(1004, 400, 'invalid integer literal'),
  EXPR_INT_OVERFLOW: def(1005, 400, 'integer literal out of 64-bit range'),
  EXPR_BAD_IP: def(1006, 400, 'invalid IP address'),
  EXPR_BAD_CIDR: def(1007, 400, 'invalid CIDR prefix length'),
  EXPR_CIDR_HOST_BITS: def(1008, 400, 'CIDR has host bits set'),
  EXPR_BAD_RANGE: def(1009, 400, 'invalid range'),
  EXPR_RANGE_OUTSIDE_SET: def(1010, 400, 'CIDR or range allowed only inside a set'),
  EXPR_COMMA_IN_SET: def(1011, 400, 'set items are separated by spaces, not commas'),
  EXPR_UNEXPECTED_TOKEN: def(1012, 400, 'unexpected token'),
  EXPR_UNCLOSED_PAREN: def(1013, 400, 'missing closing parenthesis'),
  EXPR_UNEXPECTED_END: def(1014, 400, 'unexpected end of expression'),
  EXPR_UNCLOSED_SET: def(1015, 400, 'missing closing brace of set'),
  EXPR_BAD_LIST_NAME: def(1016, 400, 'invalid list name'),
  EXPR_TOO_LONG: def(1017, 400, 'expression too long'),
  EXPR_TOO_DEEP: def(1018, 400, 'expression nested too deeply'),
  EXPR_BAD_OPERATOR: def(1019, 400, 'unknown operator'),
  EXPR_BAD_RAW_STRING: def(1020, 400, 'invalid raw string'),
  EXPR_TRAILING_INPUT: def(1021, 400, 'unexpected input after expression'),
  EXPR_BAD_BYTES: def(1022, 400, 'invalid byte string literal'),
  EXPR_BAD_REGEX: def(1023, 400, 'invalid regular expression'),
  EXPR_EMPTY: def(1024, 400, 'empty expression'),

  // 2xxx: expression names and types (checking)
  EXPR_UNKNOWN_FIELD: def(2001, 400, 'unknown field'),
  EXPR_UNSUPPORTED_OP: def(2002, 400, 'operator not supported for this field type'),
  EXPR_TYPE_MISMATCH: def(2003, 400, 'value does not match the field type'),
  EXPR_MISSING_OP: def(2004, 400, 'comparison needs an operator and a value'),
  EXPR_BOOL_WITH_OP: def(2005, 400, 'boolean field is used bare, without an operator'),
  EXPR_UNKNOWN_LIST: def(2006, 400, 'unknown list'),
  EXPR_LIST_TYPE: def(2007, 400, 'lists hold IP addresses only'),
  EXPR_UNKNOWN_FUNCTION: def(2008, 400, 'unknown function'),
  EXPR_BAD_ARGUMENTS: def(2009, 400, 'invalid function arguments'),
  EXPR_NOT_BOOLEAN: def(2010, 400, 'expression is not a boolean test'),

  // 3xxx: capture files and packets
  CAPTURE_BAD_MAGIC: def(3001, 400, 'not a pcap or pcapng file'),
  CAPTURE_TRUNCATED: def(3002, 400, 'capture file ends inside a record or block'),
  CAPTURE_BAD_LENGTH: def(3003, 400, 'record or block length out of range'),
  CAPTURE_BAD_BLOCK: def(3004, 400, 'malformed pcapng block'),
  CAPTURE_UNKNOWN_INTERFACE: def(3005, 400, 'packet refers to an undeclared interface'),
  CAPTURE_READ: def(3006, 500, 'cannot read capture file'),
  CAPTURE_UNSUPPORTED_LINK: def(3007, 400, 'unsupported link type'),
  CAPTURE_WRITE: def(3008, 500, 'cannot write capture file'),
  CAPTURE_NO_DEVICE: def(3009, 400, 'no such network interface'),
  CAPTURE_PERMISSION: def(3010, 403, 'capture needs CAP_NET_RAW (and CAP_NET_ADMIN)'),
  CAPTURE_BAD_FILTER: def(3011, 400, 'invalid capture filter'),
  CAPTURE_OPEN: def(3012, 500, 'cannot open live capture'),

  // 4xxx: list and GeoIP data files
  LIST_BAD_ENTRY: def(4001, 400, 'invalid list entry'),
  LIST_READ: def(4002, 500, 'cannot read list file'),
  GEOIP_READ: def(4003, 500, 'cannot read GeoIP database'),
  GEOIP_BAD_LAYOUT: def(4004, 400, 'unsupported GeoIP database layout'),

  // 5xxx: configuration
  CONFIG_READ: def(5001, 400, 'cannot read configuration file'),
  CONFIG_INVALID: def(5002, 400, 'invalid configuration'),
  CLI_USAGE: def(5010, 400, 'invalid command-line usage'),
  MISSING_DATA: def(5011, 400, 'a rule needs GeoIP data or a list the configuration does not give'),
  DAEMON_PRECHECK: def(5012, 400, 'the daemon cannot start on this host as configured'),
  RELOAD_NEEDS_RESTART: def(5013, 400, 'a configuration change takes effect only after a restart'),
  CLI_SYSTEM: def(5014, 500, 'a file or system operation of a command failed'),

  // 6xxx: rulesets and bundles
  RULESET_BAD_JSON: def(6001, 400, 'ruleset is not valid JSON'),
  RULESET_BAD_SHAPE: def(6002, 400, 'ruleset does not have the expected shape'),
  RULESET_BAD_ACTION: def(6007, 400, 'unknown or unsupported rule action'),
  RULESET_BAD_PHASE: def(6004, 400, 'ruleset is not for the network_transit phase'),
  RULESET_TOO_MANY_LISTS: def(6005, 400, 'more lists referenced than the engine supports'),
  RULESET_BAD_EXECUTE: def(6006, 400, 'an execute rule names a missing or unusable managed ruleset'),
  BUNDLE_LOADER_FAILED: def(6008, 500, 'the daemon\'s bundle loader (its worker thread) stopped during a load; the reload is rejected'),
  PACKET_WORKER_FAILED: def(6009, 500, 'a packet worker thread could not start, prepare a bundle, or stopped during a swap; the bundle is rejected for all workers'),

  // 7xxx: the HTTP API (routing, requests, authentication, resources)
  API_NO_ROUTE: def(7000, 404, 'no route for that URI'),
  API_METHOD_NOT_ALLOWED: def(7001, 405, 'method not allowed for this route'),
  API_NOT_IMPLEMENTED: def(7002, 501, 'not implemented yet (the message names the feature)'),
  API_BAD_IDENTIFIER: def(7003, 400, 'could not route: the object identifier is invalid'),
  API_MALFORMED_JSON: def(7010, 400, 'request body is not valid JSON'),
  API_BODY_TOO_LARGE: def(7011, 413, 'request body too large'),
  API_UNSUPPORTED_MEDIA: def(7012, 415, 'request body must be application/json'),
  API_INVALID_FIELD: def(7013, 400, 'a field of the request body is missing or invalid'),
  API_BAD_QUERY: def(7014, 400, 'a query parameter is invalid'),
  API_URI_TOO_LONG: def(7015, 414, 'request URI too long (a path segment is longer than 200 characters)'),
  API_BAD_REQUEST: def(7016, 400, 'malformed HTTP request (bad request line, header or URL encoding)'),
  API_HEADERS_TOO_LARGE: def(7017, 431, 'request headers too large'),
  API_REQUEST_TIMEOUT: def(7018, 408, 'request not received in time'),
  API_BAD_ENCODING: def(7019, 400, 'request body is not valid UTF-8, or a string in it has a lone surrogate'),
  SERVE_TLS: def(7096, 500, 'moat serve cannot use the TLS certificate or key (unreadable, not PEM, or not a pair)'),
  SERVE_LISTEN: def(7097, 500, 'moat serve cannot listen on the address (in use, not local, or privileged)'),
  SERVE_START: def(7098, 500, 'moat serve could not start (the message says why)'),
  API_INTERNAL: def(7099, 500, 'internal error'),
  AUTH_MISSING_HEADERS: def(6003, 400, 'invalid request headers: X-Auth-Email / X-Auth-Key missing or malformed'),
  AUTH_BAD_EMAIL_HEADER: def(6102, 400, 'invalid format for X-Auth-Email header (in error_chain of 6003)'),
  AUTH_BAD_KEY_HEADER: def(6103, 400, 'invalid format for X-Auth-Key header (in error_chain of 6003)'),
  AUTH_BAD_AUTHORIZATION_HEADER: def(6111, 400, 'invalid format for the Authorization header (in error_chain of 6003)'),
  AUTH_INVALID_TOKEN: def(9109, 403, 'invalid API token: unknown or revoked'),
  AUTH_UNKNOWN_KEY: def(9103, 403, 'unknown X-Auth-Key or X-Auth-Email'),
  AUTH_FORBIDDEN: def(10000, 403, 'authentication error: no access to this account or zone'),
  RULESET_NOT_FOUND: def(7200, 404, 'ruleset not found'),
  RULESET_VERSION_NOT_FOUND: def(7201, 404, 'ruleset version not found'),
  RULE_NOT_FOUND: def(7202, 404, 'rule not found'),
  ENTRYPOINT_NOT_FOUND: def(10003, 404, 'could not find entrypoint ruleset in the phase'),
  RULESET_KIND_LIMIT: def(20217, 400, 'exceeded maximum number of entrypoint rulesets for the phase'),
  RULE_BLANK_EXPRESSION: def(20125, 400, 'the expression cannot be blank'),
  RULESET_BAD_KIND: def(7203, 400, 'kind not allowed here'),
  RULESET_BAD_PHASE_NAME: def(7204, 400, 'unknown phase'),
  RULESET_IMMUTABLE: def(7205, 400, 'field cannot be changed after creation'),
  RULESET_MANAGED_READONLY: def(7206, 403, 'managed rulesets cannot be changed through the API'),
  RULESET_IN_USE: def(7207, 400, 'ruleset or version is deployed by an execute rule'),
  RULE_BAD_POSITION: def(7208, 400, 'invalid rule position'),
  RULESET_TOO_MANY_RULES: def(7209, 400, 'too many rules in the ruleset'),
  RULESET_LAST_VERSION: def(7210, 400, 'the only version of a ruleset cannot be deleted; delete the ruleset'),
  RULE_ACTION_REQUIRED: def(7211, 400, 'action is required for action parameters'),
  RULE_DUPLICATE_ID: def(7212, 400, 'two rules have the same id'),
  LIST_NOT_FOUND: def(7300, 404, 'list not found'),
  LIST_NAME_TAKEN: def(7301, 400, 'a list with this name already exists'),
  LIST_IN_USE: def(7302, 400, 'list is referenced by a rule'),
  LIST_BAD_ITEM: def(7303, 400, 'invalid list item'),
  LIST_ITEM_NOT_FOUND: def(7304, 404, 'list item not found'),
  LIST_OPERATION_NOT_FOUND: def(7305, 404, 'bulk operation not found'),
  LIST_TOO_MANY_ITEMS: def(7306, 400, 'the list is at the maximum number of items'),
  LIST_MANAGED_READONLY: def(7307, 403, 'managed lists are loaded by the operator, not through the API'),
  LIST_TOO_MANY: def(7308, 400, 'the account is at the maximum number of lists'),
  USER_BAD_INPUT: def(7400, 400, 'invalid user, account or zone'),
  USER_NOT_FOUND: def(7401, 404, 'user, key or token not found'),
  AUTH_TOKEN_READ_ONLY: def(7402, 403, 'a read-only API token cannot write'),
  AUTH_TOO_MANY_FAILURES: def(7403, 429, 'too many failed authentications from this address; retry after Retry-After seconds'),
  AUTH_LEGACY_BUSY: def(7404, 503, 'a key stored with the old scrypt hash cannot be checked now (server-wide budget spent); retry after Retry-After seconds'),
  DAEMON_NOT_FOUND: def(7500, 404, 'daemon not found'),
  LB_POOL_NOT_FOUND: def(7600, 404, 'load balancer pool not found'),
  LB_MONITOR_NOT_FOUND: def(7601, 404, 'load balancer monitor not found'),
  LB_MONITOR_IN_USE: def(7602, 400, 'the monitor is used by a pool and cannot be deleted'),
  LB_MONITOR_UNKNOWN: def(7603, 400, "a pool's monitor does not exist in the account"),
  LB_ICMP_UNAVAILABLE: def(7604, 400, 'icmp_ping and udp_icmp monitors need raw sockets, which this moat serve process cannot open'),
  ALERT_POLICY_NOT_FOUND: def(7700, 404, 'notification policy not found'),
  ALERT_WEBHOOK_NOT_FOUND: def(7701, 404, 'webhook destination not found'),
  ALERT_WEBHOOK_TEST_FAILED: def(7702, 400, 'the test POST to the webhook failed (the message gives its status code or error)'),
  ALERT_WEBHOOK_URL_REFUSED: def(7703, 400, 'the webhook URL resolves to a loopback, link-local, private or metadata address'),
  ALERT_WEBHOOK_IN_USE: def(7704, 400, 'the webhook destination is used by notification policies'),
  ALERT_UNSUPPORTED_TYPE: def(7705, 400, 'alert type not supported by Moat (see available_alerts)'),

  // 8xxx: the embedded store
  STORE_OPEN: def(8001, 500, 'cannot open the database'),
  STORE_MIGRATION: def(8002, 500, 'database schema migration failed'),
  STORE_BUSY: def(8003, 503, 'the database is busy'),
  STORE_NEWER_SCHEMA: def(8004, 500, 'the database was written by a newer Moat'),
  STORE_NO_DATABASE: def(8005, 404, 'no database in the data directory (only `moat serve` creates one)'),
  STORE_PERMISSIONS: def(8006, 500, 'the data directory or a file in it is open to other users and cannot be made owner-only'),
  // 802x: the PostgreSQL store (#20)
  STORE_BAD_URL: def(8020, 400, 'the database URL is not a postgres:// (or postgresql://) URL'),
  STORE_UNREACHABLE: def(8021, 503, 'the PostgreSQL server cannot be reached, or the connection to it was lost'),
  STORE_LOGIN_REFUSED: def(8022, 500, 'the PostgreSQL server refused the login: user, password or database'),
  // 803x: moving an installation between stores (moat migrate-store)
  STORE_TARGET_NOT_EMPTY: def(8030, 409, 'the target PostgreSQL database already holds Moat data (give --replace-target to replace it)'),
  STORE_SCHEMA_MISMATCH: def(8031, 500, 'the SQLite and PostgreSQL schemas differ: a table or column has no counterpart, or a schema version is not the latest'),
  STORE_COPY_MISMATCH: def(8032, 500, 'the copy does not match its source: a table\'s row count or digest differs'),

  // 93xx: health monitoring
  HEALTH_LISTENER_FAILED: def(9300, 500, 'a health event listener failed: the probe result and its events were rolled back'),
  // 94xx: notification delivery (recorded in the alerting history and the server log)
  NOTIFY_WEBHOOK_FAILED: def(9400, 502, 'a webhook delivery attempt failed (non-2xx status, refused connection, timeout); it is retried'),
  NOTIFY_EMAIL_FAILED: def(9401, 502, 'an email delivery attempt failed (SMTP error or spool write); it is retried'),
  NOTIFY_GAVE_UP: def(9402, 502, 'a notification was given up: every attempt of the retry schedule failed, or the receiver answered 410 Gone'),
  NOTIFY_ADDRESS_REFUSED: def(9403, 502, 'a webhook host resolved to a refused (loopback, link-local, private or metadata) address at delivery'),
  // 95xx: `moat migrate-notifications` (a client of the v4 API)
  MIGRATE_INCOMPLETE: def(9500, 409, 'pools still carry a notification_email after the migration'),
  MIGRATE_API_ERROR: def(9501, 502, 'the API refused or failed a request of the migration'),
});

/** Symbolic error name. */
export type ErrorName = keyof typeof ERRORS;
