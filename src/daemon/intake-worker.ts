// The daemon's bundle intake thread (node:worker_threads): parses a large
// message of the control channel, checks a bundle and writes its files to the
// state directory, off the packet loop, and answers with the small result;
// it also tidies the state directory after a swap (bundle-intake.ts starts it
// and speaks to it).

import { parentPort, workerData } from 'node:worker_threads';
import { setThreadPriority } from '../capture/index.js';
import { BundleCache } from './bundle-cache.js';
import { intakeMessage, type IntakeReply, type IntakeRequest, type IntakeWorkerData } from './bundle-intake.js';

const port = parentPort;
if (port === null) throw new Error('intake-worker.js runs as a worker thread (see bundle-intake.ts)');
// Lowered (always permitted): see bundle-intake.ts's IntakeWorkerData.
setThreadPriority('moat-intake', (workerData as IntakeWorkerData | undefined)?.nice);
port.on('message', (req: IntakeRequest) => {
  // The state directory exists (the source opened it); the cache here only writes files into it, or tidies it.
  const cache = new BundleCache(req.stateDir);
  if ('prune' in req) {
    let pruned: string | null = null;
    try {
      cache.prune(req.prune);
    } catch (err) {
      pruned = (err as Error).message;
    }
    port.postMessage({ id: req.id, pruned } satisfies IntakeReply);
    return;
  }
  const text = Buffer.from(req.bytes).toString('utf8');
  void intakeMessage(text, cache).then(
    (result) => port.postMessage({ id: req.id, result } satisfies IntakeReply),
    (err: unknown) => port.postMessage({ id: req.id, result: { kind: 'protocol', why: `intake failed: ${(err as Error).message}` } } satisfies IntakeReply),
  );
});
