// Public face of the control plane's HTTP API: the composition root of its
// services and runners, the fastify server, and what the operator commands
// reuse (the rulesets service, the account deployment reader, limits).
export { buildServer, BASE_PATH, type ServerOptions } from './server.js';
export { createServices, DEFAULT_MAIL_FROM, type Services, type ServicesOptions, type NotifyOptions } from './services.js';
export { Runners, type Runner, type RunnerLogger } from './runner.js';
export { ok, fail, type Envelope } from './envelope.js';
export { DEFAULT_API_LIMITS, type ApiLimits } from './limits.js';
export { DEFAULT_AUTH_LIMIT, FailureLimiter, addressKey, type AuthLimitOptions } from './auth-limit.js';
export { ApiErrors } from './api-error.js';
export { RulesetService, PHASES, canonicalPhase, type RulesetView } from './rulesets-service.js';
export { ListService } from './lists-service.js';
export { readAccountDeployment, type AccountDeployment } from './account-deployment.js';
export { ChannelHub, type HubOptions } from './channel-hub.js';
export { SqliteChangeFeed, type ChangeFeed } from './change-feed.js';
export { LoadBalancingService, DEFAULT_MIN_INTERVAL, type LoadBalancingOptions } from './load-balancing-service.js';
