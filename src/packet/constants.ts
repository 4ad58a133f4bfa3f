// Numbers of the wire: link types (LINKTYPE_*), EtherTypes, IP protocol numbers
// and their IANA keywords (the values of `ip.proto`), TCP flag bits.

/** LINKTYPE_* values the decoder understands. */
export const LINKTYPE = Object.freeze({
  NULL: 0,
  ETHERNET: 1,
  RAW_OLD_12: 12,
  RAW_OLD_14: 14,
  RAW: 101,
  LOOP: 108,
  LINUX_SLL: 113,
  IPV4: 228,
  IPV6: 229,
  LINUX_SLL2: 276,
});

export const ETHERTYPE_IPV4 = 0x0800;
export const ETHERTYPE_IPV6 = 0x86dd;
export const ETHERTYPE_VLAN = 0x8100;
export const ETHERTYPE_QINQ = 0x88a8;
export const ETHERTYPE_QINQ_OLD = 0x9100;

export const PROTO_HOPOPT = 0;
export const PROTO_ICMP = 1;
export const PROTO_TCP = 6;
export const PROTO_UDP = 17;
export const PROTO_ROUTING = 43;
export const PROTO_FRAGMENT = 44;
export const PROTO_ESP = 50;
export const PROTO_AH = 51;
export const PROTO_ICMPV6 = 58;
export const PROTO_NONXT = 59;
export const PROTO_DSTOPTS = 60;

// IANA "Assigned Internet Protocol Numbers" keywords, lowercased (as Cloudflare's
// docs write "tcp", "udp", "icmp", "gre", "esp", "hopopt").
const NAMES: Record<number, string> = {
  0: 'hopopt', 1: 'icmp', 2: 'igmp', 3: 'ggp', 4: 'ipv4', 5: 'st', 6: 'tcp', 7: 'cbt', 8: 'egp', 9: 'igp',
  17: 'udp', 27: 'rdp', 29: 'iso-tp4', 33: 'dccp', 36: 'xtp', 37: 'ddp', 41: 'ipv6', 43: 'ipv6-route',
  44: 'ipv6-frag', 45: 'idrp', 46: 'rsvp', 47: 'gre', 48: 'dsr', 50: 'esp', 51: 'ah', 55: 'mobile',
  58: 'ipv6-icmp', 59: 'ipv6-nonxt', 60: 'ipv6-opts', 88: 'eigrp', 89: 'ospfigp', 94: 'ipip', 97: 'etherip',
  98: 'encap', 103: 'pim', 108: 'ipcomp', 112: 'vrrp', 115: 'l2tp', 124: 'isis', 132: 'sctp', 133: 'fc',
  135: 'mobility-header', 136: 'udplite', 137: 'mpls-in-ip', 139: 'hip', 140: 'shim6', 141: 'wesp', 142: 'rohc',
  143: 'ethernet',
};

/** `ip.proto` text for each protocol number: the keyword, or the decimal number. */
export const PROTO_NAMES: readonly string[] = Array.from({ length: 256 }, (_, n) => NAMES[n] ?? String(n));

/** TCP flag bits of the flags byte. */
export const TCP_FIN = 0x01;
export const TCP_SYN = 0x02;
export const TCP_RST = 0x04;
export const TCP_PSH = 0x08;
export const TCP_ACK = 0x10;
export const TCP_URG = 0x20;
export const TCP_ECE = 0x40;
export const TCP_CWR = 0x80;
