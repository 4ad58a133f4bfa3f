// Public face of the control plane's HTTP API.
export { buildServer, BASE_PATH, type ServerOptions, type ApiContext } from './server.js';
export { ok, fail, type Envelope } from './envelope.js';
export { DEFAULT_API_LIMITS, type ApiLimits } from './limits.js';
export { ApiErrors } from './api-error.js';
export { RulesetService, PHASES, canonicalPhase, type RulesetView } from './rulesets-service.js';
export { readAccountDeployment, type AccountDeployment } from './account-deployment.js';
