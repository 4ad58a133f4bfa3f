// Public face of health monitoring (#18): the probe scheduler of `moat serve`
// and the probes themselves.
export { HealthMonitor, decide, type HealthMonitorOptions, type HealthLogger, type HealthStats } from './health-monitor.js';
export { probe, probeOnce, codeExpected, PROBE_USER_AGENT, type ProbeMonitor, type ProbeOrigin, type ProbeResult } from './probes.js';
