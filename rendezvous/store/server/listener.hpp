#pragma once
// Accepting store connections, the part every I/O backend shares: the listening socket, the
// peer's name for log lines, the options each accepted socket gets, and one log line per
// streak of failed accepts.
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace ddp::rendezvous {

// The listening socket could not be set up; err() is the errno (EADDRINUSE: another server
// holds the port).
class BindError : public StoreError {
 public:
  BindError(const std::string& what, int err) : StoreError(what), err_(err) {}
  [[nodiscard]] int err() const { return err_; }

 private:
  int err_;
};

// A bound, listening TCP socket (non-blocking, close-on-exec); closed on destruction.
class Listener {
 public:
  // host is an address (IPv6 bracketed or not) or a name (resolved, passive); kAnyHost ("")
  // is every interface, dual-stack where the machine has IPv6, else 0.0.0.0; "::" is
  // dual-stack, 0.0.0.0 IPv4 only. Port 0 lets the kernel pick. Throws BindError naming
  // host:port, the step that failed and the errno text.
  Listener(const std::string& host, uint16_t port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Stops listening (idempotent); port() still says which port it was.
  void close();
  [[nodiscard]] int fd() const { return fd_; }
  // The bound port (the real one when 0 was asked for).
  [[nodiscard]] uint16_t port() const { return port_; }
  // Where it listens, for messages: "127.0.0.1:29500", "[::1]:29500",
  // "[::]:29500 (IPv6 and IPv4)", "0.0.0.0:29500 (IPv4 only)".
  [[nodiscard]] const std::string& address() const { return address_; }

 private:
  // Opens, binds and listens on endpoint (dual_stack: IPV6_V6ONLY off); BindError on failure.
  void open(const sockaddr* address, socklen_t length, bool dual_stack, const std::string& where);

  int fd_ = -1;
  uint16_t port_ = 0;
  std::string address_;
};

// "127.0.0.1:41234" or "[::1]:41234" for a socket address (an IPv4 client of a dual-stack
// socket shows as IPv4); "unknown peer" when it is not an IP address.
std::string peer_name(const sockaddr_storage& address, socklen_t length);
// The same for a connected socket (getpeername).
std::string peer_name(int fd);
// Options every accepted connection gets: TCP_NODELAY, as replies are small and go at once.
void tune_connection(int fd);
// Keepalive and TCP_USER_TIMEOUT (common/tcp_liveness.hpp), so a client host that vanishes is
// dropped within about 3 s: only for connections that negotiated ddplaunch's own dialect (a
// PyTorch client never reconnects, and PyTorch's server sets neither). A refused option is a
// warning; the connection is served anyway.
void enable_liveness(int fd);

// One warning line when accepting starts to fail (out of descriptors...), none for the
// retries of the same streak, and one line when a connection is accepted again.
class AcceptLog {
 public:
  explicit AcceptLog(uint16_t port) : port_(port) {}
  // An accept failed with errno err while open_connections were open.
  void failed(int err, size_t open_connections);
  // A connection was accepted.
  void accepted();

 private:
  uint16_t port_;
  uint64_t failures_ = 0;  // current streak
};

}  // namespace ddp::rendezvous
