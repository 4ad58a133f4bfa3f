// The daemon's configuration is validated at start: unknown keys and bad values
// are errors naming the key; the examples in config/ are valid.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadDaemonConfig, stripJsonComments, validateDaemonConfig } from '../../src/config/index.js';
import { compileBundle, parseRuleset } from '../../src/engine/index.js';
import { MoatError } from '../../src/errors/index.js';
import { ROOT } from '../support/cli.js';
import { readFileSync } from 'node:fs';

const dir = mkdtempSync(join(tmpdir(), 'moat-config-'));
function write(text: string): string {
  const f = join(dir, `c${Math.random().toString(36).slice(2)}.jsonc`);
  writeFileSync(f, text);
  return f;
}
function error(f: () => unknown): MoatError {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(MoatError);
    return err as MoatError;
  }
  throw new Error('expected an error');
}
const minimal = { mode: 'monitor', interfaces: ['eth0'], rules: { account: 'a.json' } };

describe('the daemon configuration', () => {
  it('accepts the annotated example in config/ and fills the documented defaults', () => {
    const c = loadDaemonConfig(join(ROOT, 'config/daemon.example.jsonc'));
    expect(c.mode).toBe('inline');
    expect([c.interfaces, c.judge]).toEqual([['ga', 'gb'], 'inbound']);
    expect(c.capture.ringBytes).toBe(128 * 1024 * 1024);
    expect(c.capture.priority).toEqual({ packet: 0, background: 10 });
    expect(c.metrics.listen).toBe('127.0.0.1:9490');
    expect(c.rules?.account).toBe(join(ROOT, 'config/rules/account-entrypoint.json'));
    expect(Object.isFrozen(c.capture)).toBe(true);
  });

  it('takes capture.engine, workers, slotBytes and batchMax, with the ring defaults, and refuses a filter with the ring engine or workers with libpcap (5002 with the pointer)', () => {
    const c = validateDaemonConfig({ ...minimal, capture: { engine: 'ring', workers: 2 } });
    expect([c.capture.engine, c.capture.workers, c.capture.slotBytes, c.capture.batchMax]).toEqual(['ring', 2, 2048, 64]);
    expect(validateDaemonConfig(minimal).capture.engine).toBeUndefined();
    const f = error(() => validateDaemonConfig({ ...minimal, capture: { engine: 'ring', filter: 'tcp' } }, 'd.jsonc'));
    expect([f.code, f.pointer]).toEqual([5002, '/capture/engine']);
    expect(f.message).toContain('"engine": "libpcap"');
    const w = error(() => validateDaemonConfig({ ...minimal, capture: { engine: 'libpcap', workers: 2 } }, 'd.jsonc'));
    expect([w.code, w.pointer]).toEqual([5002, '/capture/workers']);
    // A filter alone chooses libpcap, so workers beside it are refused too.
    const fw = error(() => validateDaemonConfig({ ...minimal, capture: { filter: 'tcp', workers: 2 } }, 'd.jsonc'));
    expect(fw.message).toContain('chosen for capture.filter');
    expect(error(() => validateDaemonConfig({ ...minimal, capture: { workers: 0 } })).pointer).toBe('/capture/workers');
    expect(error(() => validateDaemonConfig({ ...minimal, capture: { engine: 'pf_ring' } })).pointer).toBe('/capture/engine');
  });

  it('takes capture.priority (packet 0, background 10 by default) and refuses a nice outside -20..19 or packet above background (5002 with the pointer)', () => {
    expect(validateDaemonConfig(minimal).capture.priority).toEqual({ packet: 0, background: 10 });
    expect(validateDaemonConfig({ ...minimal, capture: { priority: { packet: 0 } } }).capture.priority).toEqual({ packet: 0, background: 10 });
    const range = error(() => validateDaemonConfig({ ...minimal, capture: { priority: { packet: -21 } } }, 'd.jsonc'));
    expect([range.code, range.pointer]).toEqual([5002, '/capture/priority/packet']);
    expect(error(() => validateDaemonConfig({ ...minimal, capture: { priority: { background: 20 } } })).pointer).toBe('/capture/priority/background');
    expect(error(() => validateDaemonConfig({ ...minimal, capture: { priority: { packet: 1.5 } } })).pointer).toBe('/capture/priority/packet');
    const above = error(() => validateDaemonConfig({ ...minimal, capture: { priority: { packet: 5, background: 0 } } }, 'd.jsonc'));
    expect([above.code, above.pointer]).toEqual([5002, '/capture/priority/packet']);
    expect(above.message).toBe("d.jsonc: capture.priority: packet (5) is above background (0): the packet threads would lose the CPU to the daemon's own update work; give packet a nice value at most background's");
  });

  it('ships an example ruleset that compiles', () => {
    const rs = parseRuleset(readFileSync(join(ROOT, 'config/rules/account-entrypoint.json'), 'utf8'));
    expect(compileBundle({ account: rs }).rules.length).toBe(4);
  });

  it('names an unknown key, nested or not', () => {
    expect(error(() => validateDaemonConfig({ ...minimal, capure: {} }, 'd.jsonc')).message).toBe('d.jsonc: (top level): unknown key "capure"');
    const e = error(() => validateDaemonConfig({ ...minimal, capture: { ringbytes: 1 } }, 'd.jsonc'));
    expect(e.message).toBe('d.jsonc: capture: unknown key "ringbytes"');
    expect(e.code).toBe(5002);
  });

  it('names the key of a bad value', () => {
    const e = error(() => validateDaemonConfig({ ...minimal, capture: { ringBytes: 'big' } }, 'd.jsonc'));
    expect(e.message).toMatch(/^d\.jsonc: capture\.ringBytes: /);
    expect(e.pointer).toBe('/capture/ringBytes');
    expect(error(() => validateDaemonConfig({ ...minimal, mode: 'bridge' }, 'd.jsonc')).message).toMatch(/^d\.jsonc: mode: /);
    expect(error(() => validateDaemonConfig({ ...minimal, metrics: { listen: 'localhost' } }, 'd.jsonc')).message).toMatch(/metrics\.listen: HOST:PORT/);
  });

  it('takes capture.cpus for the ring engine and refuses it for libpcap, a CPU named twice, or one both packet and background (5002 with the pointer)', () => {
    expect(validateDaemonConfig(minimal).capture.cpus).toBeUndefined();
    expect(validateDaemonConfig({ ...minimal, capture: { cpus: { packet: [1, 2], background: [0] } } }).capture.cpus).toEqual({ packet: [1, 2], background: [0] });
    const cases: Array<[unknown, string, string]> = [
      [{ engine: 'libpcap', cpus: { packet: [1] } }, '/capture/cpus', 'the libpcap engine reads on the main thread'],
      [{ filter: 'tcp', cpus: { packet: [1] } }, '/capture/cpus', '(chosen for capture.filter)'],
      [{ cpus: { packet: [1, 2, 1] } }, '/capture/cpus/packet/2', 'CPU 1 is named twice'],
      [{ cpus: { packet: [1], background: [0, 1] } }, '/capture/cpus/background/1', 'CPU 1 is both a packet and a background CPU'],
      [{ cpus: { packet: [] } }, '/capture/cpus/packet', ''],
      [{ cpus: { packet: [-1] } }, '/capture/cpus/packet/0', ''],
      [{ cpus: { background: [0] } }, '/capture/cpus/packet', ''],
    ];
    for (const [capture, pointer, text] of cases) {
      const e = error(() => validateDaemonConfig({ ...minimal, capture }, 'd.jsonc'));
      expect([e.code, e.pointer, e.message.includes(text)]).toEqual([5002, pointer, true]);
    }
  });

  it('says that a configuration with neither rules nor controlPlane has nothing to enforce', () => {
    const e = error(() => validateDaemonConfig({ mode: 'monitor', interfaces: ['eth0'] }, 'd.jsonc'));
    expect([e.code, e.message, e.pointer]).toEqual([5002, 'd.jsonc: neither rules nor controlPlane: give rules (ruleset files) or controlPlane (a control plane to take them from)', '/rules']);
  });

  it('requires exactly two distinct interfaces inline', () => {
    expect(error(() => validateDaemonConfig({ ...minimal, mode: 'inline' }, 'd.jsonc')).message).toBe('d.jsonc: interfaces: inline mode bridges exactly two interfaces, not 1');
    expect(error(() => validateDaemonConfig({ ...minimal, interfaces: ['a', 'a'] }, 'd.jsonc')).message).toMatch(/listed twice/);
  });

  it('names the outside and inside ports of an inline bridge, outside first, and judges inbound frames by default', () => {
    const c = validateDaemonConfig({ ...minimal, mode: 'inline', interfaces: { outside: 'up0', inside: 'lan0' } }, 'd.jsonc');
    expect([c.interfaces, c.judge]).toEqual([['up0', 'lan0'], 'inbound']);
    expect(Object.isFrozen(c.interfaces)).toBe(true);
    // The list form: the first name is outside.
    const list = validateDaemonConfig({ ...minimal, mode: 'inline', interfaces: ['lan0', 'up0'], judge: 'both' }, 'd.jsonc');
    expect([list.interfaces, list.judge]).toEqual([['lan0', 'up0'], 'both']);
  });

  it('refuses a bad outside/inside pair with the key and its JSON pointer', () => {
    const inline = { ...minimal, mode: 'inline' };
    const missing = error(() => validateDaemonConfig({ ...inline, interfaces: { outside: 'up0' } }, 'd.jsonc'));
    expect([missing.code, missing.message, missing.pointer]).toEqual([5002, 'd.jsonc: interfaces.inside: Invalid input: expected string, received undefined', '/interfaces/inside']);
    const same = error(() => validateDaemonConfig({ ...inline, interfaces: { outside: 'up0', inside: 'up0' } }, 'd.jsonc'));
    expect([same.message, same.pointer]).toEqual(['d.jsonc: interfaces: outside and inside name the same interface', '/interfaces/inside']);
    expect(error(() => validateDaemonConfig({ ...inline, interfaces: { outside: 'up0', inside: 'lan0', dmz: 'dmz0' } }, 'd.jsonc')).message).toBe('d.jsonc: interfaces: unknown key "dmz"');
    expect(error(() => validateDaemonConfig({ ...inline, interfaces: { outside: 'an-interface-name-too-long', inside: 'lan0' } }, 'd.jsonc')).pointer).toBe('/interfaces/outside');
    const shape = error(() => validateDaemonConfig({ ...inline, interfaces: 'up0' }, 'd.jsonc'));
    expect([shape.message, shape.pointer]).toEqual(['d.jsonc: interfaces: expected a list of interface names, or {"outside": NAME, "inside": NAME}', '/interfaces']);
    const judge = error(() => validateDaemonConfig({ ...inline, interfaces: ['a', 'b'], judge: 'outbound' }, 'd.jsonc'));
    expect([judge.code, judge.pointer]).toEqual([5002, '/judge']);
    expect(judge.message).toMatch(/^d\.jsonc: judge: .*"inbound"\|"both"/);
  });

  it('refuses outside/inside and judge "inbound" in monitor mode, which judges both directions of what a mirror port delivers', () => {
    const sides = error(() => validateDaemonConfig({ ...minimal, interfaces: { outside: 'up0', inside: 'lan0' } }, 'd.jsonc'));
    expect([sides.code, sides.pointer]).toEqual([5002, '/interfaces']);
    expect(sides.message).toMatch(/^d\.jsonc: interfaces: outside and inside name the ports of an inline bridge; monitor mode takes a list/);
    const inbound = error(() => validateDaemonConfig({ ...minimal, judge: 'inbound' }, 'd.jsonc'));
    expect([inbound.code, inbound.pointer]).toEqual([5002, '/judge']);
    expect(inbound.message).toMatch(/monitor mode judges every frame it sees, in both directions/);
    expect(validateDaemonConfig({ ...minimal, judge: 'both' }, 'd.jsonc').judge).toBe('both');
  });

  it('reports a syntax error with the file, line and column', () => {
    const f = write('{\n  "mode": "monitor",\n  "interfaces": ["eth0"]\n  "rules": {}\n}\n');
    const e = error(() => loadDaemonConfig(f));
    expect(e.message).toMatch(new RegExp(`^${f}:4:3: `));
  });

  it('refuses a file path over 4,096 characters (PATH_MAX) or with a NUL byte with 5002 naming the key, without echoing the path', () => {
    const long = '/x'.repeat(2049);
    const cases: [Record<string, unknown>, string][] = [
      [{ rules: { account: long } }, 'rules.account'],
      [{ rules: { account: 'a.json', zone: long } }, 'rules.zone'],
      [{ rules: { account: 'a.json', managed: ['m.json', long] } }, 'rules.managed.1'],
      [{ lists: { office: long } }, 'lists.office'],
      [{ geoip: { asn: long } }, 'geoip.asn'],
      [{ dropCapture: { path: long } }, 'dropCapture.path'],
    ];
    for (const [extra, key] of cases) {
      const e = error(() => validateDaemonConfig({ ...minimal, ...extra }, 'd.jsonc'));
      expect(e.code, key).toBe(5002);
      expect(e.message, key).toBe(`d.jsonc: ${key}: a file path of at most 4096 characters`);
    }
    const nul = error(() => validateDaemonConfig({ ...minimal, lists: { office: '/etc/a\u0000b' } }, 'd.jsonc'));
    expect(nul.message).toBe('d.jsonc: lists.office: a file path cannot contain a NUL byte');
    // 4,096 characters is a path.
    expect(validateDaemonConfig({ ...minimal, rules: { account: '/' + 'x'.repeat(4095) } }).rules?.account).toHaveLength(4096);
  });

  it('lists the first ten problems of a configuration and counts the rest (100,000 bad interfaces are one short line)', () => {
    const e = error(() => validateDaemonConfig({ ...minimal, interfaces: Array.from({ length: 100_000 }, () => 5) }, 'd.jsonc'));
    expect(e.code).toBe(5002);
    const listed = Array.from({ length: 10 }, (_, i) => `interfaces.${i}: Invalid input: expected string, received number`);
    expect(e.message).toBe(`d.jsonc: ${listed.join('; ')}; and 99990 more problems`);
  });

  it('validates metrics.listen: port 1-65535, an IPv4 or bracketed IPv6 literal or a host name (5002 naming the key)', () => {
    const bad: [string, string][] = [
      ['1.2.3.4:99999', 'port 99999 is out of range: 1-65535'],
      ['1.2.3.4:0', 'port 0 is out of range: 1-65535'],
      ['1.2.3.4:0000009490', 'port 0000009490 is out of range: 1-65535'],
      ['1.2.3.999:9490', '1.2.3.999 is not an IPv4 address'],
      ['[::1::2]:9490', '::1::2 is not an IPv6 address'],
      ['[1.2.3.4]:9490', '1.2.3.4 is not an IPv6 address'],
      ['-bad-.example:9490', '"-bad-.example" is not an IP address or a host name'],
      ['host_name:9490', '"host_name" is not an IP address or a host name'],
      ['::1:9490', 'expected HOST:PORT, e.g. 127.0.0.1:9490 or [::1]:9490'],
      ['localhost', 'expected HOST:PORT, e.g. 127.0.0.1:9490 or [::1]:9490'],
    ];
    for (const [listen, why] of bad) {
      const e = error(() => validateDaemonConfig({ ...minimal, metrics: { listen } }, 'd.jsonc'));
      expect(e.code, listen).toBe(5002);
      expect(e.message, listen).toBe(`d.jsonc: metrics.listen: HOST:PORT: ${why}`);
      expect(e.pointer).toBe('/metrics/listen');
    }
    for (const listen of ['127.0.0.1:9490', '0.0.0.0:1', '[::1]:65535', '[::]:9490', 'localhost:9490', 'metrics.example.net:9490']) {
      expect(validateDaemonConfig({ ...minimal, metrics: { listen } }).metrics.listen).toBe(listen);
    }
  });

  it('names a missing file', () => {
    expect(error(() => loadDaemonConfig('/nonexistent/moat.jsonc')).message).toBe('/nonexistent/moat.jsonc: cannot read: no such file');
  });

  it('resolves relative paths against the config file folder', () => {
    const f = write(JSON.stringify({ ...minimal, lists: { 'svc.malware': 'l/m.txt' }, geoip: { country: '/abs/c.mmdb' } }));
    const c = loadDaemonConfig(f);
    expect(c.rules?.account).toBe(join(dir, 'a.json'));
    expect(c.lists['svc.malware']).toBe(join(dir, 'l/m.txt'));
    expect(c.geoip.country).toBe('/abs/c.mmdb');
  });

  it('strips comments and trailing commas but not comment-like text inside strings', () => {
    const text = '{ "a": "// not a comment", /* c */ "b": [1, 2,], // x\n }';
    expect(JSON.parse(stripJsonComments(text))).toEqual({ a: '// not a comment', b: [1, 2] });
  });
});

