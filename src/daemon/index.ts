// Public face of the daemon: its life cycle, metrics and drop recorder.
export { Daemon, bundleFiles, type Port, type DaemonState, type SourceOpener } from './daemon.js';
export { daemonMetrics } from './metrics.js';
export { DropRecorder, type DropRecorderOptions } from './drop-recorder.js';
