// The ring engine's native addon (#19): an AF_PACKET socket with a TPACKET_V2
// RX ring per port, read in place by JavaScript as batches, and sendmmsg whose
// buffers point into a ring. src/capture/ring-port.ts is its only user and
// wraps it into the BatchPort contract (src/capture/batch-port.ts); every
// choice below is explained there or here, the figures in
// ../shared/reference/inline-capture.md.
//
// Why TPACKET_V2 and not V3: V3 hands over blocks that close on a timeout, and
// that timeout is added to every frame's latency (measured 1.4 ms a ping
// through a V3 bridge vs 0.33 ms V2). Why sendmmsg and not a TX ring: the TX
// ring needs a copy of every frame into it; sendmmsg sends from the RX slots
// themselves (1.28-1.41 us a frame vs 1.7-1.9 for one sendto each).
//
// Lifetime, without use-after-free by design:
// * a port's JS object is held strongly (self_ref) while the port is open, so
//   an open port is never finalized; close() drops that hold;
// * close() stops the poll, DETACHES the ring's ArrayBuffer and the batch
//   arrays' (every view of them in JS becomes length 0) and only then starts
//   uv_close; the ring is unmapped, the arrays freed and the socket closed in
//   the close callback, when libuv no longer references the handle;
// * the port's memory is freed when both the close callback and the JS
//   object's finalizer have run, whichever is last;
// * an ending worker thread or process closes its open ports through an async
//   cleanup hook (the thread's loop must not end with a live handle).
// No global state: every port belongs to the env (main thread or worker) that
// opened it, and the per-env instance data only counts live ports.

#include <node_api.h>
#include <uv.h>

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif
#ifndef TP_STATUS_VLAN_TPID_VALID
#define TP_STATUS_VLAN_TPID_VALID (1 << 6)
#endif

// sendmmsg takes at most this many frames per call; bigger batches are sent
// in several calls (the kernel caps one call at UIO_MAXIOV = 1024 anyway).
#define SEND_CHUNK 256

typedef struct instance {
  uint32_t live_ports;
} instance_t;

typedef struct port {
  instance_t *inst;
  napi_env env;
  int fd;
  uint8_t *ring;
  size_t ring_len;
  uint32_t slots, slot_bytes, block_bytes, slots_per_block;
  uint32_t rx_head;    // next slot to read
  uint32_t rx_pending; // slots handed to JS and not yet released (they end at rx_head)
  // The batch arrays recv fills: offset, caplen and origLen (uint32, batch_max
  // each), then pass (uint8, batch_max), in one buffer that JS sees as an
  // external ArrayBuffer (like the ring), so neither recv nor forward needs
  // typed-array lookups (napi_get_typedarray_info ~80 ns each).
  uint32_t *meta;
  uint8_t *pass;
  uint32_t batch_max;
  uint32_t batch_count; // frames of the batch last handed to JS (forward's bound)
  uv_poll_t poll;
  int closing, closed, finalized, teardown;
  napi_ref self_ref, cb_ref, ring_ref, meta_ref;
  napi_async_context actx;
  napi_async_cleanup_hook_handle cleanup;
  struct mmsghdr *msgs;
  struct iovec *iov;
  // counters since open (the kernel's PACKET_STATISTICS resets on every read)
  double packets, bytes, truncated, batches, sent, send_errors, tp_packets, tp_drops;
  int last_send_errno;
} port_t;

// ---- errors: thrown as Error with code = errno name, errno = number ----

static const char *errno_name(int e) {
  switch (e) {
    case ENODEV: return "ENODEV";
    case ENXIO: return "ENXIO";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case ENETDOWN: return "ENETDOWN";
    case EBUSY: return "EBUSY";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    default: return "EUNKNOWN";
  }
}

static void throw_errno(napi_env env, int e, const char *what) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(e));
  napi_value code, text, err, num;
  napi_create_string_utf8(env, errno_name(e), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text);
  napi_create_error(env, code, text, &err);
  napi_create_int32(env, e, &num);
  napi_set_named_property(env, err, "errno", num);
  napi_throw(env, err);
}