describe('moat serve --listen uses the same address rules (port 0 allowed: the kernel picks it)', () => {
  it('refuses a bad host or port with 5010', async () => {
    const { parseListen } = await import('../../src/cli/commands/serve.js');
    expect(parseListen('127.0.0.1:0')).toEqual({ host: '127.0.0.1', port: 0 });
    expect(parseListen(':8080')).toEqual({ host: '127.0.0.1', port: 8080 });
    expect(() => parseListen('1.2.3.999:8080')).toThrow('--listen 1.2.3.999:8080: 1.2.3.999 is not an IPv4 address');
    expect(() => parseListen('1.2.3.4:99999')).toThrow(/expected HOST:PORT/);
  });
});

describe('the daemon configuration with a control plane', () => {
  const cp = { url: 'ws://127.0.0.1:8080', tokenFile: 'gw1.token', stateDir: 'state' };
  const base = { mode: 'inline', interfaces: ['ga', 'gb'] };

  it('takes the channel URL, a token file and a state directory, relative to the file, with defaults', () => {
    const c = validateDaemonConfig({ ...base, controlPlane: cp }, join(dir, 'd.jsonc'));
    expect(c.controlPlane).toEqual({ url: 'ws://127.0.0.1:8080', tokenFile: join(dir, 'gw1.token'), stateDir: join(dir, 'state'), maxBackoffSeconds: 30 });
    expect([c.rules, c.failOpen]).toEqual([undefined, false]);
    expect(validateDaemonConfig({ ...base, failOpen: true, controlPlane: { url: 'wss://cp.example:443', token: 'moatd_x', ca: '/etc/moat/ca.pem', stateDir: '/var/lib/moat' } }, 'd.jsonc').failOpen).toBe(true);
  });

  it('refuses rules or lists beside controlPlane, naming both keys', () => {
    const e = error(() => validateDaemonConfig({ ...base, controlPlane: cp, rules: { account: 'a.json' } }, 'd.jsonc'));
    expect([e.code, e.message, e.pointer]).toEqual([5002, 'd.jsonc: controlPlane and rules: give one or the other: with controlPlane, rules and lists come from the control plane', '/rules']);
    expect(error(() => validateDaemonConfig({ ...base, controlPlane: cp, lists: {} }, 'd.jsonc')).message).toMatch(/^d\.jsonc: controlPlane and lists: /);
  });

  it('wants exactly one of token and tokenFile', () => {
    const two = error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, token: 'moatd_x' } }, 'd.jsonc'));
    expect([two.code, two.message, two.pointer]).toEqual([5002, 'd.jsonc: controlPlane: give exactly one of token and tokenFile, not both', '/controlPlane']);
    const none = error(() => validateDaemonConfig({ ...base, controlPlane: { url: cp.url, stateDir: 's' } }, 'd.jsonc'));
    expect(none.message).toBe('d.jsonc: controlPlane: give exactly one of token and tokenFile');
  });

  it('refuses a URL that is not ws:// or wss://, a CA for plain ws://, and a missing state directory', () => {
    expect(error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, url: 'http://127.0.0.1:8080' } }, 'd.jsonc')).message).toBe('d.jsonc: controlPlane.url: the scheme must be ws:// or wss://, not "http://"');
    expect(error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, url: 'cp:8080' } }, 'd.jsonc')).message).toMatch(/^d\.jsonc: controlPlane\.url: /);
    expect(error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, ca: 'ca.pem' } }, 'd.jsonc')).pointer).toBe('/controlPlane/ca');
    const { stateDir: _omitted, ...noState } = cp;
    expect(error(() => validateDaemonConfig({ ...base, controlPlane: noState }, 'd.jsonc')).message).toMatch(/^d\.jsonc: controlPlane\.stateDir: /);
  });
});

