// `moat daemon`: run the data plane on a gateway: capture with libpcap, judge
// every frame with the network_transit rulesets, forward what passes (inline).

import type { Command } from 'commander';
import { pino } from 'pino';
import { LiveCapture } from '../../capture/index.js';
import { loadDaemonConfig } from '../../config/index.js';
import { bundleFiles, bundleSourceFor, Daemon } from '../../daemon/index.js';
import { BundleError, loadBundle } from '../../engine/index.js';
import { reportError, type Output } from '../output.js';

interface DaemonFlags {
  config: string;
  check?: boolean;
}

/** Registers `moat daemon` on the program. */
export function registerDaemon(program: Command, out: Output): void {
  program
    .command('daemon')
    .description('run the firewall daemon on the interfaces of its configuration (needs CAP_NET_RAW and CAP_NET_ADMIN)')
    .requiredOption('-c, --config <file>', 'configuration file (JSON with comments; see config/daemon.example.jsonc)')
    .option('--check', 'validate the configuration and compile the rulesets, then exit')
    .action(async (flags: DaemonFlags) => {
      const config = loadDaemonConfig(flags.config);
      if (flags.check === true) {
        // Compile the bundle the same way start() does, without opening captures.
        try {
          const b = loadBundle(bundleFiles(config));
          out.stdout(`OK: ${config.mode} on ${config.interfaces.join(', ')}; ${b.evaluator.rules.length} rules, fields: ${b.evaluator.fields.join(' ') || '(none)'}`);
        } catch (err) {
          if (!(err instanceof BundleError) || !reportError(out, err)) throw err;
        }
        return;
      }
      const log = pino({ level: config.log.level, base: { service: 'moat-daemon' } });
      const daemon = new Daemon(config, log, (iface, o) => LiveCapture.open(iface, o), bundleSourceFor(config));
      try {
        await daemon.start();
      } catch (err) {
        await daemon.stop();
        if (reportError(out, err)) return;
        throw err;
      }
      daemon.handleTermination((code) => {
        log.flush();
        process.exit(code);
      });
      // Keep running: captures and the metrics server hold the event loop.
      await new Promise<never>(() => {});
    });
}
