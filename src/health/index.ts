// Public face of health monitoring (#18): the probe scheduler of `moat serve`
// the probes themselves, and how replicas share them (probe-shares.ts).
export { HealthMonitor, decide, type HealthMonitorOptions, type HealthLogger, type HealthStats } from './health-monitor.js';
export { probe, probeOnce, codeExpected, PROBE_USER_AGENT, type ProbeMonitor, type ProbeOrigin, type ProbeResult } from './probes.js';
export { ProbeShares, shardOf, leaseTimeFor, DEFAULT_PROBE_SHARDS, SHARD_LEASE_PREFIX, REPLICA_LEASE_PREFIX, type ShareTick } from './probe-shares.js';