describe('the daemon configuration with several control plane URLs (replicas)', () => {
  const cp = { tokenFile: 'gw1.token', stateDir: 'state' };
  const base = { mode: 'inline', interfaces: ['ga', 'gb'] };

  it('takes a list of URLs, kept in the order given', () => {
    const c = validateDaemonConfig({ ...base, controlPlane: { ...cp, url: ['ws://10.0.0.1:8080', 'ws://10.0.0.2:8080'] } }, 'd.jsonc');
    expect(c.controlPlane!.url).toEqual(['ws://10.0.0.1:8080', 'ws://10.0.0.2:8080']);
  });

  it('names the URL of the list that is wrong, refuses an empty list, one URL twice, and a CA beside a plain ws:// one', () => {
    const bad = error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, url: ['ws://10.0.0.1:8080', 'http://10.0.0.2:8080'] } }, 'd.jsonc'));
    expect([bad.code, bad.message, bad.pointer]).toEqual([5002, 'd.jsonc: controlPlane.url.1: the scheme must be ws:// or wss://, not "http://"', '/controlPlane/url/1']);
    expect(error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, url: [] } }, 'd.jsonc')).message).toBe('d.jsonc: controlPlane.url: give at least one URL');
    const twice = error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, url: ['ws://10.0.0.1:8080', 'ws://10.0.0.2:8080', 'ws://10.0.0.1:8080/'] } }, 'd.jsonc'));
    expect([twice.code, twice.message, twice.pointer]).toEqual([5002, 'd.jsonc: controlPlane.url: "ws://10.0.0.1:8080/" is listed twice', '/controlPlane/url/2']);
    const ca = error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, ca: 'ca.pem', url: ['wss://a.example:8443', 'ws://b.example:8080'] } }, 'd.jsonc'));
    expect([ca.message, ca.pointer]).toEqual(['d.jsonc: controlPlane.ca: a CA is for a wss:// URL; "ws://b.example:8080" is not one', '/controlPlane/ca']);
    expect(error(() => validateDaemonConfig({ ...base, controlPlane: { ...cp, url: 42 } }, 'd.jsonc')).pointer).toBe('/controlPlane/url');
  });
});

describe('README "Connect a daemon"', () => {
  it('shows a daemon configuration that validates, with its control plane and no rules', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const section = readme.slice(readme.indexOf('\n## Connect a daemon\n'), readme.indexOf('\n## The control channel protocol\n'));
    const block = /```jsonc\n([\s\S]*?)```/.exec(section)![1]!.replace(/^ {3}/gm, '');
    const c = validateDaemonConfig(JSON.parse(stripJsonComments(block)), '/etc/moat/daemon.jsonc');
    expect([c.mode, c.rules, c.controlPlane]).toEqual(['inline', undefined, { url: 'ws://127.0.0.1:8080', tokenFile: '/etc/moat/gw1.token', stateDir: '/var/lib/moat-daemon', maxBackoffSeconds: 30 }]);
  });
});