#define CHECK(call)                                                   \
  do {                                                                \
    if ((call) != napi_ok) {                                          \
      bool pending_;                                                  \
      napi_is_exception_pending(env, &pending_);                      \
      if (!pending_) napi_throw_error(env, NULL, "moat-ring: " #call); \
      return NULL;                                                    \
    }                                                                 \
  } while (0)

static inline uint8_t *slot_addr(const port_t *p, uint32_t i) {
  return p->ring + (size_t)(i / p->slots_per_block) * p->block_bytes + (size_t)(i % p->slots_per_block) * p->slot_bytes;
}

static port_t *unwrap_port(napi_env env, napi_value obj) {
  port_t *p = NULL;
  if (napi_unwrap(env, obj, (void **)&p) != napi_ok || p == NULL) {
    napi_throw_type_error(env, NULL, "moat-ring: not a ring port");
    return NULL;
  }
  return p;
}

/** Data pointer and length (in elements) of a typed array argument. */
static void *typed(napi_env env, napi_value v, size_t *length) {
  napi_typedarray_type type;
  void *data = NULL;
  napi_value ab;
  size_t off;
  if (napi_get_typedarray_info(env, v, &type, length, &data, &ab, &off) != napi_ok) return NULL;
  return data;
}

// ---- closing ----

static void free_if_done(port_t *p) {
  if (p->closed && p->finalized) free(p);
}

static void on_closed(uv_handle_t *h) {
  port_t *p = h->data;
  munmap(p->ring, p->ring_len);
  close(p->fd);
  p->fd = -1;
  free(p->msgs);
  free(p->iov);
  free(p->meta);
  p->msgs = NULL;
  p->iov = NULL;
  p->meta = NULL;
  if (p->cleanup != NULL) {
    napi_async_cleanup_hook_handle c = p->cleanup;
    p->cleanup = NULL;
    napi_remove_async_cleanup_hook(c);
  }
  p->closed = 1;
  // At teardown too, the JS object's finalizer runs (Node finalizes every
  // wrapped object when an env ends), before or after this callback: the
  // later of the two frees. Freeing here unconditionally was a double free
  // (found by the worker test that ends a thread with its port open).
  free_if_done(p);
}

/** The env is ending (worker exit, process exit): close without JS. */
static void on_teardown(napi_async_cleanup_hook_handle handle, void *arg) {
  port_t *p = arg;
  if (p->closing) return; // its uv_close is under way: on_closed removes the hook
  p->closing = 1;
  p->teardown = 1;
  p->inst->live_ports--;
  uv_poll_stop(&p->poll);
  uv_close((uv_handle_t *)&p->poll, on_closed);
}

static void on_finalize(napi_env env, void *data, void *hint) {
  port_t *p = data;
  p->finalized = 1;
  if (!p->closing) {
    // Not reachable while open (self_ref holds the object); kept for safety.
    p->closing = 1;
    p->teardown = 1;
    p->inst->live_ports--;
    uv_poll_stop(&p->poll);
    uv_close((uv_handle_t *)&p->poll, on_closed);
    return;
  }
  if (p->self_ref != NULL) {
    napi_delete_reference(env, p->self_ref);
    p->self_ref = NULL;
  }
  free_if_done(p);
}

// ---- readiness ----

static uint32_t recv_batch(port_t *p);
static void release_batch(port_t *p);

// Most batches handed to JS per readable event: then the loop goes on to its
// other handles (timers, the control channel) and the level-triggered poll
// calls again at once if frames are left.
#define MAX_BATCHES_PER_EVENT 64

/**
 * Calls onEvent(arg) with `this` the port's object; false when the port is
 * gone (closed, or its references already dropped).
 */
static int call_js(port_t *p, int32_t arg) {
  napi_env env = p->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return 0;
  napi_value cb, self, argv, result;
  int ok = 0;
  if (napi_get_reference_value(env, p->cb_ref, &cb) == napi_ok && cb != NULL &&
      napi_get_reference_value(env, p->self_ref, &self) == napi_ok && self != NULL) {
    ok = 1;
    napi_create_int32(env, arg, &argv);
    // make_callback: runs the microtasks and nextTicks the callback queued, like any libuv callback of Node's own.
    if (napi_make_callback(env, p->actx, self, cb, 1, &argv, &result) != napi_ok) {
      bool pending = false;
      napi_is_exception_pending(env, &pending);
      if (pending) {
        napi_value exc;
        napi_get_and_clear_last_exception(env, &exc);
        napi_fatal_exception(env, exc);
      }
    }
  }
  napi_close_handle_scope(env, scope);
  return ok;
}

// Readable: the batches are received and released HERE, and JS is called once
// per batch with its frame count (onEvent(n), n > 0), the batch already in the
// meta arrays. Receiving and releasing from JS cost two more JS -> native
// calls per batch, and at the daemon's usual load (a few frames a wakeup) the
// per-batch costs are most of the per-frame cost (measured: see ring-port.ts).
static void on_poll(uv_poll_t *h, int status, int events) {
  port_t *p = h->data;
  if (p->closing) return;
  if (status < 0) {
    // POLLERR: libuv has stopped the handle. The socket's pending error says
    // why (ENETDOWN when the interface went down or was deleted); reading it
    // clears it. The JS side closes the port and reopens when the link is back.
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    uv_poll_stop(&p->poll);
    call_js(p, -(err != 0 ? err : ENETDOWN));
    return;
  }
  for (int round = 0; round < MAX_BATCHES_PER_EVENT; round++) {
    uint32_t n = recv_batch(p);
    if (n == 0) return;
    int live = call_js(p, (int32_t)n);
    // The callback may have closed the port (close, or a link loss it
    // noticed): its ring is unmapped later (uv_close's callback), but its
    // slots are no longer ours to hand back or read.
    if (p->closing || !live) return;
    release_batch(p);
    // A short batch emptied the ring: skip the recv that would confirm it.
    // Frames that came in meanwhile make the level-triggered poll call again.
    if (n < p->batch_max) return;
  }
}

// ---- exported functions ----

static int set_int(int fd, int level, int opt, int value) {
  return setsockopt(fd, level, opt, &value, sizeof value);
}

/** probe(): null when this kernel and process can run the engine, else why not. */
static napi_value js_probe(napi_env env, napi_callback_info info) {
  napi_value out;
  const char *why = NULL;
  char buf[200];
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(buf, sizeof buf, "cannot open an AF_PACKET socket (%s): the engine needs CAP_NET_RAW and CAP_NET_ADMIN", strerror(errno));
    why = buf;
  } else if (set_int(fd, SOL_PACKET, PACKET_VERSION, TPACKET_V2) != 0) {
    snprintf(buf, sizeof buf, "the kernel lacks TPACKET_V2 rings (%s)", strerror(errno));
    why = buf;
  } else if (set_int(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1) != 0) {
    snprintf(buf, sizeof buf, "the kernel lacks PACKET_IGNORE_OUTGOING (Linux >= 4.20) (%s)", strerror(errno));
    why = buf;
  } else if (set_int(fd, SOL_PACKET, PACKET_QDISC_BYPASS, 1) != 0) {
    snprintf(buf, sizeof buf, "the kernel lacks PACKET_QDISC_BYPASS (Linux >= 3.14) (%s)", strerror(errno));
    why = buf;
  }
  if (fd >= 0) close(fd);
  if (why == NULL) napi_get_null(env, &out);
  else napi_create_string_utf8(env, why, NAPI_AUTO_LENGTH, &out);
  return out;
}

