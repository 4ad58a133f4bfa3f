// A BatchPortOpener for benchmarks that run the daemon's packet workers
// without interfaces: port "IF" replays MOAT_BENCH_REPLAY_DIR/IF.pcap for
// ever, a batch every MOAT_BENCH_REPLAY_INTERVAL_MS (default 1), as a live
// interface under a steady load would hand them. The packet workers import
// this module by its URL (functions do not cross threads) and read the
// settings from the environment they inherit from the process.

import { join } from 'node:path';
import { ReplayBatchPort, type BatchPortOpener, type ReplayPortOptions } from '../src/capture/index.js';

/** Opens `iface` as a paced, endless replay of its capture file (see the file's header). */
export const openPacedReplayPort: BatchPortOpener = (iface, options) => {
  const dir = process.env.MOAT_BENCH_REPLAY_DIR;
  if (dir === undefined) throw new Error('openPacedReplayPort: MOAT_BENCH_REPLAY_DIR is not set');
  const o: ReplayPortOptions = { ...options, repeat: 1e12, intervalMs: Number(process.env.MOAT_BENCH_REPLAY_INTERVAL_MS ?? 1) };
  return new ReplayBatchPort(join(dir, `${iface}.pcap`), o);
};
