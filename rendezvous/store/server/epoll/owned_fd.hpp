#pragma once
// A file descriptor the epoll backend owns: closed on destruction, movable, not copyable.
// Local to this folder (the epoll set, its eventfd and timerfds, the client sockets).
#include <unistd.h>

#include <utility>

namespace ddp::rendezvous {

class OwnedFd {
 public:
  OwnedFd() = default;
  // Takes fd (may be -1: owns nothing).
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd() { reset(); }
  OwnedFd(OwnedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;

  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  // Closes the descriptor now (idempotent).
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace ddp::rendezvous