/** ifState(name): 1 up, 0 down, -errno (-ENODEV: no such interface). */
static napi_value js_if_state(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], out;
  char name[IFNAMSIZ + 1];
  size_t n = 0;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(napi_get_value_string_utf8(env, argv[0], name, sizeof name, &n));
  int result;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    result = -errno;
  } else {
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    memcpy(ifr.ifr_name, name, n < IFNAMSIZ ? n : IFNAMSIZ - 1);
    result = ioctl(fd, SIOCGIFFLAGS, &ifr) != 0 ? -errno : (ifr.ifr_flags & IFF_UP) ? 1 : 0;
    close(fd);
  }
  CHECK(napi_create_int32(env, result, &out));
  return out;
}

/**
 * open(name, slotBytes, ringBytes, batchMax, fanoutGroup (-1: none),
 *      fanoutDefrag, promiscuous, ignoreOutgoing, qdiscBypass, onEvent)
 * -> { ring: ArrayBuffer, meta: ArrayBuffer, slots, slotBytes, ifindex }
 * meta holds the batch arrays: offset, caplen, origLen (uint32, batchMax
 * each, in that order), then pass (uint8, batchMax).
 * onEvent(n > 0) when a batch of n frames is in the meta arrays (pass[]
 * zeroed): it is JS's until onEvent returns, then its slots go back to the
 * kernel. onEvent(-errno) when the socket failed (the interface went down or
 * away). `this` is the returned object.
 */
