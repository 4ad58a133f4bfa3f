// Notification policies, webhook destinations and history (alerting v3) as
// the routes use them. Webhook writes do I/O before they commit: the URL's
// host is resolved and refused when private (unless the operator allows it),
// then a test message is POSTed, and the destination is saved only if the
// receiver answered 2xx, as Cloudflare's "Save and Test" does; a failure
// carries the status code (or the connection error) in its message.

import { MoatError } from '../errors/index.js';
import { checkWebhook, postWebhook, TEST_MESSAGE, webhookUrlProblem, type Resolver, type WebhookInput } from '../notify/index.js';
import { newId, type AlertingRepo } from '../store/index.js';

/** The alerting routes' behaviour. */
export class AlertingService {
  constructor(
    readonly store: AlertingRepo,
    private readonly allowPrivate: boolean,
    private readonly resolver: Resolver | undefined,
  ) {}

  /** Checks the URL and sends the test message; throws 7703 or 7702. */
  private async tryOut(w: WebhookInput, secret: string | null): Promise<void> {
    const problem = await webhookUrlProblem(w.url, this.allowPrivate, this.resolver);
    if (problem !== undefined) {
      if (problem.kind === 'address') {
        throw new MoatError('ALERT_WEBHOOK_URL_REFUSED', `${problem.message}: webhooks go to public addresses only (the operator can allow others with moat serve --allow-private-webhooks)`, { pointer: '/url' });
      }
      throw new MoatError(problem.kind === 'resolve' ? 'ALERT_WEBHOOK_TEST_FAILED' : 'API_INVALID_FIELD', `Webhook test failed: ${problem.message}`, { pointer: '/url' });
    }
    const outcome = await postWebhook({ url: w.url.href, secret, id: newId(), body: JSON.stringify(TEST_MESSAGE), timestampSeconds: Math.floor(Date.now() / 1000) }, this.allowPrivate);
    if (!outcome.ok) {
      const why = outcome.statusCode !== undefined ? ` with status code ${outcome.statusCode}` : `: ${outcome.error ?? 'no answer'}`;
      throw new MoatError(outcome.code === 9403 ? 'ALERT_WEBHOOK_URL_REFUSED' : 'ALERT_WEBHOOK_TEST_FAILED', `Webhook test failed${why}`, { pointer: '/url' });
    }
  }

  /** Creates a destination after a successful test; returns its id. */
  async createWebhook(accountId: string, body: unknown): Promise<string> {
    const w = checkWebhook(body);
    await this.tryOut(w, w.secret === undefined || w.secret === '' ? null : w.secret);
    return await this.store.insertWebhook(accountId, w);
  }

  /** Replaces a destination's name and URL (and secret when given); a changed URL or secret is tested first. */
  async updateWebhook(accountId: string, id: string, body: unknown): Promise<string> {
    const current = await this.store.webhook(accountId, id);
    const w = checkWebhook(body);
    const secret = w.secret === undefined ? await this.store.webhookSecret(accountId, id) : w.secret === '' ? null : w.secret;
    if (w.url.href !== current.url || w.secret !== undefined) await this.tryOut(w, secret);
    await this.store.updateWebhook(accountId, id, w);
    return id;
  }
}
