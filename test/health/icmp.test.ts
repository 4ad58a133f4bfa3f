// ICMP monitors where the process has raw sockets (CAP_NET_RAW) and the
// system's ping: an echo reply passes, UDP-ICMP fails on a port-unreachable
// and passes where a UDP socket listens; the API accepts icmp_ping there.
// Without ping the tests skip locally and fail under CI=true (peerTool).
import { createSocket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { probe, type ProbeMonitor } from '../../src/health/index.js';
import { startApi } from '../support/api.js';
import { peerTool } from '../support/tools.js';

const ping = peerTool('ping');
const m = (over: Partial<ProbeMonitor>): ProbeMonitor & { retries: number } => ({
  type: 'icmp_ping',
  port: 0,
  timeout: 1,
  retries: 0,
  method: '',
  path: '',
  header: {},
  expected_codes: '',
  expected_body: '',
  follow_redirects: false,
  allow_insecure: false,
  ...over,
});

describe.skipIf(ping === undefined)('ICMP monitors', () => {
  it('pass an echo reply from 127.0.0.1', async () => {
    expect(await probe(m({}), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: true });
  });

  it('fail udp_icmp on a closed UDP port with "ICMP port unreachable", and pass one that listens', async () => {
    const sock = createSocket('udp4');
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', r));
    const open = (sock.address() as AddressInfo).port;
    try {
      expect(await probe(m({ type: 'udp_icmp', port: open }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: true });
    } finally {
      sock.close();
    }
    expect(await probe(m({ type: 'udp_icmp', port: open }), { address: '127.0.0.1', port: 0 })).toMatchObject({ ok: false, reason: 'ICMP port unreachable' });
  });

  it('are accepted by the API where the process may open raw sockets', async () => {
    const api = await startApi({ loadBalancing: { rawSockets: true } });
    try {
      const created = await api.client().loadBalancers.monitors.create({ account_id: api.accountId, type: 'icmp_ping' });
      expect(created).toMatchObject({ type: 'icmp_ping', port: 0 });
    } finally {
      await api.dispose();
    }
  });
});