static napi_value js_open(napi_env env, napi_callback_info info) {
  size_t argc = 10;
  napi_value argv[10];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 10) {
    napi_throw_type_error(env, NULL, "moat-ring: open takes 10 arguments");
    return NULL;
  }
  char name[IFNAMSIZ + 1];
  size_t nlen = 0;
  uint32_t slot_bytes, ring_bytes, batch_max;
  int32_t fanout;
  bool defrag, promisc, ignore_out, bypass;
  CHECK(napi_get_value_string_utf8(env, argv[0], name, sizeof name, &nlen));
  CHECK(napi_get_value_uint32(env, argv[1], &slot_bytes));
  CHECK(napi_get_value_uint32(env, argv[2], &ring_bytes));
  CHECK(napi_get_value_uint32(env, argv[3], &batch_max));
  CHECK(napi_get_value_int32(env, argv[4], &fanout));
  CHECK(napi_get_value_bool(env, argv[5], &defrag));
  CHECK(napi_get_value_bool(env, argv[6], &promisc));
  CHECK(napi_get_value_bool(env, argv[7], &ignore_out));
  CHECK(napi_get_value_bool(env, argv[8], &bypass));
  if (batch_max == 0 || batch_max > 65536) {
    napi_throw_range_error(env, NULL, "moat-ring: batchMax out of range");
    return NULL;
  }

  unsigned ifindex = if_nametoindex(name);
  if (ifindex == 0) {
    throw_errno(env, errno == 0 ? ENODEV : errno, "no such interface");
    return NULL;
  }
  long page = sysconf(_SC_PAGESIZE);
  uint32_t block_bytes = (uint32_t)(((slot_bytes + page - 1) / page) * page);
  uint32_t per_block = block_bytes / slot_bytes;
  uint32_t blocks = ring_bytes / block_bytes;
  if (blocks == 0) blocks = 1;

  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    throw_errno(env, errno, "socket(AF_PACKET)");
    return NULL;
  }
  uint8_t *ring = MAP_FAILED;
  size_t ring_len = (size_t)blocks * block_bytes;
  const char *step;
#define STEP(what, call) \
  do {                   \
    step = what;         \
    if ((call) != 0) goto fail; \
  } while (0)
  STEP("PACKET_VERSION TPACKET_V2", set_int(fd, SOL_PACKET, PACKET_VERSION, TPACKET_V2));
  if (ignore_out) STEP("PACKET_IGNORE_OUTGOING (needs Linux >= 4.20)", set_int(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1));
  if (bypass) STEP("PACKET_QDISC_BYPASS (needs Linux >= 3.14)", set_int(fd, SOL_PACKET, PACKET_QDISC_BYPASS, 1));
  struct tpacket_req req = {
      .tp_block_size = block_bytes, .tp_block_nr = blocks, .tp_frame_size = slot_bytes, .tp_frame_nr = blocks * per_block};
  STEP("PACKET_RX_RING", setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req));
  ring = mmap(NULL, ring_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  step = "mmap of the ring";
  if (ring == MAP_FAILED) goto fail;
  struct sockaddr_ll sll;
  memset(&sll, 0, sizeof sll);
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = (int)ifindex;
  STEP("bind", bind(fd, (struct sockaddr *)&sll, sizeof sll));
  if (promisc) {
    struct packet_mreq mr;
    memset(&mr, 0, sizeof mr);
    mr.mr_ifindex = (int)ifindex;
    mr.mr_type = PACKET_MR_PROMISC;
    STEP("PACKET_ADD_MEMBERSHIP PACKET_MR_PROMISC", setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr));
  }
  if (fanout >= 0) {
    int type = PACKET_FANOUT_HASH | (defrag ? PACKET_FANOUT_FLAG_DEFRAG : 0);
    STEP("PACKET_FANOUT", set_int(fd, SOL_PACKET, PACKET_FANOUT, (fanout & 0xffff) | (type << 16)));
  }
