// Public face of the capture module: packets from capture files (pcap and pcapng
// reader, pcap writer) and from interfaces (libpcap live capture, which also sends,
// behind the FrameSource interface the daemon takes; the ring engine's batched ports).
// LINKTYPE (the link-layer type numbers) is the packet layer's, re-exported here.
export { LINKTYPE } from '../packet/index.js';
export {
  PCAP_MAGIC_MICROSECONDS,
  PCAP_MAGIC_NANOSECONDS,
  PCAP_GLOBAL_HEADER_LENGTH,
  PCAP_RECORD_HEADER_LENGTH,
  PCAP_DEFAULT_SNAPLEN,
  PcapWriter,
  BufferSink,
  fdSink,
  streamSink,
  openPcapFile,
  buildPcap,
  encodePcapGlobalHeader,
  type PcapResolution,
  type PcapWriterOptions,
  type PcapSink,
  type PcapPacket,
} from './pcap-writer.js';
export {
  PcapReader,
  PacketBatch,
  readCapture,
  PCAP_READER_BUFFER_SIZE,
  PCAP_READER_MAX_BUFFER_SIZE,
  type CaptureFormat,
  type CaptureInterface,
  type PcapReaderOptions,
  type TimestampResolution,
} from './pcap-reader.js';
export type { FrameSource, SourceStats } from './source.js';
export type { BatchPort, BatchPortOpener, BatchPortOptions, BatchPortStats, FrameBatch } from './batch-port.js';
export { ReplayBatchPort, openReplayPort, type ReplayPortOptions } from './replay-batch-port.js';
export {
  openRingPort,
  ringEngineAvailable,
  ringLivePorts,
  RING_DEFAULT_RING_BYTES,
  RING_DEFAULT_SLOT_BYTES,
  RING_DEFAULT_BATCH_MAX,
  RING_RELINK_INTERVAL_MS,
} from './ring-port.js';
export {
  LiveCapture,
  LIVE_CAPTURE_DEFAULT_RING_BYTES,
  capLinkTypeNumber,
  type LiveCaptureOptions,
  type LiveCaptureStats,
  type LivePacketHandler,
} from './pcap-live.js';
export { cpuList, setProcessCpus, setThreadCpus, setThreadPriority, threadCpus, threadNices, type ThreadCpus, type ThreadPriority } from './thread-priority.js';
