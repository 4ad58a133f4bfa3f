// The floor of the inline benchmark (#19 item 7, bench/inline.bench.ts): the
// smallest forwarder with the ring engine's AF_PACKET design, and nothing else.
// Per port a TPACKET_V2 RX ring (PACKET_IGNORE_OUTGOING, PACKET_QDISC_BYPASS,
// promiscuous), as src/capture/ring/moat-ring.c opens it; every frame one port's
// ring holds is sent out of the other port with sendmmsg straight from the ring
// slot (no copy), then the slots go back to the kernel. No JavaScript, no
// decoding, no rules, one thread blocked in poll(). What the ring engine costs
// above this is our addon, JS and the rules; what this costs above the kernel
// bridge is the AF_PACKET design itself.
//
// Usage: floor-forwarder IFACE_A IFACE_B [RING_BYTES]
// Prints "ready" once both rings are open; each line on stdin is answered with
// {"forwarded":N,"captured":N,"drops":N,"sendErrors":N} (counters since start;
// drops: frames the kernel dropped because a ring was full). Ends on SIGTERM or
// when stdin closes. Compiled by the benchmark with `cc -O2` at run time.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

// The addon's slot size for a 1500-byte MTU (ring-port.ts) and its sendmmsg chunk.
#define SLOT_BYTES 2048
#define CHUNK 256

typedef struct {
  int fd;
  uint8_t *ring;
  uint32_t slots, slots_per_block, block_bytes, head;
  unsigned long long captured, drops;
} port_t;

static uint8_t *slot_addr(port_t *p, uint32_t i) {
  return p->ring + (size_t)(i / p->slots_per_block) * p->block_bytes + (size_t)(i % p->slots_per_block) * SLOT_BYTES;
}

static void die(const char *what, const char *iface) {
  fprintf(stderr, "floor-forwarder: %s on %s: %s\n", what, iface, strerror(errno));
  exit(1);
}

static void open_port(port_t *p, const char *iface, uint32_t ring_bytes) {
  int one = 1, v2 = TPACKET_V2;
  unsigned ifindex = if_nametoindex(iface);
  if (ifindex == 0) die("if_nametoindex", iface);
  p->fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, 0);
  if (p->fd < 0) die("socket(AF_PACKET)", iface);
  if (setsockopt(p->fd, SOL_PACKET, PACKET_VERSION, &v2, sizeof v2) != 0) die("PACKET_VERSION", iface);
  if (setsockopt(p->fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0) die("PACKET_IGNORE_OUTGOING", iface);
  if (setsockopt(p->fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0) die("PACKET_QDISC_BYPASS", iface);
  long page = sysconf(_SC_PAGESIZE);
  p->block_bytes = (uint32_t)(((SLOT_BYTES + page - 1) / page) * page);
  p->slots_per_block = p->block_bytes / SLOT_BYTES;
  uint32_t blocks = ring_bytes / p->block_bytes;
  if (blocks == 0) blocks = 1;
  p->slots = blocks * p->slots_per_block;
  struct tpacket_req req = {.tp_block_size = p->block_bytes, .tp_block_nr = blocks, .tp_frame_size = SLOT_BYTES, .tp_frame_nr = p->slots};
  if (setsockopt(p->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0) die("PACKET_RX_RING", iface);
  p->ring = mmap(NULL, (size_t)blocks * p->block_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
  if (p->ring == MAP_FAILED) die("mmap", iface);
  struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = (int)ifindex};
  if (bind(p->fd, (struct sockaddr *)&sll, sizeof sll) != 0) die("bind", iface);
  struct packet_mreq mr = {.mr_ifindex = (int)ifindex, .mr_type = PACKET_MR_PROMISC};
  if (setsockopt(p->fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0) die("PACKET_MR_PROMISC", iface);
}

static struct mmsghdr msgs[CHUNK];
static struct iovec iov[CHUNK];
static unsigned long long forwarded, send_errors;

/** Sends msgs[0..k) out of `out`, counting what the kernel refused. */
static void flush(port_t *out, uint32_t k) {
  uint32_t j = 0;
  while (j < k) {
    int r = sendmmsg(out->fd, msgs + j, k - j, MSG_DONTWAIT);
    if (r > 0) {
      forwarded += (unsigned)r;
      j += (unsigned)r;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      send_errors++;
      j++;
    }
  }
}

/** Forwards everything `in`'s ring holds out of `out`, CHUNK frames per sendmmsg. */
static void drain(port_t *in, port_t *out) {
  for (;;) {
    uint32_t k = 0, first = in->head;
    while (k < CHUNK) {
      struct tpacket2_hdr *h = (struct tpacket2_hdr *)slot_addr(in, in->head);
      if ((__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) == 0) break;
      iov[k].iov_base = (uint8_t *)h + h->tp_mac;
      iov[k].iov_len = h->tp_snaplen;
      msgs[k].msg_hdr.msg_iov = &iov[k];
      msgs[k].msg_hdr.msg_iovlen = 1;
      k++;
      in->head = in->head + 1 == in->slots ? 0 : in->head + 1;
    }
    if (k == 0) return;
    in->captured += k;
    flush(out, k);
    for (uint32_t i = first, n = 0; n < k; n++, i = i + 1 == in->slots ? 0 : i + 1)
      __atomic_store_n(&((struct tpacket2_hdr *)slot_addr(in, i))->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
  }
}

static unsigned long long ring_drops(port_t *p) {
  struct tpacket_stats st;
  socklen_t len = sizeof st;
  if (getsockopt(p->fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) p->drops += st.tp_drops; // resets on read
  return p->drops;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: floor-forwarder IFACE_A IFACE_B [RING_BYTES]\n");
    return 2;
  }
  uint32_t ring_bytes = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 128u << 20;
  port_t a = {0}, b = {0};
  open_port(&a, argv[1], ring_bytes);
  open_port(&b, argv[2], ring_bytes);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("ready\n");
  struct pollfd fds[3] = {{.fd = a.fd, .events = POLLIN}, {.fd = b.fd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
  char line[256];
  for (;;) {
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll", argv[1]);
    }
    if (fds[0].revents & POLLIN) drain(&a, &b);
    if (fds[1].revents & POLLIN) drain(&b, &a);
    if (fds[2].revents & (POLLIN | POLLHUP)) {
      if (fgets(line, sizeof line, stdin) == NULL) return 0;
      unsigned long long d = ring_drops(&a) + ring_drops(&b);
      printf("{\"forwarded\":%llu,\"captured\":%llu,\"drops\":%llu,\"sendErrors\":%llu}\n", forwarded, a.captured + b.captured, d, send_errors);
    }
  }
}