#undef STEP

  port_t *p = calloc(1, sizeof *p);
  struct mmsghdr *msgs = calloc(SEND_CHUNK, sizeof *msgs);
  struct iovec *iov = calloc(SEND_CHUNK, sizeof *iov);
  uint32_t *meta = calloc(1, (size_t)batch_max * 13); // 3 uint32 arrays + pass (uint8)
  if (p == NULL || msgs == NULL || iov == NULL || meta == NULL) {
    free(p), free(msgs), free(iov), free(meta);
    errno = ENOMEM;
    step = "allocation";
    goto fail;
  }
  for (int i = 0; i < SEND_CHUNK; i++) {
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  CHECK(napi_get_instance_data(env, (void **)&p->inst));
  p->env = env;
  p->fd = fd;
  p->ring = ring;
  p->ring_len = ring_len;
  p->slots = blocks * per_block;
  p->slot_bytes = slot_bytes;
  p->block_bytes = block_bytes;
  p->slots_per_block = per_block;
  p->msgs = msgs;
  p->iov = iov;
  p->meta = meta;
  p->pass = (uint8_t *)(meta + 3 * (size_t)batch_max);
  p->batch_max = batch_max;

  napi_value obj, ab, v, name_v;
  CHECK(napi_create_object(env, &obj));
  // The ring as ONE external ArrayBuffer, no copy. Its finalizer does nothing:
  // the ring is unmapped by close, after this buffer is detached.
  CHECK(napi_create_external_arraybuffer(env, ring, ring_len, NULL, NULL, &ab));
  CHECK(napi_set_named_property(env, obj, "ring", ab));
  napi_value meta_ab;
  CHECK(napi_create_external_arraybuffer(env, meta, (size_t)batch_max * 13, NULL, NULL, &meta_ab));
  CHECK(napi_set_named_property(env, obj, "meta", meta_ab));
  CHECK(napi_create_uint32(env, p->slots, &v));
  CHECK(napi_set_named_property(env, obj, "slots", v));
  CHECK(napi_create_uint32(env, slot_bytes, &v));
  CHECK(napi_set_named_property(env, obj, "slotBytes", v));
  CHECK(napi_create_uint32(env, ifindex, &v));
  CHECK(napi_set_named_property(env, obj, "ifindex", v));
  CHECK(napi_wrap(env, obj, p, on_finalize, NULL, NULL));
  CHECK(napi_create_reference(env, obj, 1, &p->self_ref));
  CHECK(napi_create_reference(env, argv[9], 1, &p->cb_ref));
  CHECK(napi_create_reference(env, ab, 0, &p->ring_ref)); // weak: only to detach it at close if still alive
  CHECK(napi_create_reference(env, meta_ab, 0, &p->meta_ref));
  CHECK(napi_create_string_utf8(env, "MoatRingPort", NAPI_AUTO_LENGTH, &name_v));
  CHECK(napi_async_init(env, obj, name_v, &p->actx));

  uv_loop_t *loop;
  CHECK(napi_get_uv_event_loop(env, &loop));
  p->poll.data = p;
  int r = uv_poll_init(loop, &p->poll, fd);
  if (r == 0) r = uv_poll_start(&p->poll, UV_READABLE, on_poll);
  if (r != 0) {
    // Cannot happen for a packet socket; fail loudly rather than half-open.
    napi_throw_error(env, NULL, uv_strerror(r));
    return NULL;
  }
  CHECK(napi_add_async_cleanup_hook(env, on_teardown, p, &p->cleanup));
  p->inst->live_ports++;
  return obj;

fail: {
  int e = errno;
  if (ring != MAP_FAILED) munmap(ring, ring_len);
  close(fd);
  char what[200];
  snprintf(what, sizeof what, "%s on %s", step, name);
  throw_errno(env, e, what);
  return NULL;
}
}

/**
 * Hands the next n (<= batchMax) frames the kernel has filled to JS, in ring
 * order, never waiting: their (offset, caplen, origLen) into the meta arrays,
 * pass[] zeroed. They stay JS's until release_batch.
 */
static uint32_t recv_batch(port_t *p) {
  uint32_t n = 0;
  uint32_t max = p->batch_max;
  uint32_t *off = p->meta, *cap = p->meta + max, *orig = p->meta + 2 * (size_t)max;
  // Room before a frame's MAC header that holds nothing we need (the
  // tpacket2_hdr and the sockaddr_ll the kernel writes after it).
  const uint32_t header_end = TPACKET_ALIGN(sizeof(struct tpacket2_hdr)) + sizeof(struct sockaddr_ll);
  while (n < max && p->rx_pending < p->slots) {
    uint8_t *slot = slot_addr(p, p->rx_head);
    struct tpacket2_hdr *h = (struct tpacket2_hdr *)slot;
    uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
    if ((status & TP_STATUS_USER) == 0) break;
    uint32_t mac = h->tp_mac, snap = h->tp_snaplen, len = h->tp_len;
    if ((status & TP_STATUS_VLAN_VALID) != 0 && snap >= 12 && mac >= header_end + 4) {
      // The NIC (or veth) took the 802.1Q tag off into tp_vlan_tci: put it
      // back in place, in the free bytes before the frame, so the frame is
      // forwarded as it arrived (what libpcap does, without its copy).
      uint8_t *frame = slot + mac;
      memmove(frame - 4, frame, 12);
      uint16_t tpid = (status & TP_STATUS_VLAN_TPID_VALID) != 0 ? h->tp_vlan_tpid : ETH_P_8021Q;
      frame[8] = (uint8_t)(tpid >> 8);
      frame[9] = (uint8_t)tpid;
      frame[10] = (uint8_t)(h->tp_vlan_tci >> 8);
      frame[11] = (uint8_t)h->tp_vlan_tci;
      mac -= 4, snap += 4, len += 4;
    }
    off[n] = (uint32_t)(slot - p->ring) + mac;
    cap[n] = snap;
    orig[n] = len;
    if (snap < len) p->truncated++;
    p->bytes += snap;
    n++;
    p->rx_pending++;
    p->rx_head = p->rx_head + 1 == p->slots ? 0 : p->rx_head + 1;
  }
  p->packets += n;
  if (n > 0) p->batches++;
  memset(p->pass, 0, n);
  p->batch_count = n;
  return n;
}

