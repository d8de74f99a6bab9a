#pragma once
#include <chrono>

// Dead-peer detection on a TCP connection by the kernel: keepalive probes while the connection
// is idle, TCP_USER_TIMEOUT while data we sent is unacknowledged. A peer host that powers off
// or is cut off answers neither, so a blocked read or send fails with ETIMEDOUT instead of
// waiting out its own deadline. Both are answered by the peer's kernel, not its application,
// so a busy, loaded or even stopped peer process is not taken for dead. docs/store.md, "Dead
// peers: TCP keepalive and TCP_USER_TIMEOUT", gives the reasoning behind the defaults.
namespace ddp {

struct TcpLiveness {
  // Idle seconds before the first keepalive probe (TCP_KEEPIDLE), then seconds between probes
  // (TCP_KEEPINTVL): an idle connection is probed from 1 s on, once a second.
  int keepidle_s = 1;
  int keepintvl_s = 1;
  // Unanswered probes before the connection is dropped (TCP_KEEPCNT): 1 + 2 x 1 = 3 s. Linux
  // ignores it while user_timeout_ms is set, which then bounds the probing too (3 s as well).
  int keepcnt = 2;
  // Milliseconds sent data may stay unacknowledged, or an idle connection may go without
  // hearing from its peer, before it is dropped (TCP_USER_TIMEOUT); 0 keeps the kernel's
  // default (about 15 minutes of retransmissions). Linux counts it from the last packet
  // received, so the silence it tolerates is this less up to keepidle_s. Linux applies it to
  // a closed receive window too: a live peer that stops reading while more than a socket buffer
  // of our data waits is dropped after this long (why the direct mesh sets 0).
  int user_timeout_ms = 3000;
  // The longest wait between two sends of unacknowledged data (TCP_RTO_MAX_MS, Linux 6.15 on),
  // so a connection carries bytes again within it once a cut link is back; 0 leaves the
  // kernel's (the wait doubles up to 120 s).
  int rto_max_ms = 0;
  // TCP_USER_TIMEOUT on a kernel that refuses rto_max_ms: without the cap a resend comes up to
  // about twice as long after the first send as the silence lasted, so riding out any silence
  // shorter than the tolerance takes about twice as long a timeout. 0: user_timeout_ms.
  int user_timeout_uncapped_ms = 0;
};

// The timing for a peer tolerance T (peer_tolerance.hpp): no silence shorter than T drops a
// connection, idle or busy, and one that lasts about T + 2-4 s does. Keepalive probes from 1-2 s
// idle (picked per call, so hundreds of connections made together do not probe together:
// synchronized probes and their answers overflowed a store's backlog), one a second;
// TCP_USER_TIMEOUT T + idle + 2 s (Linux counts it from the last packet received, up to idle
// before the silence began; after it, the next probe or resend comes within a second, and a
// link whose carrier comes back drops packets for up to a second more); resends at least once a
// second (rto_max_ms), or, where the kernel cannot cap them, TCP_USER_TIMEOUT 2T + idle + 2 s.
// The count matters only where the user timeout is 0.
TcpLiveness tcp_liveness_for(std::chrono::milliseconds tolerance);

// tcp_liveness_for(peer_tolerance_from_env()), each field then overridden by its variable when
// set and not empty:
// DDPLAUNCH_TCP_KEEPIDLE and DDPLAUNCH_TCP_KEEPINTVL (seconds, 1 to 32767),
// DDPLAUNCH_TCP_KEEPCNT (1 to 127), DDPLAUNCH_TCP_USER_TIMEOUT (ms, 0 to 2147483647; it sets
// user_timeout_uncapped_ms too), DDPLAUNCH_TCP_RTO_MAX_MS (0, or 1000 to 120000). ConfigError
// naming the variable, its value and the range.
TcpLiveness tcp_liveness_from_env();

// Turns on SO_KEEPALIVE with liveness's probe timing, caps the resend interval where the
// kernel can (else takes user_timeout_uncapped_ms) and sets TCP_USER_TIMEOUT on fd. Returns
// false, changing nothing, when fd is not a TCP socket (a Unix socket pair in a test); true
// when set. SocketError naming the option, its value and the errno text when a TCP socket
// refuses one.
bool set_tcp_liveness(int fd, const TcpLiveness& liveness);

}  // namespace ddp
