// The daemon's bundle intake thread (node:worker_threads): parses a large
// message of the control channel, checks a bundle and writes its files to the
// state directory, off the packet loop, and answers with the small result
// (bundle-intake.ts starts it and speaks to it).

import { parentPort } from 'node:worker_threads';
import { BundleCache } from './bundle-cache.js';
import { intakeMessage, type IntakeRequest, type IntakeResult } from './bundle-intake.js';

const port = parentPort;
if (port === null) throw new Error('intake-worker.js runs as a worker thread (see bundle-intake.ts)');
port.on('message', (req: IntakeRequest) => {
  const text = Buffer.from(req.bytes).toString('utf8');
  // The state directory exists (the source opened it); the cache here only writes files into it.
  void intakeMessage(text, new BundleCache(req.stateDir)).then(
    (result) => port.postMessage({ id: req.id, result }),
    (err: unknown) => port.postMessage({ id: req.id, result: { kind: 'protocol', why: `intake failed: ${(err as Error).message}` } satisfies IntakeResult }),
  );
});