/** Gives every slot recv_batch handed over back to the kernel. */
static void release_batch(port_t *p) {
  uint32_t i = (p->rx_head + p->slots - p->rx_pending) % p->slots;
  for (uint32_t k = 0; k < p->rx_pending; k++) {
    struct tpacket2_hdr *h = (struct tpacket2_hdr *)slot_addr(p, i);
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    i = i + 1 == p->slots ? 0 : i + 1;
  }
  p->rx_pending = 0;
  p->batch_count = 0;
}

static uint32_t flush(port_t *p, uint32_t k) {
  uint32_t sent = 0, j = 0;
  while (j < k) {
    int r = sendmmsg(p->fd, p->msgs + j, k - j, MSG_DONTWAIT);
    if (r > 0) {
      sent += (uint32_t)r;
      j += (uint32_t)r;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      // The first frame left was refused (ENOBUFS on a full device queue,
      // ENETDOWN, EMSGSIZE...): count it and go on with the next.
      p->send_errors++;
      p->last_send_errno = r < 0 ? errno : EIO;
      j++;
    }
  }
  p->sent += sent;
  return sent;
}

/**
 * send(port, bytes, offset, caplen, origLen, pass, count) -> frames sent:
 * sends frame i of bytes (any Uint8Array: another port's ring, or this one's)
 * when pass[i] is 1 and it is whole (caplen == origLen), with sendmmsg whose
 * iovecs point into bytes.
 */
static napi_value js_send(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7], out;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  port_t *p = unwrap_port(env, argv[0]);
  if (p == NULL) return NULL;
  size_t n_bytes, n_off, n_cap, n_orig, n_pass;
  uint8_t *bytes = typed(env, argv[1], &n_bytes), *pass = typed(env, argv[5], &n_pass);
  uint32_t *off = typed(env, argv[2], &n_off), *cap = typed(env, argv[3], &n_cap), *orig = typed(env, argv[4], &n_orig);
  uint32_t count;
  CHECK(napi_get_value_uint32(env, argv[6], &count));
  uint32_t sent = 0;
  if (!p->closing && off != NULL && cap != NULL && orig != NULL && pass != NULL && (bytes != NULL || n_bytes == 0)) {
    if (count > n_off) count = (uint32_t)n_off;
    if (count > n_cap) count = (uint32_t)n_cap;
    if (count > n_orig) count = (uint32_t)n_orig;
    if (count > n_pass) count = (uint32_t)n_pass;
    uint32_t k = 0;
    for (uint32_t i = 0; i < count; i++) {
      if (pass[i] != 1 || cap[i] != orig[i] || cap[i] == 0) continue;
      if ((uint64_t)off[i] + cap[i] > n_bytes) {
        p->send_errors++;
        p->last_send_errno = EFAULT;
        continue;
      }
      p->iov[k].iov_base = bytes + off[i];
      p->iov[k].iov_len = cap[i];
      if (++k == SEND_CHUNK) {
        sent += flush(p, k);
        k = 0;
      }
    }
    if (k > 0) sent += flush(p, k);
  }
  CHECK(napi_create_uint32(env, sent, &out));
  return out;
}

/**
 * forward(port, src, count) -> frames sent: send() of the batch src (a ring
 * port, possibly this one) is handing to JS, from its own meta arrays and
 * ring: the same frames go, with two object unwraps instead of five typed
 * array lookups (~80 ns each, 0.4 us a batch: at a few frames a batch, a
 * tenth of the whole cost per frame).
 */
static napi_value js_forward(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], out;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  port_t *p = unwrap_port(env, argv[0]);
  if (p == NULL) return NULL;
  port_t *src = unwrap_port(env, argv[1]);
  if (src == NULL) return NULL;
  uint32_t count;
  CHECK(napi_get_value_uint32(env, argv[2], &count));
  uint32_t sent = 0;
  if (!p->closing && !src->closing) {
    if (count > src->batch_count) count = src->batch_count;
    uint32_t max = src->batch_max;
    const uint32_t *off = src->meta, *cap = src->meta + max, *orig = src->meta + 2 * (size_t)max;
    const uint8_t *pass = src->pass;
    uint32_t k = 0;
    for (uint32_t i = 0; i < count; i++) {
      if (pass[i] != 1 || cap[i] != orig[i] || cap[i] == 0) continue;
      if ((uint64_t)off[i] + cap[i] > src->ring_len) {
        p->send_errors++;
        p->last_send_errno = EFAULT;
        continue;
      }
      p->iov[k].iov_base = src->ring + off[i];
      p->iov[k].iov_len = cap[i];
      if (++k == SEND_CHUNK) {
        sent += flush(p, k);
        k = 0;
      }
    }
    if (k > 0) sent += flush(p, k);
  }
  CHECK(napi_create_uint32(env, sent, &out));
  return out;
}

