// The list store on a real SQLite file: item canonicalisation (checked against
// ipaddr.js and node's BlockList on random inputs), address ordering, bulk
// operations, the item cap, list deletion guarded by ruleset references, and
// managed lists loaded with `moat lists load-managed`.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { BlockList } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ipaddr from 'ipaddr.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Database, newId, nowStamp } from '../../src/store/index.js';
import { canonicalItemIp, ListStore, TOO_MANY_ITEMS_MESSAGE } from '../../src/store/lists.js';
import { moat } from '../support/cli.js';
import { Rng, seedFrom } from '../support/random.js';

let dir: string;
let store: Database;
let lists: ListStore;
const account = newId();

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'moat-lists-'));
  store = Database.open(dir);
  lists = new ListStore(store);
});

afterEach(() => {
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

function canon(text: string): string {
  const c = canonicalItemIp(text);
  if (typeof c === 'string') throw new Error(c);
  return c.ip;
}

function run(listId: string, op: 'append' | 'replace' | 'delete', payload: unknown[], max = 1000): string {
  const id = lists.enqueue(account, listId, op, payload as string[]);
  lists.applyOperation(id, max);
  return id;
}

describe('item addresses', () => {
  it('accepts IPv4 addresses, IPv4 /8-/32 and IPv6 /4-/64, in canonical form', () => {
    expect(canon('192.0.2.1')).toBe('192.0.2.1');
    expect(canon('192.0.2.1/32')).toBe('192.0.2.1');
    expect(canon('10.0.0.0/8')).toBe('10.0.0.0/8');
    expect(canon('2001:DB8:0:0::/32')).toBe('2001:db8::/32');
    expect(canon('2001:0db8:0001:0002::/64')).toBe('2001:db8:1:2::/64');
    expect(canon('f000::/4')).toBe('f000::/4');
  });

  it('refuses host bits, out-of-range prefixes, lone IPv6 hosts, ranges and junk, saying why', () => {
    expect(canonicalItemIp('10.0.0.1/8')).toBe('"10.0.0.1/8" has host bits set (did you mean 10.0.0.0/8?)');
    expect(canonicalItemIp('10.0.0.0/7')).toBe('"10.0.0.0/7": IPv4 prefixes must be from /8 to /32');
    expect(canonicalItemIp('2001:db8::/65')).toBe('"2001:db8::/65": IPv6 prefixes must be from /4 to /64');
    expect(canonicalItemIp('::/3')).toBe('"::/3": IPv6 prefixes must be from /4 to /64');
    expect(canonicalItemIp('2001:db8::1')).toContain('give its /64: 2001:db8::/64');
    expect(canonicalItemIp('10.0.0.1..10.0.0.9')).toContain('is a range');
    for (const bad of ['', ' 10.0.0.1', '10.0.0.256', '010.0.0.1', '10.0.0.0/33', '10.0.0.0/08', 'fe80::/10%eth0', 'example.com', '10.0.0.0/']) {
      expect(typeof canonicalItemIp(bad), bad).toBe('string');
    }
  });

  it('agrees with ipaddr.js and node BlockList on random addresses and prefixes', () => {
    const seed = seedFrom('MOAT_SEED');
    const rng = new Rng(seed);
    const word = () => rng.int(0x10000);
    let accepted = 0;
    for (let n = 0; n < 3000; n++) {
      const v6 = rng.chance(0.5);
      let text: string;
      let len: number | undefined;
      if (v6) {
        const groups = Array.from({ length: 8 }, () => (rng.chance(0.3) ? 0 : word()));
        len = rng.chance(0.1) ? undefined : rng.int(129);
        // Host bits are usually cleared so most inputs are valid; sometimes not.
        const addr = ipaddr.fromByteArray(groups.flatMap((g) => [g >> 8, g & 255])) as ipaddr.IPv6;
        const base = len !== undefined && rng.chance(0.8) ? (ipaddr.IPv6.networkAddressFromCIDR(`${addr.toString()}/${len}`) as ipaddr.IPv6) : addr;
        text = rng.pick([base.toString(), base.toNormalizedString(), base.toNormalizedString().split(':').map((g) => g.padStart(4, '0')).join(':')]);
        if (rng.chance(0.3)) text = text.toUpperCase();
      } else {
        const bytes = [rng.int(256), rng.int(256), rng.int(256), rng.int(256)];
        len = rng.chance(0.3) ? undefined : rng.int(33);
        const addr = ipaddr.fromByteArray(bytes) as ipaddr.IPv4;
        const base = len !== undefined && rng.chance(0.8) ? ipaddr.IPv4.networkAddressFromCIDR(`${addr.toString()}/${len}`) : addr;
        text = base.toString();
      }
      if (len !== undefined) text += `/${len}`;
      const got = canonicalItemIp(text);

      // The oracle: ipaddr.js parses, the Lists API rules decide.
      const [oAddr, oLen] = len === undefined ? [ipaddr.parse(text), v6 ? 128 : 32] : ipaddr.parseCIDR(text);
      const family = oAddr.kind() === 'ipv6' ? 6 : 4;
      const inRange = family === 4 ? oLen >= 8 && oLen <= 32 : oLen >= 4 && oLen <= 64;
      const network = family === 4 ? ipaddr.IPv4.networkAddressFromCIDR(`${oAddr.toString()}/${oLen}`) : ipaddr.IPv6.networkAddressFromCIDR(`${oAddr.toString()}/${oLen}`);
      const hostBits = network.toString() !== oAddr.toString();
      const ctx = `seed ${seed}: ${text}`;
      if (!inRange || hostBits) {
        expect(typeof got, ctx).toBe('string');
        continue;
      }
      accepted++;
      if (typeof got === 'string') throw new Error(`${ctx}: refused: ${got}`);
      const want = family === 4 && oLen === 32 ? oAddr.toString() : `${network.toString()}/${oLen}`;
      expect(got.ip, ctx).toBe(want);
      expect(canon(got.ip), ctx).toBe(got.ip);

      // Membership: node's BlockList built from the original text and from the
      // canonical text holds the same edge addresses.
      const type = family === 4 ? 'ipv4' : 'ipv6';
      const fromInput = new BlockList();
      fromInput.addSubnet(oAddr.toString(), oLen, type);
      const [cAddr, cLen] = got.ip.includes('/') ? got.ip.split('/') : [got.ip, '32'];
      const fromCanon = new BlockList();
      fromCanon.addSubnet(cAddr!, Number(cLen), type);
      const bytes = network.toByteArray();
      const last = bytes.map((b, i) => {
        const hostBitsHere = Math.max(0, Math.min(8, (i + 1) * 8 - oLen));
        return b | ((1 << hostBitsHere) - 1);
      });
      for (const probe of [bytes, last]) {
        const p = ipaddr.fromByteArray(probe).toString();
        expect(fromCanon.check(p, type), `${ctx} probe ${p}`).toBe(true);
        expect(fromInput.check(p, type), `${ctx} probe ${p}`).toBe(true);
      }
    }
    expect(accepted).toBeGreaterThan(300);
  });
});

describe('ListStore', () => {
  it('orders items by address, then mask, IPv4 before IPv6, and pages through them with cursors', () => {
    const l = lists.create(account, { name: 'order', kind: 'ip', description: '' }, 10);
    const input = ['10.0.0.0/16', '2001:db8::/32', '10.0.0.0/8', '9.255.255.255', '10.0.0.1', '2001:db8::/48', '1.0.0.0/8', '10.0.0.0'];
    run(l.id, 'append', input.map((ip) => ({ ip: canon(ip) })));
    const want = ['1.0.0.0/8', '9.255.255.255', '10.0.0.0/8', '10.0.0.0/16', '10.0.0.0', '10.0.0.1', '2001:db8::/32', '2001:db8::/48'];
    expect(lists.entries(account, 'order')).toEqual(want);

    const seen: string[] = [];
    let page = lists.items(account, l.id, { perPage: 3 });
    expect(page.before).toBeUndefined();
    seen.push(...page.items.map((i) => i.ip));
    while (page.after !== undefined) {
      page = lists.items(account, l.id, { perPage: 3, cursor: page.after });
      seen.push(...page.items.map((i) => i.ip));
    }
    expect(seen).toEqual(want);
    // The last page's `before` leads back to the page before it.
    const back = lists.items(account, l.id, { perPage: 3, cursor: page.before });
    expect(back.items.map((i) => i.ip)).toEqual(want.slice(3, 6));
    expect(lists.items(account, l.id, { perPage: 10, search: '10.0.0.0' }).items.map((i) => i.ip)).toEqual(['10.0.0.0/8', '10.0.0.0/16', '10.0.0.0']);
    expect(() => lists.items(account, l.id, { perPage: 3, cursor: 'bogus!' })).toThrow(/cursor/);
  });

  it('upserts equal entries, keeps ids on replace, deletes by id, and fails past the item cap without a change', () => {
    const l = lists.create(account, { name: 'ops', kind: 'ip', description: '' }, 10);
    run(l.id, 'append', [{ ip: '192.0.2.1', comment: 'one' }, { ip: '192.0.2.2' }]);
    const [first] = lists.items(account, l.id, { perPage: 10 }).items;
    run(l.id, 'append', [{ ip: '192.0.2.1', comment: 'changed' }]);
    const again = lists.item(account, l.id, first!.id);
    expect(again.comment).toBe('changed');
    expect(again.created_on).toBe(first!.created_on);

    run(l.id, 'replace', [{ ip: '192.0.2.1' }, { ip: '198.51.100.0/24' }]);
    const after = lists.items(account, l.id, { perPage: 10 }).items;
    expect(after.map((i) => i.ip)).toEqual(['192.0.2.1', '198.51.100.0/24']);
    expect(after[0]!.id).toBe(first!.id);
    expect(after[0]!.comment).toBeUndefined();

    const failed = run(l.id, 'append', [{ ip: '203.0.113.1' }, { ip: '203.0.113.2' }], 3);
    expect(lists.operation(account, failed)).toMatchObject({ status: 'failed', error: TOO_MANY_ITEMS_MESSAGE });
    expect(lists.get(account, l.id)!.num_items).toBe(2);

    const del = run(l.id, 'delete', [after[1]!.id, newId()]);
    expect(lists.operation(account, del)).toMatchObject({ status: 'completed' });
    expect(lists.entries(account, 'ops')).toEqual(['192.0.2.1']);
    expect(lists.nextOperation()).toBeUndefined();
  });

  it('refuses to delete a list that a ruleset of the account names, and counts those rulesets', () => {
    const l = lists.create(account, { name: 'used', kind: 'ip', description: '' }, 10);
    const rs = newId();
    store.write(() => {
      store.db
        .prepare("INSERT INTO rulesets (id, account_id, kind, phase, name, description, latest_version, last_version, created_on) VALUES (?, ?, 'root', 'network_transit', 'r', '', 1, 1, ?)")
        .run(rs, account, nowStamp());
      store.db.prepare('INSERT INTO ruleset_list_refs (ruleset_id, list_name) VALUES (?, ?)').run(rs, 'used');
    });
    expect(lists.get(account, l.id)!.num_referencing_filters).toBe(1);
    expect(() => lists.delete(account, l.id)).toThrow(expect.objectContaining({ errorName: 'LIST_IN_USE' }));
    store.write(() => store.db.prepare('DELETE FROM ruleset_list_refs').run());
    lists.delete(account, l.id);
    expect(lists.get(account, l.id)).toBeUndefined();
  });

  it('names must be unique per account, and the account list cap holds', () => {
    lists.create(account, { name: 'a', kind: 'ip', description: '' }, 2);
    expect(() => lists.create(account, { name: 'a', kind: 'ip', description: '' }, 2)).toThrow(expect.objectContaining({ errorName: 'LIST_NAME_TAKEN' }));
    lists.create(newId(), { name: 'a', kind: 'ip', description: '' }, 2);
    lists.create(account, { name: 'b', kind: 'ip', description: '' }, 2);
    expect(() => lists.create(account, { name: 'c', kind: 'ip', description: '' }, 2)).toThrow(expect.objectContaining({ errorName: 'LIST_TOO_MANY' }));
    expect([...lists.accountListNames(account)].sort()).toEqual(['a', 'b']);
  });
});

describe('moat lists load-managed', () => {
  it('replaces a managed list from a file, deduplicated and canonical, and prints the count', async () => {
    store.close();
    const file = join(dir, 'malware.txt');
    writeFileSync(file, '# feed\n192.0.2.1\n10.0.0.0/8  # comment\n\n2001:DB8::/32\n192.0.2.0..192.0.2.255\n192.0.2.10..192.0.2.20\n192.0.2.1\n');
    const r = await moat('lists', 'load-managed', '--data-dir', dir, '--name', 'cf.malware', '--file', file);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`svc.malware: 5 entries loaded from ${file}`);
    store = Database.open(dir);
    lists = new ListStore(store);
    expect(lists.managedEntries('$svc.malware').sort()).toEqual(['10.0.0.0/8', '192.0.2.0/24', '192.0.2.1', '192.0.2.10..192.0.2.20', '2001:db8::/32']);
    expect(lists.managedEntries('svc.botnetcc')).toEqual([]);

    writeFileSync(file, '203.0.113.7\n');
    store.close();
    expect((await moat('lists', 'load-managed', '--data-dir', dir, '--name', 'svc.malware', '--file', file)).stdout).toContain('1 entry loaded');
    store = Database.open(dir);
    lists = new ListStore(store);
    expect(lists.managedEntries('svc.malware')).toEqual(['203.0.113.7']);
  });

  it('names the file and line of a bad entry and leaves the stored list as it was', async () => {
    store.close();
    const good = join(dir, 'good.txt');
    const bad = join(dir, 'bad.txt');
    writeFileSync(good, '198.51.100.0/24\n');
    writeFileSync(bad, '192.0.2.1\n10.0.0.1/8\n');
    await moat('lists', 'load-managed', '--data-dir', dir, '--name', 'svc.anonymizer', '--file', good);
    const r = await moat('lists', 'load-managed', '--data-dir', dir, '--name', 'svc.anonymizer', '--file', bad);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${bad}:2:`);
    expect(r.stderr).toContain('host bits');
    const wrong = await moat('lists', 'load-managed', '--data-dir', dir, '--name', 'office', '--file', good);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('not a managed list');
    store = Database.open(dir);
    lists = new ListStore(store);
    expect(lists.managedEntries('svc.anonymizer')).toEqual(['198.51.100.0/24']);
  });
});
