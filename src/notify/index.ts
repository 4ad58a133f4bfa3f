// Public face of notify: notification policies and webhook destinations
// (alerting v3), the health event listener that queues notifications in the
// durable outbox, and the delivery worker that sends them (webhooks, email).
export { AlertingStore, FieldErrors, checkWebhook, checkPolicyBody, type PolicyLookups, type CheckedPolicy, type PoolDirectory, type PolicyObject, type WebhookObject, type WebhookInput, type WebhookTarget } from './alerting-store.js';
export { ALERT_TYPES, HEALTH_ALERT, alertType, availableAlerts, type AlertType } from './alert-types.js';
export { Notifier, ALERT_EVENT_START, ALERT_EVENT_END, legacyAddresses, legacyFilterAdmits, type NotificationPayload } from './notifier.js';
export { Outbox, HISTORY_DAYS, type OutboxRow, type AttemptOutcome, type HistoryObject } from './outbox.js';
export { DeliveryWorker, legacyNote, type DeliveryOptions, type DeliveryLogger } from './delivery-worker.js';
export { createMailer, postWebhook, TEST_MESSAGE, WEBHOOK_TIMEOUT_MS, type Mailer, type EmailMessage } from './senders.js';
export { webhookUrlProblem, refusedAddress, systemResolver, type Resolver } from './address-guard.js';
export { RETRY_DELAYS_MS, MAX_ATTEMPTS, JITTER, SYSTEM_CLOCK, retryDelay, parseRetryAfter, type Clock } from './schedule.js';
export { DeprecationNotices, DEPRECATION_ALERT, DEPRECATION_INTERVAL_MS, type LegacyPools } from './deprecation.js';
export { sqliteNotifyRepos } from './sqlite-repos.js';
export { PgAlertingRepo } from './pg-alerting.js';
export { PgOutboxRepo } from './pg-outbox.js';
export { pgNotifyRepos } from './pg-repos.js';