/**
 * stats(port, out: Float64Array(9)): packets, bytes, truncated, batches,
 * ring packets (tp_packets), ring drops (tp_drops), sent, send errors, errno
 * of the last send error. TPACKET_V2 has no freeze counter (ring freezes are
 * a V3 block concept): the wrapper reports 0.
 */
static napi_value js_stats(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  port_t *p = unwrap_port(env, argv[0]);
  if (p == NULL) return NULL;
  size_t n;
  double *o = typed(env, argv[1], &n);
  if (o == NULL || n < 9) {
    napi_throw_type_error(env, NULL, "moat-ring: stats needs a Float64Array(9)");
    return NULL;
  }
  if (!p->closing) {
    struct tpacket_stats st;
    socklen_t len = sizeof st;
    if (getsockopt(p->fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
      p->tp_packets += st.tp_packets;
      p->tp_drops += st.tp_drops;
    }
  }
  o[0] = p->packets, o[1] = p->bytes, o[2] = p->truncated, o[3] = p->batches;
  o[4] = p->tp_packets, o[5] = p->tp_drops, o[6] = p->sent, o[7] = p->send_errors, o[8] = p->last_send_errno;
  return NULL;
}

/** close(port): idempotent; see the lifetime notes at the top. */
static napi_value js_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  port_t *p = unwrap_port(env, argv[0]);
  if (p == NULL || p->closing) return NULL;
  // Last statistics before the socket goes (ring drops of the final moments).
  struct tpacket_stats st;
  socklen_t len = sizeof st;
  if (getsockopt(p->fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
    p->tp_packets += st.tp_packets;
    p->tp_drops += st.tp_drops;
  }
  p->closing = 1;
  p->inst->live_ports--;
  uv_poll_stop(&p->poll);
  napi_value ab;
  if (napi_get_reference_value(env, p->ring_ref, &ab) == napi_ok && ab != NULL) CHECK(napi_detach_arraybuffer(env, ab));
  if (napi_get_reference_value(env, p->meta_ref, &ab) == napi_ok && ab != NULL) CHECK(napi_detach_arraybuffer(env, ab));
  napi_delete_reference(env, p->ring_ref);
  napi_delete_reference(env, p->meta_ref);
  p->meta_ref = NULL;
  napi_delete_reference(env, p->cb_ref);
  p->ring_ref = p->cb_ref = NULL;
  napi_async_destroy(env, p->actx);
  uint32_t refs;
  napi_reference_unref(env, p->self_ref, &refs); // the object may now be collected; its finalizer frees p
  uv_close((uv_handle_t *)&p->poll, on_closed);
  return NULL;
}

/** livePorts(): ports open in this env (main thread or worker). */
static napi_value js_live_ports(napi_env env, napi_callback_info info) {
  instance_t *inst;
  napi_value out;
  CHECK(napi_get_instance_data(env, (void **)&inst));
  CHECK(napi_create_uint32(env, inst->live_ports, &out));
  return out;
}

static void free_instance(napi_env env, void *data, void *hint) {
  free(data);
}

static napi_status define_thread_priority(napi_env env, napi_value exports);

NAPI_MODULE_INIT() {
  instance_t *inst = calloc(1, sizeof *inst);
  if (inst == NULL || napi_set_instance_data(env, inst, free_instance, NULL) != napi_ok) return NULL;
  napi_property_descriptor props[] = {
      {"probe", NULL, js_probe, NULL, NULL, NULL, napi_enumerable, NULL},
      {"ifState", NULL, js_if_state, NULL, NULL, NULL, napi_enumerable, NULL},
      {"open", NULL, js_open, NULL, NULL, NULL, napi_enumerable, NULL},
      {"forward", NULL, js_forward, NULL, NULL, NULL, napi_enumerable, NULL},
      {"send", NULL, js_send, NULL, NULL, NULL, napi_enumerable, NULL},
      {"stats", NULL, js_stats, NULL, NULL, NULL, napi_enumerable, NULL},
      {"close", NULL, js_close, NULL, NULL, NULL, napi_enumerable, NULL},
      {"livePorts", NULL, js_live_ports, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  if (napi_define_properties(env, exports, sizeof props / sizeof props[0], props) != napi_ok) return NULL;
  if (define_thread_priority(env, exports) != napi_ok) return NULL;
  return exports;
}

// ---------------------------------------------------------------------------
// Thread priorities (issue #17 item 11): the calling thread's nice value and
// name, for src/capture/thread-priority.ts. On Linux nice is per thread (a
// task): setpriority(PRIO_PROCESS, gettid()) changes this thread only, and a
// thread it creates afterwards inherits the value. Lowering (a larger nice) is
// always permitted; raising needs root or CAP_SYS_NICE (or RLIMIT_NICE).
// Nothing here touches a port: it works in any thread, ports or not.

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/** setThreadNice(nice): 0 when this thread now runs at `nice`, else the errno (EPERM/EACCES: not permitted). */
static napi_value js_set_thread_nice(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], out;
  int32_t nice;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(napi_get_value_int32(env, argv[0], &nice));
  pid_t tid = (pid_t)syscall(SYS_gettid);
  int rc = setpriority(PRIO_PROCESS, (id_t)tid, nice) == 0 ? 0 : errno;
  CHECK(napi_create_int32(env, rc, &out));
  return out;
}

/** threadNice(): this thread's nice value. */
static napi_value js_thread_nice(napi_env env, napi_callback_info info) {
  napi_value out;
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)); // -1 is a valid nice: errno tells
  CHECK(napi_create_int32(env, errno == 0 ? nice : 0, &out));
  return out;
}

