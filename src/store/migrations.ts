// The schema, as an ordered list of migrations. A migration is applied once, in
// a transaction, and recorded in `user_version`; never edit one that shipped,
// append a new one.

/** Migrations in order; migration N (1-based) brings the schema to version N. */
export const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE accounts (
    id TEXT PRIMARY KEY,
    created_on TEXT NOT NULL
  ) STRICT;
  CREATE TABLE zones (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    created_on TEXT NOT NULL
  ) STRICT;
  CREATE TABLE users (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE COLLATE NOCASE,
    created_on TEXT NOT NULL
  ) STRICT;
  -- Keys are stored as scrypt hashes with a per-key salt; the key itself is shown once.
  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    salt BLOB NOT NULL,
    hash BLOB NOT NULL,
    hint TEXT NOT NULL,
    created_on TEXT NOT NULL,
    revoked_on TEXT
  ) STRICT;
  CREATE INDEX api_keys_user ON api_keys(user_id);
  CREATE TABLE user_accounts (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    PRIMARY KEY (user_id, account_id)
  ) STRICT, WITHOUT ROWID;
  CREATE TABLE user_zones (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    zone_id TEXT NOT NULL REFERENCES zones(id),
    PRIMARY KEY (user_id, zone_id)
  ) STRICT, WITHOUT ROWID;

  -- A ruleset and its versions. Managed rulesets belong to no account and no zone.
  -- last_version is the highest number ever given, so a deleted number is never reused.
  CREATE TABLE rulesets (
    id TEXT PRIMARY KEY,
    account_id TEXT REFERENCES accounts(id),
    zone_id TEXT REFERENCES zones(id),
    kind TEXT NOT NULL,
    phase TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    latest_version INTEGER NOT NULL,
    last_version INTEGER NOT NULL,
    created_on TEXT NOT NULL
  ) STRICT;
  CREATE INDEX rulesets_account ON rulesets(account_id);
  CREATE INDEX rulesets_zone ON rulesets(zone_id);
  -- At most one entrypoint per phase and level (the API answers 20217 before this fires).
  CREATE UNIQUE INDEX rulesets_one_entrypoint ON rulesets(ifnull(account_id, ''), ifnull(zone_id, ''), phase)
    WHERE kind IN ('root', 'zone');
  CREATE TABLE ruleset_versions (
    ruleset_id TEXT NOT NULL REFERENCES rulesets(id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    description TEXT NOT NULL,
    last_updated TEXT NOT NULL,
    rules TEXT NOT NULL,
    PRIMARY KEY (ruleset_id, version)
  ) STRICT, WITHOUT ROWID;
  -- What the latest version of each ruleset refers to: lists by name and rulesets
  -- by execute rules. Kept in step with latest_version; used to refuse deletes.
  CREATE TABLE ruleset_list_refs (
    ruleset_id TEXT NOT NULL REFERENCES rulesets(id) ON DELETE CASCADE,
    list_name TEXT NOT NULL,
    PRIMARY KEY (ruleset_id, list_name)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX ruleset_list_refs_name ON ruleset_list_refs(list_name);
  CREATE TABLE ruleset_execute_refs (
    ruleset_id TEXT NOT NULL REFERENCES rulesets(id) ON DELETE CASCADE,
    target_id TEXT NOT NULL,
    target_version INTEGER,
    PRIMARY KEY (ruleset_id, target_id)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX ruleset_execute_refs_target ON ruleset_execute_refs(target_id);

  -- Account IP lists and their items; sort_key orders items by address then mask.
  CREATE TABLE lists (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_on TEXT NOT NULL,
    modified_on TEXT NOT NULL,
    UNIQUE (account_id, name)
  ) STRICT;
  CREATE TABLE list_items (
    id TEXT PRIMARY KEY,
    list_id TEXT NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
    ip TEXT NOT NULL,
    sort_key BLOB NOT NULL,
    comment TEXT,
    created_on TEXT NOT NULL,
    modified_on TEXT NOT NULL,
    UNIQUE (list_id, ip)
  ) STRICT;
  CREATE INDEX list_items_order ON list_items(list_id, sort_key);
  -- Asynchronous bulk operations on list items; the payload is kept until the
  -- operation ends so that a restart resumes pending work.
  CREATE TABLE bulk_operations (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    list_id TEXT NOT NULL,
    op TEXT NOT NULL,
    payload TEXT,
    status TEXT NOT NULL,
    error TEXT,
    created_on TEXT NOT NULL,
    completed TEXT
  ) STRICT;
  CREATE INDEX bulk_operations_pending ON bulk_operations(status, created_on);
  -- Operator-loaded managed lists ($svc.*), one row per entry.
  CREATE TABLE managed_list_entries (
    name TEXT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (name, entry)
  ) STRICT, WITHOUT ROWID;
  CREATE TABLE managed_lists (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    num_items INTEGER NOT NULL,
    modified_on TEXT NOT NULL
  ) STRICT;
  `,
  // 2: rules are stored once per rule version instead of once per ruleset
  // version. A version keeps [rule id, rule version] pairs; adding one rule to
  // a ruleset of 190 rules then writes ~9 KB instead of ~57 KB, and commits of
  // large rows were the cost of writes (28 KB rows: 393 commits/s; 8 KB: 1,587).
  `
  CREATE TABLE ruleset_rules (
    ruleset_id TEXT NOT NULL REFERENCES rulesets(id) ON DELETE CASCADE,
    rule_id TEXT NOT NULL,
    rule_version INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (ruleset_id, rule_id, rule_version)
  ) STRICT;
  -- A random token per version row: a version number given again after a
  -- rollback (a dry run) gets a new token, so caches keyed by it cannot go stale.
  ALTER TABLE ruleset_versions ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
  INSERT OR IGNORE INTO ruleset_rules (ruleset_id, rule_id, rule_version, body)
    SELECT v.ruleset_id, json_extract(r.value, '$.id'), CAST(json_extract(r.value, '$.version') AS INTEGER), r.value
    FROM ruleset_versions v, json_each(v.rules) r;
  UPDATE ruleset_versions SET rules = (
    SELECT json_group_array(json_array(id, ver)) FROM (
      SELECT json_extract(r.value, '$.id') AS id, CAST(json_extract(r.value, '$.version') AS INTEGER) AS ver
      FROM json_each(ruleset_versions.rules) r ORDER BY r.key
    )
  );
  `,
  // 3: API tokens (Authorization: Bearer). A token is 40 random characters,
  // stored as its SHA-256 (tokens are random, not passwords: no salt or slow
  // hash needed), scoped to some of its user's accounts (no rows: all of them)
  // and to reading or editing.
  `
  CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    hash BLOB NOT NULL UNIQUE,
    read_only INTEGER NOT NULL,
    created_on TEXT NOT NULL,
    revoked_on TEXT
  ) STRICT;
  CREATE INDEX api_tokens_user ON api_tokens(user_id);
  CREATE TABLE api_token_accounts (
    token_id TEXT NOT NULL REFERENCES api_tokens(id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    PRIMARY KEY (token_id, account_id)
  ) STRICT, WITHOUT ROWID;
  `,
  // 4: API keys verified with a fast keyed hash. Keys are long random
  // strings, not passwords: HMAC-SHA256 under a per-installation secret (kept
  // here, in a file that is owner-only) is enough, and scrypt made every
  // wrong key cost ~60 ms of the event loop. Rows written before keep
  // scheme 'scrypt' until their key is next used (then re-hashed: the key is
  // needed to compute its HMAC). The hash index lets a key be looked up
  // without first looking up its email, so a wrong key costs the same
  // whether or not the email exists.
  `
  ALTER TABLE api_keys ADD COLUMN scheme TEXT NOT NULL DEFAULT 'scrypt';
  CREATE INDEX api_keys_hash ON api_keys(hash);
  CREATE TABLE auth_secret (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    secret BLOB NOT NULL
  ) STRICT;
  `,
  // 5: daemons of the control channel (#17). A daemon's token is "moatd_" and
  // 40 random characters, stored as its SHA-256 (as API tokens are). Fleet
  // status lives here, not only in the hub's memory, so that \`moat daemons
  // list\` (another process) and several control planes see the same. The
  // generation columns count content changes of lists (a trigger on
  // modified_on), so the hub can tell a list changed without reading it, even
  // for two changes within one millisecond.
  `
  CREATE TABLE daemons (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    zone_id TEXT REFERENCES zones(id),
    name TEXT NOT NULL,
    hash BLOB NOT NULL UNIQUE,
    created_on TEXT NOT NULL,
    revoked_on TEXT,
    connected INTEGER NOT NULL DEFAULT 0,
    connected_since TEXT,
    disconnected_at TEXT,
    remote_address TEXT,
    moat_version TEXT,
    digest TEXT,
    account_version TEXT,
    zone_version TEXT,
    runs TEXT NOT NULL DEFAULT '[]',
    applied_on TEXT,
    last_rejection TEXT,
    counters TEXT,
    last_seen TEXT,
    UNIQUE (account_id, name)
  ) STRICT;
  ALTER TABLE lists ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
  CREATE TRIGGER lists_generation AFTER UPDATE OF modified_on ON lists
    BEGIN UPDATE lists SET generation = generation + 1 WHERE id = NEW.id; END;
  ALTER TABLE managed_lists ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
  CREATE TRIGGER managed_lists_generation AFTER UPDATE OF modified_on ON managed_lists
    BEGIN UPDATE managed_lists SET generation = generation + 1 WHERE name = NEW.name; END;
  `,
  // 6: notifications (#18): account notification policies and webhook
  // destinations (alerting v3), the durable outbox the health listener writes
  // in the transaction of each health edge, open incidents (so a recovery's
  // END carries the correlation id of its START), the delivery history, and
  // when each legacy notification_email address was last told of its deprecation.
  // An outbox row is one notification to one target; its id is the
  // Standard Webhooks webhook-id, stable across retries. lease_owner and
  // lease_until_ms let several workers (replicas, #20) share the outbox:
  // a row is claimed by setting both, and an expired lease is claimable again.
  `
  CREATE TABLE alert_policies (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    alert_type TEXT NOT NULL,
    alert_interval TEXT,
    filters TEXT,
    mechanisms TEXT NOT NULL,
    created TEXT NOT NULL,
    modified TEXT NOT NULL
  ) STRICT;
  CREATE INDEX alert_policies_account ON alert_policies(account_id, alert_type);
  CREATE TABLE alert_webhooks (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    url TEXT NOT NULL,
    secret TEXT,
    type TEXT NOT NULL,
    created_at TEXT NOT NULL,
    last_success TEXT,
    last_failure TEXT
  ) STRICT;
  CREATE INDEX alert_webhooks_account ON alert_webhooks(account_id);
  CREATE TABLE alert_outbox (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    policy_id TEXT,
    event_id TEXT NOT NULL,
    mechanism_type TEXT NOT NULL,
    target TEXT NOT NULL,
    payload TEXT NOT NULL,
    created TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_ms INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until_ms INTEGER,
    last_error TEXT,
    done_at TEXT
  ) STRICT;
  CREATE INDEX alert_outbox_due ON alert_outbox(status, next_attempt_ms);
  CREATE TABLE alert_incidents (
    account_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    correlation_id TEXT NOT NULL,
    PRIMARY KEY (account_id, subject)
  ) STRICT, WITHOUT ROWID;
  CREATE TABLE alert_history (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    policy_id TEXT,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    alert_type TEXT NOT NULL,
    alert_body TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    mechanism_type TEXT NOT NULL,
    sent TEXT NOT NULL,
    outcome TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    status_code INTEGER,
    error TEXT
  ) STRICT;
  CREATE INDEX alert_history_account ON alert_history(account_id, sent);
  -- When each legacy address was last sent a deprecation notice (at most one per interval).
  CREATE TABLE alert_deprecation_notices (
    account_id TEXT NOT NULL,
    address TEXT NOT NULL COLLATE NOCASE,
    last_sent_ms INTEGER NOT NULL,
    PRIMARY KEY (account_id, address)
  ) STRICT, WITHOUT ROWID;
  `,
  // 7: load balancer pools and monitors (#18), kept as their API bodies (JSON)
  // beside the columns the code selects on, and the health the monitor
  // derives: one row per monitored origin (its state machine, reloaded on a
  // restart) and per pool, and the edges it records (health_events). The
  // origin key is (pool, name): Cloudflare's recovery notices match an earlier
  // alert on the same pool and endpoint name.
  `
  CREATE TABLE lb_monitors (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    body TEXT NOT NULL,
    created_on TEXT NOT NULL,
    modified_on TEXT NOT NULL
  ) STRICT;
  CREATE INDEX lb_monitors_account ON lb_monitors(account_id);
  CREATE TABLE lb_pools (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    name TEXT NOT NULL,
    monitor_id TEXT REFERENCES lb_monitors(id),
    body TEXT NOT NULL,
    created_on TEXT NOT NULL,
    modified_on TEXT NOT NULL
  ) STRICT;
  CREATE INDEX lb_pools_account_name ON lb_pools(account_id, name, id);
  CREATE INDEX lb_pools_monitor ON lb_pools(monitor_id);
  CREATE TABLE lb_origin_health (
    pool_id TEXT NOT NULL REFERENCES lb_pools(id) ON DELETE CASCADE,
    origin_name TEXT NOT NULL,
    address TEXT NOT NULL,
    health TEXT,
    ups INTEGER NOT NULL DEFAULT 0,
    downs INTEGER NOT NULL DEFAULT 0,
    failure_reason TEXT NOT NULL DEFAULT '',
    response_code INTEGER,
    rtt_ms REAL,
    checked_on TEXT,
    PRIMARY KEY (pool_id, origin_name)
  ) STRICT;
  CREATE TABLE lb_pool_health (
    pool_id TEXT PRIMARY KEY REFERENCES lb_pools(id) ON DELETE CASCADE,
    health TEXT
  ) STRICT;
  CREATE TABLE health_events (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    pool_id TEXT NOT NULL,
    event_source TEXT NOT NULL,
    origin_name TEXT,
    origin_address TEXT,
    old_health TEXT,
    new_health TEXT NOT NULL,
    reason TEXT NOT NULL,
    at TEXT NOT NULL
  ) STRICT;
  CREATE INDEX health_events_account_at ON health_events(account_id, at);
  `,
];
