#pragma once
// Accepting store connections, the part every I/O backend shares: the listening socket, the
// peer's name for log lines, the options each accepted socket gets, and one log line per
// streak of failed accepts.
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp::rendezvous {

// A bound, listening TCP socket (non-blocking, close-on-exec); closed on destruction.
class Listener {
 public:
  // host is an address or a name (resolved, passive); port 0 lets the kernel pick. Throws
  // StoreError naming host:port, the step that failed and the errno text.
  Listener(const std::string& host, uint16_t port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Stops listening (idempotent); port() still says which port it was.
  void close();
  [[nodiscard]] int fd() const { return fd_; }
  // The bound port (the real one when 0 was asked for).
  [[nodiscard]] uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// "127.0.0.1:41234" for a socket address; "unknown peer" when it is not an IP address.
std::string peer_name(const sockaddr_storage& address, socklen_t length);
// The same for a connected socket (getpeername).
std::string peer_name(int fd);
// Options every accepted connection gets: TCP_NODELAY, as replies are small and go at once.
void tune_connection(int fd);

// One stderr line when accepting starts to fail (out of descriptors...), none for the
// retries of the same streak, and one when a connection is accepted again.
class AcceptLog {
 public:
  AcceptLog(std::string log_name, uint16_t port) : log_name_(std::move(log_name)), port_(port) {}
  // An accept failed with errno err while open_connections were open.
  void failed(int err, size_t open_connections);
  // A connection was accepted.
  void accepted();

 private:
  std::string log_name_;
  uint16_t port_;
  uint64_t failures_ = 0;  // current streak
};

}  // namespace ddp::rendezvous
