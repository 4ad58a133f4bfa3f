// The daemon's bundle loader thread (node:worker_threads): reads, parses,
// checks and compiles bundles and builds their address tables, off the packet
// loop, and hands each back as data (engine's BundleExporter), the table's
// buffers transferred. worker-loading.ts starts it and speaks to it; a
// message is one load, answered in order.

import { parentPort, workerData } from 'node:worker_threads';
import { setThreadPriority } from '../capture/index.js';
import { BundleExporter, loadErrorData, type BundleFiles } from '../engine/index.js';
import type { LoaderReply, LoaderRequest, LoaderWorkerData } from './worker-loading.js';

const port = parentPort;
if (port === null) throw new Error('loader-worker.js runs as a worker thread (see worker-loading.ts)');
// Lowered (always permitted): a list change's load is hundreds of ms of CPU, to be taken after the packet loop's.
setThreadPriority('moat-loader', (workerData as LoaderWorkerData | undefined)?.nice);
// One exporter for the thread's life: its BundleLoader keeps an unchanged table across loads.
const exporter = new BundleExporter();
port.on('message', (req: LoaderRequest) => {
  let reply: LoaderReply;
  let transfer: ArrayBuffer[] = [];
  try {
    const out = exporter.load(req.files as BundleFiles);
    reply = { id: req.id, ok: true, bundle: out.bundle };
    transfer = out.transfer;
  } catch (err) {
    reply = { id: req.id, ok: false, error: loadErrorData(err) };
  }
  port.postMessage(reply, transfer);
});
