#pragma once
// A blocking TCP connection where every call has a deadline (poll before each syscall).
// The store client's transport; tests and benchmarks use it to speak raw bytes.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp::rendezvous {

using SteadyTime = std::chrono::steady_clock::time_point;

// Deadline `timeout` from now; Duration::max() (kNoTimeout) maps to "never".
SteadyTime deadline_after(std::chrono::milliseconds timeout);

class SocketConn {
 public:
  SocketConn() = default;
  ~SocketConn();
  SocketConn(SocketConn&& other) noexcept;
  SocketConn& operator=(SocketConn&& other) noexcept;
  SocketConn(const SocketConn&) = delete;
  SocketConn& operator=(const SocketConn&) = delete;

  // Connects to every address host resolves to (IPv6 and IPv4; "[::1]" is ::1), retrying
  // refused/unreachable with backoff (10 ms doubling to 1 s) until connect_timeout, but not
  // addresses of a family the machine lacks (IPv6 without IPv6: at once); StoreError names
  // host:port, every address tried, attempts and errno text.
  static SocketConn connect(const std::string& host, uint16_t port,
                            std::chrono::milliseconds connect_timeout);

  // Sends every byte before deadline (StoreTimeout) or throws StoreError on a broken link.
  void send_all(std::string_view data, SteadyTime deadline);
  // Reads exactly n bytes before deadline. StoreTimeout when it passes; StoreError when the
  // peer closes or resets (returns at once: a dead server is never waited out).
  std::string recv_exact(size_t n, SteadyTime deadline);
  // recv_exact of a little-endian uint64-length-prefixed string.
  std::string recv_string(SteadyTime deadline, size_t max_bytes = SIZE_MAX);

  [[nodiscard]] bool is_open() const { return fd_ >= 0; }
  // True when bytes, EOF or an error are waiting (poll with zero timeout).
  [[nodiscard]] bool readable_now() const;
  [[nodiscard]] int fd() const { return fd_; }
  void close();
  // Half-closes nothing, just shuts both directions so a blocked peer read returns.
  void shutdown();

 private:
  explicit SocketConn(int fd) : fd_(fd) {}
  // Polls for events until deadline; false on timeout.
  bool poll_for(short events, SteadyTime deadline);

  int fd_ = -1;
};

}  // namespace ddp::rendezvous
