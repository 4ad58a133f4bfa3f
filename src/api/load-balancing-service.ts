// The Load Balancing API's behaviour, independent of HTTP (#18): monitors and
// pools with Cloudflare's fields and defaults, validated whole (every error at
// once, with its JSON pointer), the pools' read-only health fields from the
// health monitor's latest results, pool health in the reference's shape, and
// the two pagination styles of the pools listing and bulk update.

import { readFileSync } from 'node:fs';
import type { MoatError } from '../errors/index.js';
import { isWellFormedEmail, type LoadBalancingRepo, type LoadBalancingStore, type MonitorRow, type OriginHealthRow, type PoolRow } from '../store/index.js';
import { ApiErrors, apiError, invalidField } from './api-error.js';
import { isObject, unknownFields } from './request.js';

/** Monitor types; icmp_ping and udp_icmp need raw sockets (see rawSocketsAllowed). */
export const MONITOR_TYPES = ['http', 'https', 'tcp', 'smtp', 'icmp_ping', 'udp_icmp'] as const;
/** Pool regions (check_regions), as Cloudflare names them. */
const REGIONS = ['WNAM', 'ENAM', 'WEU', 'EEU', 'NSAM', 'SSAM', 'OC', 'ME', 'NAF', 'SAF', 'SAS', 'SEAS', 'NEAS', 'CHINA', 'ALL_REGIONS'];
const STEERING = ['random', 'hash', 'least_outstanding_requests', 'least_connections'];
const POOL_NAME = /^[A-Za-z0-9_-]{1,100}$/;
const MAX_TEXT = 1000;
const MAX_ORIGINS = 1000;
/** `expected_codes`: "2xx", "200", or a list such as "200, 302". */
const EXPECTED_CODES = /^\s*([1-5](xx|[0-9]{2}))(\s*[, ]\s*[1-5](xx|[0-9]{2}))*\s*$/;

/** Settings of the service (an operator's `moat serve` options). */
export interface LoadBalancingOptions {
  /** Shortest monitor interval accepted, in seconds (`--monitor-min-interval`, default 10). */
  minIntervalSeconds?: number | undefined;
  /** Whether this process may open raw sockets (icmp monitors); default: probed from the process's capabilities. */
  rawSockets?: boolean | undefined;
}

/** The default shortest interval (Cloudflare's Enterprise minimum). */
export const DEFAULT_MIN_INTERVAL = 10;

/**
 * Whether this process has CAP_NET_RAW (bit 13 of its effective capabilities;
 * root has it unless dropped): what an ICMP probe needs.
 */
export function rawSocketsAllowed(): boolean {
  try {
    const status = readFileSync('/proc/self/status', 'utf8');
    const m = /^CapEff:\s*([0-9a-f]+)$/m.exec(status);
    if (m === null) return false;
    return (BigInt('0x' + m[1]!) & (1n << 13n)) !== 0n;
  } catch {
    return false;
  }
}

function throwAll(errors: MoatError[]): void {
  if (errors.length > 0) throw new ApiErrors(errors);
}

/** A page request: offset and limit, whichever style the query used. */
export interface PageRequest {
  offset: number;
  limit: number;
  style: 'page' | 'offset' | 'none';
  page: number;
}

type Body = Record<string, unknown>;

/** The Load Balancing API over one database. */
export class LoadBalancingService {
  readonly minInterval: number;
  private readonly rawSockets: boolean;

  constructor(
    /** The repository the API reads and writes through. */
    private readonly repo: LoadBalancingRepo,
    options: LoadBalancingOptions = {},
    /** The synchronous repository of the same SQLite database (tests), when the store is SQLite's. */
    private readonly sqlite?: LoadBalancingStore,
  ) {
    this.minInterval = options.minIntervalSeconds ?? DEFAULT_MIN_INTERVAL;
    this.rawSockets = options.rawSockets ?? rawSocketsAllowed();
  }

  /** SQLite only (tests): the synchronous repository of the same database; throws on another backend. */
  get store(): LoadBalancingStore {
    if (this.sqlite === undefined) throw new Error('loadBalancing.store exists only on SQLite stores; use the Store\'s asynchronous repositories');
    return this.sqlite;
  }

