#pragma once
// A blocking TCP connection where every call has a deadline (poll before each syscall), for
// every client socket of the project: the store client's transport, the direct mesh's
// connections, and tests and benchmarks that speak raw bytes. Errors are SocketError and
// SocketTimeout; callers wrap them into their own (StoreError, CollectiveError).
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/deadline.hpp"
#include "common/fd.hpp"

namespace ddp {

class SocketConn {
 public:
  SocketConn() = default;
  // Adopts a connected stream socket (from accept()): non-blocking, TCP_NODELAY.
  explicit SocketConn(Fd fd);

  // Connects to every address host resolves to (IPv6 and IPv4; "[::1]" is ::1), retrying
  // refused/unreachable with backoff (10 ms doubling to 1 s) until connect_timeout, but not
  // addresses of a family the machine lacks (IPv6 without IPv6: at once). SocketError
  // "cannot connect to <peer> at tcp://host:port within ..." naming every address tried,
  // the attempts and the errno text.
  // give_up_when_refused: a refusal from every address ends the attempts at once (a server
  // that was there and is gone: its host answers, nothing listens) instead of being retried
  // until the timeout as one not started yet is.
  static SocketConn connect(const std::string& host, uint16_t port,
                            std::chrono::milliseconds connect_timeout,
                            std::string_view peer = "peer", bool give_up_when_refused = false);

  // Sends every byte before deadline (SocketTimeout) or throws SocketError on a broken link.
  void send_all(std::string_view data, const Deadline& deadline);
  // Reads exactly n bytes before deadline. SocketTimeout when it passes; SocketError when the
  // peer closes or resets (at once: a dead peer is never waited out).
  std::string recv_exact(size_t n, const Deadline& deadline);
  // recv_exact of a little-endian uint64-length-prefixed string; ProtocolError when the
  // length exceeds max_bytes.
  std::string recv_string(const Deadline& deadline, size_t max_bytes = SIZE_MAX);

  [[nodiscard]] bool is_open() const { return fd_.valid(); }
  // True when bytes, EOF or an error are waiting (poll with zero timeout).
  [[nodiscard]] bool readable_now() const;
  [[nodiscard]] int fd() const { return fd_.get(); }
  void close() { fd_.reset(); }
  // Shuts both directions (the descriptor stays open), so a blocked peer read returns.
  void shutdown();

 private:
  Fd fd_;
};

// Polls fd for events until deadline: true when ready (or an error or hang-up is pending),
// false when the deadline passed; SocketError when poll() itself fails. Retries EINTR.
bool poll_until(int fd, short events, const Deadline& deadline);

}  // namespace ddp
