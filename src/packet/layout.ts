// Header layouts: the byte offset of every header field the decoders, the
// fast path, the packet programs the engine generates and the warm-up frames
// read or write, each relative to the start of its own header. This file is
// the one source of truth for them. Hot modules copy the ones they use as
// module-local literals named AT_<name> (AT_TCP_DSTPORT = 2: slot copies take
// the plain names) and check the copies at load (see literal.ts); code
// generators interpolate them into the source they write.

/** Ethernet II (IEEE 802.3): destination, source, EtherType. */
export const ETH_DST = 0;
export const ETH_SRC = 6;
export const ETH_TYPE = 12;
export const ETH_HEADER = 14;
/** An 802.1Q-tagged frame: the tag (TPID 0x8100) where the EtherType was, its TCI, then the inner EtherType. */
export const VLAN_TCI = 14;
export const VLAN_TYPE = 16;
export const VLAN_HEADER = 4;
/** Within a tag, from the byte after its TPID: the TCI, then the EtherType that follows the tag. */
export const TAG_TCI = 0;
export const TAG_TYPE = 2;

/** Linux cooked capture v1 (LINKTYPE_LINUX_SLL): the protocol (an EtherType) ends the 16-byte header. */
export const SLL_PROTOCOL = 14;
export const SLL_HEADER = 16;
/** Linux cooked capture v2 (LINKTYPE_LINUX_SLL2): the protocol first, in a 20-byte header. */
export const SLL2_PROTOCOL = 0;
export const SLL2_HEADER = 20;
/** BSD loopback (LINKTYPE_NULL, LINKTYPE_LOOP): a 4-byte address family. */
export const LOOP_FAMILY = 0;
export const LOOP_HEADER = 4;

/** IPv4 (RFC 791 §3.1), without options. */
export const IP4_VERSION_IHL = 0;
export const IP4_TOTAL_LENGTH = 2;
export const IP4_FLAGS_FRAGMENT = 6;
export const IP4_TTL = 8;
export const IP4_PROTOCOL = 9;
export const IP4_SRC = 12;
export const IP4_DST = 16;
export const IP4_HEADER = 20;

/** IPv6 (RFC 8200 §3): the fixed header. */
export const IP6_VERSION = 0;
export const IP6_PAYLOAD_LENGTH = 4;
export const IP6_NEXT_HEADER = 6;
export const IP6_HOP_LIMIT = 7;
export const IP6_SRC = 8;
export const IP6_DST = 24;
export const IP6_HEADER = 40;
/** An IPv6 extension header (RFC 8200 §4): next header, length, at least 8 bytes; a fragment header's offset at byte 2. */
export const EXT_NEXT_HEADER = 0;
export const EXT_LENGTH = 1;
export const EXT_MIN = 8;
export const FRAG_OFFSET = 2;

/** TCP (RFC 9293 §3.1). */
export const TCP_SRCPORT = 0;
export const TCP_DSTPORT = 2;
export const TCP_DATA_OFFSET = 12;
export const TCP_FLAGS = 13;
export const TCP_HEADER = 20;

/** UDP (RFC 768). */
export const UDP_SRCPORT = 0;
export const UDP_DSTPORT = 2;
export const UDP_LENGTH = 4;
export const UDP_HEADER = 8;

/** ICMP (RFC 792) and ICMPv6 (RFC 4443): type, then code. */
export const ICMP_TYPE = 0;
export const ICMP_CODE = 1;
export const ICMP_HEADER = 4;

/** Where the transport header starts in an untagged Ethernet frame with IPv4 without options, or IPv6 without extension headers. */
export const L4_AFTER_IP4 = ETH_HEADER + IP4_HEADER;
export const L4_AFTER_IP6 = ETH_HEADER + IP6_HEADER;
