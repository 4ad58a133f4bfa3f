// Deprecation notices: every address in a pool's legacy notification_email
// gets one notice (naming its pools) per interval, a day by default, through
// the outbox (here the .eml spool, read back with mailparser); when every pool
// of the account has an empty notification_email, the notices stop.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { simpleParser } from 'mailparser';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createMailer, DeliveryWorker, DeprecationNotices } from '../../src/notify/index.js';
import { newId } from '../../src/store/index.js';
import { notifyFixture } from './support.js';

const H = 3_600_000;
let f: ReturnType<typeof notifyFixture>;
let pools: { accountId: string; poolId: string; poolName: string; notificationEmail: string }[];
let worker: DeliveryWorker;

beforeEach(() => {
  f = notifyFixture();
  pools = [];
  worker = new DeliveryWorker({
    store: f.asyncStore,
    mailer: createMailer({ spoolDir: join(f.dir, 'mail-spool'), from: 'moat@example.com' }),
    clock: f.clock,
    deprecation: new DeprecationNotices(f.asyncStore, { legacyPools: () => pools }),
    deprecationCheckMs: 60_000,
  });
});
afterEach(async () => {
  await worker.stop();
  f.dispose();
});

/** The notices in the spool, as [to, subject, text]. */
async function spooled(): Promise<[string, string, string][]> {
  const dir = join(f.dir, 'mail-spool');
  let files: string[] = [];
  try {
    files = readdirSync(dir);
  } catch {
    return [];
  }
  const mails = await Promise.all(files.map((name) => simpleParser(readFileSync(join(dir, name)))));
  return mails.map((m) => [(m.to as { text: string }).text, m.subject ?? '', m.text ?? ''] as [string, string, string]).sort();
}

describe('deprecation notices of notification_email', () => {
  it('tells each address once a day, naming its pools, until no pool has a notification_email', async () => {
    pools = [
      { accountId: f.accountId, poolId: newId(), poolName: 'web', notificationEmail: 'a@example.com, b@example.com' },
      { accountId: f.accountId, poolId: newId(), poolName: 'api', notificationEmail: 'A@example.com' },
    ];
    expect(await worker.runOnce()).toBe(2);
    const first = await spooled();
    expect(first.map(([to, subject]) => [to, subject])).toEqual([
      ['a@example.com', '[Moat] Action needed: notification_email is deprecated (2 pools)'],
      ['b@example.com', '[Moat] Action needed: notification_email is deprecated (1 pool)'],
    ]);
    expect(first[0]![2]).toContain('pools api, web of account');
    expect(first[0]![2]).toContain('set notification_email to "" on every pool');
    // Within the day: nothing more.
    f.clock.advance(23 * H);
    expect(await worker.runOnce()).toBe(0);
    // A day on: again.
    f.clock.advance(H);
    expect(await worker.runOnce()).toBe(2);
    expect(await spooled()).toHaveLength(4);
    // The account moved off notification_email: no more notices, ever.
    pools = pools.map((p) => ({ ...p, notificationEmail: '' }));
    for (let day = 1; day <= 3; day++) {
      f.clock.advance(24 * H);
      expect(await worker.runOnce()).toBe(0);
    }
    expect(await spooled()).toHaveLength(4);
    expect(f.store.db.prepare("SELECT count(*) AS n FROM alert_history WHERE alert_type = 'notification_email_deprecation' AND outcome = 'delivered'").get()).toEqual({ n: 4 });
  });

  it('takes its interval from the configuration', async () => {
    pools = [{ accountId: f.accountId, poolId: newId(), poolName: 'web', notificationEmail: 'a@example.com' }];
    const hourly = new DeprecationNotices(f.asyncStore, { legacyPools: () => pools }, H);
    expect(await hourly.run(f.clock.t)).toBe(1);
    expect(await hourly.run(f.clock.t + H - 1)).toBe(0);
    expect(await hourly.run(f.clock.t + H)).toBe(1);
  });
});