/** threadId(): this thread's kernel id (its /proc/<pid>/task/<tid>). */
static napi_value js_thread_id(napi_env env, napi_callback_info info) {
  napi_value out;
  CHECK(napi_create_int32(env, (int32_t)syscall(SYS_gettid), &out));
  return out;
}

/** setThreadName(name): this thread's name (comm, at most 15 bytes: longer is cut), as top -H and /proc show it. */
static napi_value js_set_thread_name(napi_env env, napi_callback_info info) {
  size_t argc = 1, len;
  napi_value argv[1];
  char name[16];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(napi_get_value_string_utf8(env, argv[0], name, sizeof name, &len));
  prctl(PR_SET_NAME, name, 0, 0, 0);
  return NULL;
}

// CPU affinity (capture.cpus): a thread of the daemon pinned to CPUs, so the
// packet workers get cores of their own, away from the daemon's update work
// (and, where the host gives it one, from the control plane). Linux affinity
// is per thread too: sched_setaffinity(tid) changes that thread only, and a
// thread it creates afterwards inherits the mask. Any thread of the process
// may pin any other of it (the daemon's main thread pins the threads node and
// V8 started before it ran), and no privilege is needed within the CPUs the
// process's cpuset allows: a CPU outside them is EINVAL.

#include <sched.h>

/** setThreadAffinity(cpus, tid = 0): 0 when thread `tid` (0: the calling one) may now run on `cpus` only, else the errno (EINVAL: none of them allowed, ESRCH: no such thread). */
static napi_value js_set_thread_affinity(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], out;
  uint32_t n = 0;
  int32_t tid = 0;
  cpu_set_t set;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc > 1) CHECK(napi_get_value_int32(env, argv[1], &tid));
  CHECK(napi_get_array_length(env, argv[0], &n));
  CPU_ZERO(&set);
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    int32_t cpu;
    CHECK(napi_get_element(env, argv[0], i, &v));
    CHECK(napi_get_value_int32(env, v, &cpu));
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      CHECK(napi_create_int32(env, EINVAL, &out));
      return out;
    }
    CPU_SET(cpu, &set);
  }
  int rc = sched_setaffinity((pid_t)tid, sizeof set, &set) == 0 ? 0 : errno;
  CHECK(napi_create_int32(env, rc, &out));
  return out;
}

/** threadAffinity(tid = 0): the CPUs thread `tid` (0: the calling one) may run on, ascending; [] when it cannot be read. */
static napi_value js_thread_affinity(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], out;
  int32_t tid = 0;
  cpu_set_t set;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc > 0) CHECK(napi_get_value_int32(env, argv[0], &tid));
  CHECK(napi_create_array(env, &out));
  if (sched_getaffinity((pid_t)tid, sizeof set, &set) != 0) return out;
  uint32_t k = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, &set)) continue;
    napi_value v;
    CHECK(napi_create_int32(env, cpu, &v));
    CHECK(napi_set_element(env, out, k++, v));
  }
  return out;
}

static napi_status define_thread_priority(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"setThreadNice", NULL, js_set_thread_nice, NULL, NULL, NULL, napi_enumerable, NULL},
      {"threadNice", NULL, js_thread_nice, NULL, NULL, NULL, napi_enumerable, NULL},
      {"threadId", NULL, js_thread_id, NULL, NULL, NULL, napi_enumerable, NULL},
      {"setThreadName", NULL, js_set_thread_name, NULL, NULL, NULL, napi_enumerable, NULL},
      {"setThreadAffinity", NULL, js_set_thread_affinity, NULL, NULL, NULL, napi_enumerable, NULL},
      {"threadAffinity", NULL, js_thread_affinity, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
