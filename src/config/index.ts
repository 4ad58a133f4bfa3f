// Public face of configuration: the daemon's config schema and loader.
export { channelUrlProblem, controlPlaneUrls, hostPortProblem, loadDaemonConfig, validateDaemonConfig, type DaemonConfig } from './daemon-config.js';
export { stripJsonComments } from './jsonc.js';
