// `moat daemon`: run the data plane on a gateway: capture (the ring engine's
// packet workers, or libpcap), judge frames with the network_transit
// rulesets, forward what passes (inline).

import type { Command } from 'commander';
import { pino } from 'pino';
import { LiveCapture, ringEngineAvailable } from '../../capture/index.js';
import { controlPlaneUrls, loadDaemonConfig, type DaemonConfig } from '../../config/index.js';
import { bundleFiles, bundleSourceFor, capturePlan, ChannelBundleSource, Daemon, liveCaptureHost, preflight } from '../../daemon/index.js';
import { BundleError, loadBundle, type LoadedBundle } from '../../engine/index.js';
import type { MoatError } from '../../errors/index.js';
import { moatVersion } from '../version.js';
import { formatError, formatWarning, reportError, type Output } from '../output.js';

interface DaemonFlags {
  config: string;
  check?: boolean;
  strict?: boolean;
}

/**
 * --check with a control plane: the token, the CA and the state directory are
 * usable, and the cached bundle, when there is one, loads (throws its errors).
 */
async function checkChannel(config: DaemonConfig): Promise<LoadedBundle & { cached?: string | undefined }> {
  const source = new ChannelBundleSource(config, { moat: moatVersion() });
  const files = source.cachedFiles();
  if (files !== undefined) return { ...loadBundle(files), cached: source.status().digest ?? undefined };
  return source.load({ load: (f) => Promise.resolve(loadBundle(f)) });
}

/** Registers `moat daemon` on the program. */
export function registerDaemon(program: Command, out: Output): void {
  program
    .command('daemon')
    .description('run the firewall daemon on the interfaces of its configuration (needs CAP_NET_RAW and CAP_NET_ADMIN)')
    .requiredOption('-c, --config <file>', 'configuration file (JSON with comments; see config/daemon.example.jsonc)')
    .option('--check', 'check what a start checks (configuration, rules, interfaces, capabilities, metrics address, drop capture path), then exit')
    .option('--strict', 'a rule reading GeoIP data or a list the configuration does not give is an error (as "missingData": "error")')
    .action(async (flags: DaemonFlags) => {
      const override: Partial<DaemonConfig> = flags.strict === true ? { missingData: 'error' } : {};
      const config: DaemonConfig = { ...loadDaemonConfig(flags.config), ...override };
      // The host first: a start that cannot capture fails here, with one coded line per reason.
      const host = await preflight(config);
      if (flags.check === true) {
        // Compile the bundle the same way start() does, without opening captures.
        const errors: MoatError[] = [...host];
        let summary: string | undefined;
        // The engine as start() will choose it (an explicit ring this host cannot run is 5012 here too).
        const plan = capturePlan(config, liveCaptureHost(ringEngineAvailable), flags.config);
        for (const w of plan.warnings) out.stderr(`moat: warning: ${w}`);
        try {
          const b: LoadedBundle & { cached?: string | undefined } = config.controlPlane === undefined ? loadBundle(bundleFiles(config)) : await checkChannel(config);
          for (const w of b.missing) out.stderr(formatWarning(w));
          const cps = config.controlPlane === undefined ? '' : controlPlaneUrls(config.controlPlane.url).join(' or ');
          const what = config.controlPlane === undefined ? '' : b.cached === undefined ? `control plane ${cps}, no cached bundle yet; ` : `control plane ${cps}, cached bundle ${b.cached}: `;
          // Inline: the sides as the daemon will take them (the first of a list is outside).
          const ports = config.mode === 'inline' ? `${config.interfaces[0]} (outside), ${config.interfaces[1]} (inside), judging ${config.judge === 'both' ? 'both directions' : 'frames from outside'}` : config.interfaces.join(', ');
          const engine = plan.engine === 'ring' ? `capture engine ring, ${plan.workers} packet worker${plan.workers === 1 ? '' : 's'}` : 'capture engine libpcap';
          summary = `OK: ${config.mode} on ${ports}; ${engine}; ${what}${b.evaluator.rules.length} rules, fields: ${b.evaluator.fields.join(' ') || '(none)'}`;
        } catch (err) {
          if (!(err instanceof BundleError)) throw err;
          errors.unshift(...err.errors);
        }
        for (const e of errors) out.stderr(formatError(e));
        if (errors.length > 0) out.exitCode = 1;
        else out.stdout(summary!);
        return;
      }
      if (host.length > 0) {
        for (const e of host) out.stderr(formatError(e));
        out.exitCode = 1;
        return;
      }
      const log = pino({ level: config.log.level, base: { service: 'moat-daemon' } });
      const daemon = new Daemon(config, log, (iface, o) => LiveCapture.open(iface, o), bundleSourceFor(config, flags.config, { moat: moatVersion() }), { configFile: flags.config, override, ring: {} });
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