  // ---- monitors

  /** A monitor body with every field checked and every default filled (`base`: the current body, for PATCH). */
  private monitorBody(raw: unknown, base: Body | undefined): Body {
    if (!isObject(raw)) throw invalidField('', 'the body must be a JSON object');
    const errors: MoatError[] = [];
    const known = ['type', 'interval', 'timeout', 'retries', 'expected_codes', 'expected_body', 'path', 'port', 'method', 'header', 'follow_redirects', 'allow_insecure', 'probe_zone', 'consecutive_up', 'consecutive_down', 'description'];
    // Read-only fields a client sends back after a GET are ignored, as on Cloudflare.
    const input = { ...raw };
    for (const k of ['id', 'created_on', 'modified_on']) delete input[k];
    unknownFields(input, known, '', errors);
    const b: Body = { ...(base ?? {}), ...input };
    const type = b.type ?? 'http';
    if (typeof type !== 'string' || !(MONITOR_TYPES as readonly string[]).includes(type)) {
      errors.push(invalidField('/type', `type must be one of ${MONITOR_TYPES.join(', ')}`));
      throwAll(errors);
    }
    const http = type === 'http' || type === 'https';
    const int = (k: string, def: number, min: number, max: number, why = '') => {
      const v = b[k] ?? def;
      if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) errors.push(invalidField(`/${k}`, `${k} must be an integer from ${min} to ${max}${why}`));
      return v as number;
    };
    const str = (k: string, def: string, max = MAX_TEXT) => {
      const v = b[k] ?? def;
      if (typeof v !== 'string' || v.length > max) errors.push(invalidField(`/${k}`, `${k} must be a string of at most ${max} characters`));
      return v as string;
    };
    const bool = (k: string, def: boolean) => {
      const v = b[k] ?? def;
      if (typeof v !== 'boolean') errors.push(invalidField(`/${k}`, `${k} must be true or false`));
      return v as boolean;
    };
    const interval = int('interval', 60, this.minInterval, 3600, ` (this server's minimum is ${this.minInterval} s: moat serve --monitor-min-interval)`);
    const timeout = int('timeout', 5, 1, 10);
    const retries = int('retries', 2, 0, 5);
    if (typeof interval === 'number' && typeof timeout === 'number' && timeout > interval && interval >= this.minInterval) {
      errors.push(invalidField('/timeout', `timeout (${timeout} s) must not be longer than interval (${interval} s)`));
    }
    const port = int('port', 0, 0, 65535);
    if ((type === 'tcp' || type === 'smtp' || type === 'udp_icmp') && port === 0) errors.push(invalidField('/port', `port is required for a ${type} monitor`));
    const expectedCodes = str('expected_codes', http ? '200' : '');
    if (http && typeof expectedCodes === 'string' && !EXPECTED_CODES.test(expectedCodes)) {
      errors.push(invalidField('/expected_codes', `expected_codes must be a code ("200"), a class ("2xx") or a list ("200, 302"), not ${JSON.stringify(expectedCodes)}`));
    }
    const method = str('method', type === 'tcp' ? 'connection_established' : http ? 'GET' : '', 30);
    if (http && typeof method === 'string' && !['GET', 'HEAD'].includes(method)) errors.push(invalidField('/method', 'method must be GET or HEAD for an HTTP monitor'));
    if (type === 'tcp' && method !== 'connection_established') errors.push(invalidField('/method', 'method must be connection_established for a tcp monitor'));
    const path = str('path', http ? '/' : '');
    if (http && typeof path === 'string' && !path.startsWith('/')) errors.push(invalidField('/path', 'path must start with /'));
    const header = b.header ?? {};
    if (!isObject(header)) errors.push(invalidField('/header', 'header must be an object of header names to arrays of values'));
    else {
      for (const [k, v] of Object.entries(header)) {
        if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(k)) errors.push(invalidField(`/header/${k}`, `"${k}" is not a header name`));
        else if (k.toLowerCase() === 'user-agent') errors.push(invalidField(`/header/${k}`, 'User-Agent cannot be overridden'));
        else if (!Array.isArray(v) || v.some((x) => typeof x !== 'string' || /[\r\n\0]/.test(x))) errors.push(invalidField(`/header/${k}`, 'a header value must be an array of strings without line breaks'));
      }
    }
    const out: Body = {
      type,
      description: str('description', ''),
      interval,
      timeout,
      retries,
      port,
      method,
      path,
      header,
      expected_codes: expectedCodes,
      expected_body: str('expected_body', ''),
      follow_redirects: bool('follow_redirects', false),
      allow_insecure: bool('allow_insecure', false),
      probe_zone: str('probe_zone', ''),
      consecutive_up: int('consecutive_up', 0, 0, 100),
      consecutive_down: int('consecutive_down', 0, 0, 100),
    };
    throwAll(errors);
    if ((type === 'icmp_ping' || type === 'udp_icmp') && !this.rawSockets) {
      throw apiError('LB_ICMP_UNAVAILABLE', `a ${type} monitor needs raw sockets (CAP_NET_RAW), which this moat serve process does not have: grant it (setcap cap_net_raw+ep on node, or run as root) or use a tcp monitor`, {
        pointer: '/type',
      });
    }
    return out;
  }

  private monitorView(m: MonitorRow): Body {
    return { id: m.id, created_on: m.createdOn, modified_on: m.modifiedOn, ...m.body };
  }

  async createMonitor(accountId: string, raw: unknown): Promise<Body> {
    return this.monitorView(await this.repo.createMonitor(accountId, this.monitorBody(raw, undefined)));
  }

  async monitors(accountId: string): Promise<Body[]> {
    return (await this.repo.monitors(accountId)).map((m: MonitorRow) => this.monitorView(m));
  }

  async monitor(accountId: string, id: string): Promise<Body> {
    return this.monitorView(await this.repo.monitorOrThrow(accountId, id));
  }

  /** PUT (`merge` false: the body replaces, defaults fill the rest) or PATCH (merged over the current body). */
  async updateMonitor(accountId: string, id: string, raw: unknown, merge: boolean): Promise<Body> {
    return this.monitorView(await this.repo.updateMonitor(accountId, id, (current) => this.monitorBody(raw, merge ? current : undefined)));
  }

  async deleteMonitor(accountId: string, id: string): Promise<{ id: string }> {
    await this.repo.deleteMonitor(accountId, id);
    return { id };
  }

  // ---- pools

  private poolBody(raw: unknown, base: Body | undefined): { name: string; monitorId: string | null; body: Body } {
    if (!isObject(raw)) throw invalidField('', 'the body must be a JSON object');
    const errors: MoatError[] = [];
    const input = { ...raw };
    for (const k of ['id', 'created_on', 'modified_on', 'healthy', 'disabled_at', 'networks']) delete input[k];
    const known = ['name', 'description', 'enabled', 'minimum_origins', 'monitor', 'monitor_group', 'origins', 'notification_email', 'notification_filter', 'check_regions', 'origin_steering', 'load_shedding', 'latitude', 'longitude'];
    unknownFields(input, known, '', errors);
    const b: Body = { ...(base ?? {}), ...input };
    const name = b.name;
    if (name === undefined) errors.push(invalidField('/name', 'name is required'));
    else if (typeof name !== 'string' || !POOL_NAME.test(name)) errors.push(invalidField('/name', `name must be 1 to 100 of A-Z a-z 0-9 - _, not ${JSON.stringify(name)}`));
    const description = b.description ?? '';
    if (typeof description !== 'string' || description.length > MAX_TEXT) errors.push(invalidField('/description', `description must be a string of at most ${MAX_TEXT} characters`));
    const enabled = b.enabled ?? true;
    if (typeof enabled !== 'boolean') errors.push(invalidField('/enabled', 'enabled must be true or false'));
    const minimum = b.minimum_origins ?? 1;
    if (typeof minimum !== 'number' || !Number.isInteger(minimum) || minimum < 0 || minimum > MAX_ORIGINS) errors.push(invalidField('/minimum_origins', `minimum_origins must be an integer from 0 to ${MAX_ORIGINS}`));
    const monitor = b.monitor ?? null;
    if (monitor !== null && (typeof monitor !== 'string' || !/^[0-9a-f]{32}$/.test(monitor))) errors.push(invalidField('/monitor', 'monitor must be a monitor id (32 hex characters) or null'));
    const email = b.notification_email ?? '';
    if (typeof email !== 'string') errors.push(invalidField('/notification_email', 'notification_email must be a string: comma-separated addresses, or "" for none'));
    else if (email !== '') {
      const bad = email.split(',').map((a) => a.trim()).filter((a) => !isWellFormedEmail(a));
      if (bad.length > 0) errors.push(invalidField('/notification_email', `notification_email must be comma-separated email addresses; not an address: ${bad.map((a) => JSON.stringify(a)).join(', ')}`));
    }
    const filter = b.notification_filter ?? null;
    if (filter !== null) {
      if (!isObject(filter)) errors.push(invalidField('/notification_filter', 'notification_filter must be an object or null'));
      else {
        unknownFields(filter, ['origin', 'pool'], '/notification_filter', errors);
        for (const k of ['origin', 'pool'] as const) {
          const f = filter[k];
          if (f === undefined || f === null) continue;
          if (!isObject(f)) {
            errors.push(invalidField(`/notification_filter/${k}`, `notification_filter.${k} must be an object or null`));
            continue;
          }
          unknownFields(f, ['disable', 'healthy'], `/notification_filter/${k}`, errors);
          if (f.disable !== undefined && typeof f.disable !== 'boolean') errors.push(invalidField(`/notification_filter/${k}/disable`, 'disable must be true or false'));
          if (f.healthy !== undefined && f.healthy !== null && typeof f.healthy !== 'boolean') errors.push(invalidField(`/notification_filter/${k}/healthy`, 'healthy must be true, false or null'));
        }
      }
    }
    const regions = b.check_regions ?? null;
    if (regions !== null && (!Array.isArray(regions) || regions.some((r) => typeof r !== 'string' || !REGIONS.includes(r)))) {
      errors.push(invalidField('/check_regions', `check_regions must be null or an array of ${REGIONS.join(', ')}`));
    }
    const steering = b.origin_steering ?? { policy: 'random' };
    if (!isObject(steering) || (steering.policy !== undefined && !STEERING.includes(steering.policy as string))) {
      errors.push(invalidField('/origin_steering', `origin_steering must be {"policy": ${STEERING.map((s) => `"${s}"`).join(' | ')}}`));
    }
    for (const k of ['latitude', 'longitude'] as const) {
      if (b[k] !== undefined && typeof b[k] !== 'number') errors.push(invalidField(`/${k}`, `${k} must be a number`));
    }
    if (b.load_shedding !== undefined && !isObject(b.load_shedding)) errors.push(invalidField('/load_shedding', 'load_shedding must be an object'));
    if (b.monitor_group !== undefined && typeof b.monitor_group !== 'string') errors.push(invalidField('/monitor_group', 'monitor_group must be a string'));
    const origins = this.origins(b.origins, errors);
    throwAll(errors);
    const body: Body = {
      name,
      description,
      enabled,
      minimum_origins: minimum,
      origins,
      notification_email: email,
      notification_filter: filter,
      check_regions: regions,
      origin_steering: { policy: 'random', ...(steering as Body) },
    };
    if (monitor !== null) body.monitor = monitor;
    for (const k of ['latitude', 'longitude', 'load_shedding', 'monitor_group']) if (b[k] !== undefined) body[k] = b[k];
    return { name: name as string, monitorId: monitor as string | null, body };
  }

  private origins(raw: unknown, errors: MoatError[]): Body[] {
    if (raw === undefined) {
      errors.push(invalidField('/origins', 'origins is required: an array of {name, address}'));
      return [];
    }
    if (!Array.isArray(raw) || raw.length > MAX_ORIGINS) {
      errors.push(invalidField('/origins', `origins must be an array of at most ${MAX_ORIGINS} origins`));
      return [];
    }
    const names = new Set<string>();
    return raw.map((o: unknown, i) => {
      const at = `/origins/${i}`;
      if (!isObject(o)) {
        errors.push(invalidField(at, 'an origin must be an object {name, address, ...}'));
        return {};
      }
      const input = { ...o };
      for (const k of ['healthy', 'failure_reason', 'disabled_at']) delete input[k];
      unknownFields(input, ['name', 'address', 'enabled', 'weight', 'port', 'header', 'virtual_network_id', 'flatten_cname'], at, errors);
      if (typeof o.name !== 'string' || !/^[A-Za-z0-9_.-]{1,100}$/.test(o.name)) errors.push(invalidField(`${at}/name`, 'an origin name is required: 1 to 100 of A-Z a-z 0-9 . - _'));
      else if (names.has(o.name)) errors.push(invalidField(`${at}/name`, `two origins are named "${o.name}": names are unique in a pool`));
      else names.add(o.name);
      if (typeof o.address !== 'string' || !/^[A-Za-z0-9.:_-]{1,253}$/.test(o.address)) errors.push(invalidField(`${at}/address`, 'address is required: an IP address or a hostname'));
      const enabled = o.enabled ?? true;
      if (typeof enabled !== 'boolean') errors.push(invalidField(`${at}/enabled`, 'enabled must be true or false'));
      const weight = o.weight ?? 1;
      if (typeof weight !== 'number' || !(weight >= 0 && weight <= 1)) errors.push(invalidField(`${at}/weight`, 'weight must be a number from 0 to 1'));
      const port = o.port ?? 0;
      if (typeof port !== 'number' || !Number.isInteger(port) || port < 0 || port > 65535) errors.push(invalidField(`${at}/port`, 'port must be an integer from 0 to 65535'));
      const out: Body = { name: o.name, address: o.address, enabled, weight, port };
      if (o.header !== undefined) {
        const h = o.header;
        // Cloudflare documents {"Host": [...]}; "host" is accepted too, and kept as sent.
        const bad = !isObject(h) || Object.entries(h).some(([k, v]) => k.toLowerCase() !== 'host' || !Array.isArray(v) || v.some((x) => typeof x !== 'string' || !/^[A-Za-z0-9.:_-]{1,253}$/.test(x)));
        if (bad) {
          errors.push(invalidField(`${at}/header`, 'an origin header must be {"Host": ["name"]}'));
        }
        out.header = h;
      }
      if (o.virtual_network_id !== undefined) out.virtual_network_id = o.virtual_network_id;
      if (o.flatten_cname !== undefined) out.flatten_cname = o.flatten_cname;
      return out;
    });
  }

  /** The pool as the API returns it: stored body, read-only stamps, and health when known. */
  private async poolView(p: PoolRow): Promise<Body> {
    const health = await this.repo.originHealth(p.id);
    const monitored = p.monitorId !== null && p.body.enabled !== false;
    const origins = (p.body.origins as Body[]).map((o) => {
      const h = monitored && o.enabled !== false ? health.get(o.name as string) : undefined;
      if (h === undefined || h.health === null || h.checkedOn === null || h.address !== o.address) return o;
      return { ...o, healthy: h.health === 'healthy', failure_reason: h.health === 'healthy' ? 'No failures' : h.failureReason };
    });
    const view: Body = { id: p.id, created_on: p.createdOn, modified_on: p.modifiedOn, ...p.body, origins };
    // Unknown (omitted) until an origin has a result since this server started.
    const fresh = [...health.values()].some((h) => h.checkedOn !== null);
    const pool = monitored && fresh ? await this.repo.poolHealth(p.id) : null;
    if (pool !== null) view.healthy = pool === 'healthy';
    return view;
  }

  /** Views of several pools, in order. */
  private async views(rows: PoolRow[]): Promise<Body[]> {
    const out: Body[] = [];
    for (const r of rows) out.push(await this.poolView(r));
    return out;
  }

  async createPool(accountId: string, raw: unknown): Promise<Body> {
    const { name, monitorId, body } = this.poolBody(raw, undefined);
    return this.poolView(await this.repo.createPool(accountId, name, monitorId, body));
  }

  async pool(accountId: string, id: string): Promise<Body> {
    return this.poolView(await this.repo.poolOrThrow(accountId, id));
  }

  /** A page of the account's pools by name, optionally only those using `monitorId`. */
  async pools(accountId: string, page: PageRequest, monitorId: string | null = null): Promise<{ result: Body[]; info: Record<string, unknown> }> {
    const { rows, total } = await this.repo.pools(accountId, page.offset, page.limit, monitorId);
    return { result: await this.views(rows), info: resultInfo(page, rows.length, total) };
  }

  async updatePool(accountId: string, id: string, raw: unknown, merge: boolean): Promise<Body> {
    return this.poolView(await this.repo.updatePool(accountId, id, (current) => this.poolBody(raw, merge ? current.body : undefined)));
  }

  async deletePool(accountId: string, id: string): Promise<{ id: string }> {
    await this.repo.deletePool(accountId, id);
    return { id };
  }

  /** Bulk PATCH: only `notification_email`, on the requested page; returns the pools changed. */
  async bulkEdit(accountId: string, raw: unknown, page: PageRequest): Promise<{ result: Body[]; info: Record<string, unknown> }> {
    if (!isObject(raw)) throw invalidField('', 'the body must be a JSON object: {"notification_email": ""}');
    const errors: MoatError[] = [];
    unknownFields(raw, ['notification_email'], '', errors);
    const email = raw.notification_email;
    if (email === undefined) errors.push(invalidField('/notification_email', 'notification_email is required'));
    else if (email !== '') errors.push(invalidField('/notification_email', 'the bulk update only clears notification_email: send "" (set addresses per pool with PATCH .../pools/{pool_id})'));
    throwAll(errors);
    const rows = await this.repo.bulkSetNotificationEmail(accountId, page.offset, page.limit, '');
    const total = (await this.repo.pools(accountId, 0, 0)).total;
    return { result: await this.views(rows), info: resultInfo(page, rows.length, total) };
  }

  /** Pool health in the shape of cloudflare-go's LoadBalancerPoolHealth: one "PoP" (this server), origins keyed by address. */
  async poolHealth(accountId: string, id: string): Promise<Body> {
    const p = await this.repo.poolOrThrow(accountId, id);
    const health = await this.repo.originHealth(p.id);
    const monitored = p.monitorId !== null && p.body.enabled !== false;
    const origins = (p.body.origins as Body[])
      .filter((o) => monitored && o.enabled !== false)
      .map((o) => ({ [o.address as string]: originHealthView(health.get(o.name as string), o.address as string) }));
    const pool = monitored ? await this.repo.poolHealth(p.id) : null;
    return { pool_id: p.id, pop_health: { moat: { healthy: pool === null ? null : pool === 'healthy', origins } } };
  }
}

function originHealthView(h: OriginHealthRow | undefined, address: string): Body {
  if (h === undefined || h.checkedOn === null || h.address !== address) return { healthy: null, rtt: null, failure_reason: 'No result yet', response_code: null };
  const passing = h.failureReason === '';
  return {
    healthy: h.health === null ? null : h.health === 'healthy',
    rtt: h.rttMs === null ? null : `${h.rttMs.toFixed(1)}ms`,
    failure_reason: passing ? 'No failures' : h.failureReason,
    response_code: h.responseCode,
    checked_on: h.checkedOn,
  };
}

/** result_info in the style the request used (both: count and total_count). */
function resultInfo(page: PageRequest, count: number, total: number): Record<string, unknown> {
  if (page.style === 'offset') return { offset: page.offset, limit: page.limit, count, total_count: total };
  const perPage = page.limit;
  return { page: page.page, per_page: perPage, count, total_count: total, total_pages: Math.ceil(total / perPage) };
}
