// A local webhook receiver on 127.0.0.1 for the delivery tests: it records
// every request (headers and raw body), checks cf-webhook-auth and the
// Standard Webhooks signature, and answers as the test sets it: a status
// (with Retry-After), no answer at all, or down (not listening: connection refused).
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  /** Whether webhook-signature verified with the secret (standardwebhooks' verify). */
  signed: boolean;
}

export type Answer = { status: number; retryAfter?: string } | 'hang';

export class Receiver {
  readonly received: Received[] = [];
  answer: Answer = { status: 200 };
  port = 0;
  private server: Server | undefined;
  private readonly hanging: ServerResponse[] = [];
  /** Resolved at each request (tests wait for one). */
  private waiters: (() => void)[] = [];

  constructor(private readonly secret: string) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  /** Listens (on the same port as before, after down()). */
  async up(): Promise<void> {
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        let signed = false;
        try {
          new Webhook(Buffer.from(this.secret, 'utf8'), { format: 'raw' }).verify(body, req.headers as Record<string, string>);
          signed = true;
        } catch {
          signed = false;
        }
        this.received.push({ headers: req.headers, body, signed });
        for (const w of this.waiters.splice(0)) w();
        const a = this.answer;
        if (a === 'hang') {
          this.hanging.push(res);
          return;
        }
        res.writeHead(a.status, a.retryAfter === undefined ? {} : { 'retry-after': a.retryAfter });
        res.end('{}');
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  /** Stops listening: deliveries get connection refused. */
  async down(): Promise<void> {
    for (const r of this.hanging.splice(0)) r.destroy();
    const s = this.server;
    this.server = undefined;
    if (s !== undefined) await new Promise<void>((resolve) => s.close(() => resolve()).closeAllConnections());
  }

  /** Resolves at the next request. */
  next(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }
}
