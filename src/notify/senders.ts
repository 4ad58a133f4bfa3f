// How one notification leaves Moat: webhooks as a JSON POST (node's http
// client, whose per-request lookup refuses private addresses, see
// address-guard.ts) with Cloudflare's `cf-webhook-auth` header and Standard
// Webhooks' id, timestamp and signature; emails by SMTP through nodemailer, or,
// with no SMTP server configured, as .eml files in a spool directory (owner-only)
// that an operator or a local MTA can pick up.

import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import { join } from 'node:path';
import nodemailer from 'nodemailer';
import { Webhook } from 'standardwebhooks';
import { guardedLookup, refusedAddress, urlHost } from './address-guard.js';
import type { AttemptOutcome } from './outbox.js';
import { parseRetryAfter } from './schedule.js';

/** How long a webhook receiver may take to answer (Standard Webhooks advises 15-30 s). */
export const WEBHOOK_TIMEOUT_MS = 15_000;

/** The body of the test POST sent when a destination is created (Cloudflare's own text). */
export const TEST_MESSAGE = {
  text: 'Hello World! This is a test message sent from Moat. If you can see this, your webhook is configured properly.',
};

/** One webhook POST. */
export interface WebhookRequest {
  url: string;
  secret: string | null;
  /** The notification's id: `webhook-id`, the same on every retry. */
  id: string;
  body: string;
  /** Wall-clock seconds for webhook-timestamp (receivers check it against their clock). */
  timestampSeconds: number;
}

/**
 * Sends a webhook and says how it went. Only a 2xx answer is success; a 410
 * gives up (the receiver says the endpoint is gone for good).
 */
export function postWebhook(req: WebhookRequest, allowPrivate: boolean, timeoutMs = WEBHOOK_TIMEOUT_MS): Promise<AttemptOutcome> {
  const url = new URL(req.url);
  const host = urlHost(url);
  if (!allowPrivate && isIP(host) !== 0) {
    const why = refusedAddress(host);
    if (why !== undefined) return Promise.resolve({ ok: false, code: 9403, error: `${host} is a ${why} address` });
  }
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': 'Moat-Notifications/1',
    'webhook-id': req.id,
    'webhook-timestamp': String(req.timestampSeconds),
  };
  if (req.secret !== null) {
    headers['cf-webhook-auth'] = req.secret;
    // The secret is used as raw bytes (Cloudflare secrets are free text, not whsec_ base64).
    headers['webhook-signature'] = new Webhook(Buffer.from(req.secret, 'utf8'), { format: 'raw' }).sign(req.id, new Date(req.timestampSeconds * 1000), req.body);
  }
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve) => {
    let settled = false;
    const done = (o: AttemptOutcome) => {
      if (!settled) {
        settled = true;
        resolve(o);
      }
    };
    const r = send(url, { method: 'POST', headers: { ...headers, 'content-length': String(Buffer.byteLength(req.body)) }, lookup: guardedLookup(allowPrivate), timeout: timeoutMs }, (res) => {
      // The body is not needed; reading it frees the socket.
      res.resume();
      res.on('error', () => undefined);
      const status = res.statusCode ?? 0;
      const retryAfter = res.headers['retry-after'];
      if (status >= 200 && status < 300) return done({ ok: true, statusCode: status });
      done({
        ok: false,
        statusCode: status,
        code: 9400,
        error: `HTTP ${status}`,
        retryAfterMs: parseRetryAfter(Array.isArray(retryAfter) ? retryAfter[0] : retryAfter, Date.now()),
        final: status === 410,
      });
    });
    r.on('timeout', () => r.destroy(Object.assign(new Error(`no answer within ${timeoutMs / 1000} s`), { code: 'ETIMEDOUT' })));
    r.on('error', (err: NodeJS.ErrnoException) => {
      const refused = err.code === 'MOAT_REFUSED_ADDRESS';
      done({ ok: false, code: refused ? 9403 : 9400, error: err.message });
    });
    r.end(req.body);
  });
}

/** One email. */
export interface EmailMessage {
  /** Stable per notification: the Message-ID, and the spool file's name. */
  id: string;
  to: string;
  subject: string;
  text: string;
}

/** Sends emails. */
export interface Mailer {
  send(m: EmailMessage): Promise<AttemptOutcome>;
  close(): void;
}

/** Where emails go: an SMTP server (smtp:// or smtps:// URL) or, without one, a spool directory of .eml files. */
export function createMailer(options: { smtpUrl?: string | undefined; spoolDir: string; from: string; stallMs?: number | undefined }): Mailer {
  const messageId = (id: string) => `<${id}@notifications.moat>`;
  if (options.smtpUrl !== undefined) {
    // stallMs bounds each wait of the exchange (connect, greeting, a silent socket; nodemailer's defaults are 2 min, 30 s
    // and 10 min): the worker sets it to a quarter of its lease, so a stalled server does not keep a send going after
    // another replica took the notification over.
    const stall = options.stallMs;
    const transport = nodemailer.createTransport(stall === undefined ? options.smtpUrl : { url: options.smtpUrl, connectionTimeout: stall, greetingTimeout: stall, socketTimeout: stall });
    return {
      async send(m) {
        try {
          await transport.sendMail({ from: options.from, to: m.to, subject: m.subject, text: m.text, messageId: messageId(m.id) });
          return { ok: true };
        } catch (err) {
          const e = err as { responseCode?: number; message: string };
          return { ok: false, code: 9401, statusCode: e.responseCode, error: e.message };
        }
      },
      close: () => transport.close(),
    };
  }
  const composer = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' });
  return {
    async send(m) {
      try {
        const info = (await composer.sendMail({ from: options.from, to: m.to, subject: m.subject, text: m.text, messageId: messageId(m.id) })) as { message: Buffer };
        mkdirSync(options.spoolDir, { recursive: true, mode: 0o700 });
        // Written whole under a temporary name, then renamed: a reader never sees half a message, and a retry rewrites the same file.
        const file = join(options.spoolDir, `${m.id}.eml`);
        writeFileSync(`${file}.tmp`, info.message, { mode: 0o600 });
        renameSync(`${file}.tmp`, file);
        return { ok: true };
      } catch (err) {
        return { ok: false, code: 9401, error: (err as Error).message };
      }
    },
    close: () => composer.close(),
  };
}
