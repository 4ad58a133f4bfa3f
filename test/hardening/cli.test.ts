// Issue #16 item 7: CLI paths that ended in stack traces. The built CLI runs
// as a child: a closed pipe ends it quietly with 141 (128 + SIGPIPE, as Unix
// tools), a full disk under --pass is error 3008, and `moat check` caps
// --max-depth where the parser, checker, compiler and generated code stay
// within the stack.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildPcap } from '../../src/capture/index.js';
import { MAX_DEPTH_CAP } from '../../src/cli/commands/check.js';
import { BIN, ROOT, ensureBuilt } from '../support/cli.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-hardening-cli-'));
const RULES = join(dir, 'rules.json');
const PCAP = join(dir, 'many.pcap');

beforeAll(() => {
  ensureBuilt();
  writeFileSync(RULES, JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] }));
  // Enough verdict lines (about 1.5 MB) to overflow any pipe buffer after `head` has gone.
  const frame = buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '198.51.100.1', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: 23, flags: TCP.SYN } });
  writeFileSync(PCAP, buildPcap(Array.from({ length: 20_000 }, (_, i) => ({ data: frame, seconds: 1_700_000_000 + i }))));
}, 120_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function node(args: string[], extraNodeArgs: string[] = []): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [...extraNodeArgs, BIN, ...args], { cwd: ROOT, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('CLI paths that ended in stack traces', () => {
  it('moat replay | head -1 exits quietly with 141 (standard output and a --verdicts pipe)', () => {
    // The summary alone is a few hundred bytes: it fits in the pipe, so after
    // `head -1` moat may have written it all and rightly exit 0 (a busy machine
    // showed it). A reader that has gone before the first write (`true`) is
    // EPIPE every time; the 1.5 MB of verdict lines overflow any pipe after `head`.
    for (const [extra, reader] of [[[], 'true'], [['--verdicts', '/dev/stdout'], 'head -1']] as const) {
      const cmd = [process.execPath, BIN, 'replay', PCAP, '--rules', RULES, ...extra].map((a) => `'${a}'`).join(' ');
      // pipefail: the pipeline's status is moat's; its standard error goes to our pipe.
      const r = spawnSync('bash', ['-o', 'pipefail', '-c', `${cmd} | ${reader}`], { cwd: ROOT, encoding: 'utf8', timeout: 30_000 });
      expect(r.error).toBeUndefined();
      expect(r.stderr, reader).toBe('');
      expect(r.status, reader).toBe(141);
      expect(r.stdout.split('\n')).toHaveLength(reader === 'true' ? 1 : 2);
    }
  });

  it('moat replay --pass /dev/full is error 3008 naming the file, exit 1', () => {
    const r = node(['replay', PCAP, '--rules', RULES, '--pass', '/dev/full']);
    expect(r.stderr).toBe('moat: error 3008: /dev/full: cannot write: no space left on device\n');
    expect(r.code).toBe(1);
  });

  it('moat check caps --max-depth (5010) and refuses 2,000 nested parentheses with 1018, no stack trace', () => {
    const deep = '('.repeat(2000) + 'tcp.dstport == 22' + ')'.repeat(2000);
    const capped = node(['check', '--max-depth', '1000000', '--max-length', '100000', deep]);
    expect(capped.code).toBe(2);
    expect(capped.stderr).toBe(`moat: error 5010: --max-depth takes at most ${MAX_DEPTH_CAP} (deeper nesting would overflow the stack), not 1000000\n`);
    const refused = node(['check', '--max-length', '100000', deep]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/error 1018: expression is nested more than 128 levels deep/);
    expect(refused.stderr).not.toMatch(/RangeError|\n {4}at /);
  });

  it('every form nested to the cap passes parse, check, compile and code generation on 40% of the default stack', () => {
    const d = MAX_DEPTH_CAP;
    const forms = [
      '('.repeat(d) + 'tcp.dstport == 22' + ')'.repeat(d),
      'not ('.repeat(d / 2) + 'tcp.flags.syn' + ')'.repeat(d / 2),
      '(tcp.flags.syn or '.repeat(d) + 'tcp.flags.ack' + ')'.repeat(d),
      '(tcp.flags.syn and not '.repeat(d / 2) + 'tcp.flags.ack' + ')'.repeat(d / 2),
      '(tcp.flags.syn and (ip.len > 3 or '.repeat(d / 2) + 'tcp.flags.ack' + '))'.repeat(d / 2),
      '(ip.src in {192.0.2.0/24} or any(lower(ip.geoip.country) == "fr") or '.repeat(d / 2) + 'udp.dstport in {53 123}' + ')'.repeat(d / 2),
    ];
    for (const f of forms) {
      const r = node(['check', '--max-depth', String(d), '--max-length', '1000000', '--emit-js', f], ['--stack-size=400']);
      expect(r.stderr, f.slice(0, 60)).not.toMatch(/RangeError|Maximum call stack/);
      expect([0, 1], `${f.slice(0, 60)}: ${r.stderr.slice(0, 300)}`).toContain(r.code);
    }
  });
});
