// Prometheus metrics of the daemon. Nothing is counted per packet here: the
// packet path keeps plain counters, and these collectors read them at scrape
// time (so metrics cost nothing on the hot path).

import { Counter, Gauge, Registry } from 'prom-client';
import { threadNices } from '../capture/index.js';
import type { Daemon } from './daemon.js';

/** Builds the registry for a daemon. */
export function daemonMetrics(d: Daemon): Registry {
  const registry = new Registry();
  const counter = (name: string, help: string, labelNames: string[], fill: (set: (labels: Record<string, string>, v: number) => void) => void) =>
    new Counter({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        this.reset();
        fill((labels, v) => this.inc(labels, v));
      },
    });
  counter('moat_packets_total', 'Frames judged, by interface and verdict.', ['interface', 'verdict'], (set) => {
    for (const p of d.ports) {
      const c = p.counters;
      set({ interface: p.name, verdict: 'pass' }, c.passed);
      set({ interface: p.name, verdict: 'drop' }, c.dropped);
    }
  });
  counter('moat_bytes_total', 'Bytes judged, by interface and verdict.', ['interface', 'verdict'], (set) => {
    for (const p of d.ports) {
      set({ interface: p.name, verdict: 'pass' }, p.counters.passedBytes);
      set({ interface: p.name, verdict: 'drop' }, p.counters.droppedBytes);
    }
  });
  counter('moat_passed_unjudged_total', 'Frames forwarded without judging (inline, arriving from inside with judge "inbound"), by interface they arrived on and direction.', ['interface', 'direction'], (set) => {
    for (const p of d.ports) if (p.peer !== null) set({ interface: p.name, direction: `${p.name} -> ${p.peer.name}` }, p.passedUnjudged);
  });
  counter('moat_passed_unjudged_bytes_total', 'Bytes forwarded without judging, by interface they arrived on and direction.', ['interface', 'direction'], (set) => {
    for (const p of d.ports) if (p.peer !== null) set({ interface: p.name, direction: `${p.name} -> ${p.peer.name}` }, p.passedUnjudgedBytes);
  });
  new Gauge({
    name: 'moat_port_info',
    help: 'The capture ports (value 1): the side each faces (inline: outside or inside; monitor: mirror) and whether frames arriving on it are judged.',
    labelNames: ['interface', 'side', 'judged'],
    registers: [registry],
    collect() {
      this.reset();
      for (const p of d.ports) this.set({ interface: p.name, side: p.side, judged: String(p.judged) }, 1);
    },
  });
  new Gauge({
    name: 'moat_thread_nice',
    help: 'Nice value of the daemon\'s threads (capture.priority), read from /proc: main, the packet workers (moat-packet-N), the bundle loader and intake. A packet worker at 0 where capture.priority.packet asks less was not permitted to rise (no root or CAP_SYS_NICE).',
    labelNames: ['thread'],
    registers: [registry],
    collect() {
      this.reset();
      for (const t of threadNices()) {
        if (t.tid === process.pid) this.set({ thread: 'main' }, t.nice);
        else if (t.name.startsWith('moat-')) this.set({ thread: t.name }, t.nice);
      }
    },
  });
  counter('moat_undecodable_packets_total', 'Frames whose IP header could not be read.', ['interface'], (set) => {
    for (const p of d.ports) set({ interface: p.name }, p.counters.undecodable);
  });
  counter('moat_not_ip_packets_total', 'Frames that are not IP (passed unjudged).', ['interface'], (set) => {
    for (const p of d.ports) set({ interface: p.name }, p.counters.notIp);
  });
  counter('moat_damaged_packets_total', 'IP packets judged although truncated or malformed.', ['interface'], (set) => {
    for (const p of d.ports) set({ interface: p.name }, p.counters.damaged);
  });
  counter('moat_address_lookups_total', 'Address reads for countries, AS numbers and lists: looked up in the table, or answered by a screen.', ['interface', 'result'], (set) => {
    for (const p of d.ports) {
      set({ interface: p.name, result: 'lookup' }, p.counters.lookups);
      set({ interface: p.name, result: 'screened' }, p.counters.screened);
    }
  });
  counter('moat_packet_errors_total', 'Packets whose evaluation threw (handled per onError).', [], (set) => set({}, d.packetErrors));
  // Ring engine: summed over the packet workers, which report them every 100 ms.
  counter('moat_rule_hits_total', 'Packets matched per rule of the running ruleset version.', ['ruleset', 'rule', 'action'], (set) => {
    for (const { rule: r, packets } of d.ruleHits()) set({ ruleset: r.level, rule: r.rule.id ?? `${r.level}#${r.index}`, action: r.rule.action }, packets);
  });
  counter('moat_rule_bytes_total', 'Bytes matched per rule of the running ruleset version.', ['ruleset', 'rule', 'action'], (set) => {
    for (const { rule: r, bytes } of d.ruleHits()) set({ ruleset: r.level, rule: r.rule.id ?? `${r.level}#${r.index}`, action: r.rule.action }, bytes);
  });
  counter('moat_capture_packets_total', 'Frames delivered by the capture.', ['interface'], (set) => {
    for (const p of d.ports) set({ interface: p.name }, p.source.stats.packets);
  });
  counter('moat_capture_sent_total', 'Frames forwarded (inline mode).', ['interface'], (set) => {
    for (const p of d.ports) set({ interface: p.name }, p.source.stats.sent);
  });
  counter('moat_capture_send_errors_total', 'Frames the kernel refused to send (e.g. larger than the MTU).', ['interface'], (set) => {
    for (const p of d.ports) set({ interface: p.name }, p.source.stats.sendErrors);
  });
  counter('moat_checksum_sampled_total', 'Forwarded frames whose TCP/UDP checksum was verified (1 in checksumSample).', ['interface'], (set) => {
    for (const p of d.ports) set({ interface: p.name }, p.checksumSampled);
  });
  counter('moat_bad_checksum_sampled_total', 'Sampled forwarded frames with a bad TCP/UDP checksum (an end host\'s checksum offload on a veth, or damage).', ['interface'], (set) => {
    for (const p of d.ports) set({ interface: p.name }, p.badChecksums);
  });
  counter('moat_ruleset_swaps_total', 'Ruleset bundles swapped in since start.', [], (set) => set({}, d.swaps));
  counter('moat_ruleset_reload_failures_total', 'Reloads rejected (the running bundle stayed).', [], (set) => set({}, d.reloadFailures));
  new Gauge({
    name: 'moat_ruleset_info',
    help: 'The running ruleset bundle (value 1), labelled with its version.',
    labelNames: ['version'],
    registers: [registry],
    collect() {
      this.reset();
      if (d.version !== '') this.set({ version: d.version }, 1);
    },
  });
  counter('moat_unjudged_packets_total', 'Frames seen before the first bundle from the control plane (forwarded only with failOpen).', [], (set) => set({}, d.unjudged));
  if (d.bundles.status !== undefined) {
    const status = () => d.bundles.status!();
    new Gauge({
      name: 'moat_control_plane_connected',
      help: '1 while the channel to the control plane is open.',
      registers: [registry],
      collect() {
        this.set(status().connected ? 1 : 0);
      },
    });
    new Gauge({
      name: 'moat_bundle_cached',
      help: '1 while the bundle in force is the one cached in the state directory, not yet confirmed by the control plane.',
      registers: [registry],
      collect() {
        this.set(status().bundle === 'cached' ? 1 : 0);
      },
    });
    new Gauge({
      name: 'moat_bundle_awaited',
      help: '1 while there is no bundle yet (none cached, the control plane not reached): traffic is not judged.',
      registers: [registry],
      collect() {
        this.set(d.awaitingBundle ? 1 : 0);
      },
    });
  }
  if (d.plan?.engine === 'ring') {
    const ring = () => d.ringStats();
    counter('moat_ring_drops_total', 'Frames the kernel dropped because a ring was full (ring engine), by interface.', ['interface'], (set) => {
      ring()?.ports.forEach((t, i) => set({ interface: d.ports[i]!.name }, t.ringDrops));
    });
    counter('moat_truncated_frames_total', 'Frames longer than a ring slot (capture.slotBytes): judged on what fits, never forwarded (ring engine).', ['interface'], (set) => {
      ring()?.ports.forEach((t, i) => set({ interface: d.ports[i]!.name }, t.truncated));
    });
    new Gauge({
      name: 'moat_link_up',
      help: '1 while the interface\'s link is up for every packet worker (ring engine); 0 while it is down (nothing read or forwarded there).',
      labelNames: ['interface'],
      registers: [registry],
      collect() {
        this.reset();
        const r = ring();
        r?.ports.forEach((t, i) => this.set({ interface: d.ports[i]!.name }, t.linkUp >= r.workers.length ? 1 : 0));
      },
    });
    counter('moat_worker_frames_total', 'Frames handled per packet worker (ring engine), all ports together.', ['worker'], (set) => {
      ring()?.workers.forEach((w, i) => set({ worker: String(i) }, w.frames));
    });
    counter('moat_worker_restarts_total', 'Packet workers restarted after they stopped (ring engine).', ['worker'], (set) => {
      ring()?.workers.forEach((w, i) => set({ worker: String(i) }, w.restarts));
    });
  }
  new Gauge({
    name: 'moat_up',
    help: '1 while the daemon is running.',
    registers: [registry],
    collect() {
      this.set(d.state === 'running' ? 1 : 0);
    },
  });
  return registry;
}
