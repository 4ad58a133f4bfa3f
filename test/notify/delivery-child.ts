// A delivery worker in a process of its own, over the database in the data
// directory given as argv[2], with the lease of argv[3] ms: the delivery test
// kills it with SIGKILL in the middle of a delivery (run from dist/).
import { join } from 'node:path';
import { DeliveryWorker, createMailer, sqliteNotifyRepos } from '../../src/notify/index.js';
import { Database, SqliteStore } from '../../src/store/index.js';

const [dir, lease] = process.argv.slice(2);
const store = new SqliteStore(Database.open(dir!), (database) => sqliteNotifyRepos(database, { poolExists: () => false }));
const worker = new DeliveryWorker({
  store,
  mailer: createMailer({ spoolDir: join(dir!, 'mail-spool'), from: 'moat@example.com' }),
  leaseMs: Number(lease),
  allowPrivateWebhooks: true,
  pollMs: 50,
});
worker.start();
process.stdout.write(`worker ${worker.owner}\n`);
