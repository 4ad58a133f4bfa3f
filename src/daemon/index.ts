// Public face of the daemon: its life cycle, where its bundles come from (the
// BundleSource seam: files, or the control plane's channel), metrics and drop recorder.
export { Daemon, RESTART_ONLY, type Port, type DaemonState, type SourceOpener } from './daemon.js';
export { bundleSourceFor, type BundleLoading, type BundleSource, type ReloadOutcome, type SourceHost, type SourceStatus } from './bundle-source.js';
export { ChannelBundleSource, channelUrl, type ChannelOptions } from './channel-bundle-source.js';
export { BundleCache, listDigest, listText, type CachedBundle } from './bundle-cache.js';
export { FileBundleSource, bundleFiles } from './file-bundle-source.js';
export { WorkerLoading, loaderWorkerScript, loaderWorkerAvailable } from './worker-loading.js';
export { daemonMetrics } from './metrics.js';
export { DropRecorder, type DropRecorderOptions } from './drop-recorder.js';
export { preflight, interfaceNames, effectiveCapabilities } from './preflight.js';
export { PacketWorkers, packetWorkerScript, replayPortOpener, ringPortOpener, type PacketWorkersOptions, type SwapOutcome, type WorkerCounters, type PortTotals } from './packet-workers.js';
export type { OpenerRef, PortSpec, PathSettings, PrepareCost } from './packet-worker-layout.js';
export { capturePlan, liveCaptureHost, rxQueues, type CapturePlan, type CaptureHost } from './capture-plan.js';
