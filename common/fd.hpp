#pragma once
// Fd: the one owner of a file descriptor. Closes it on destruction; move-only, so a
// descriptor has exactly one owner and is closed exactly once.
#include <utility>

namespace ddp {

class Fd {
 public:
  Fd() = default;
  // Takes ownership of fd (-1: owns nothing).
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  // Gives up ownership without closing; returns the descriptor (-1 when none).
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }
  // Closes the descriptor held (if any) and takes fd instead.
  void reset(int fd = -1) noexcept;
  // Closes now and reports close()'s result: 0, or -1 with errno set (0 when none was held).
  // For files whose close() can fail a write (NFS): reset() ignores that error.
  int close() noexcept;

 private:
  int fd_ = -1;
};

}  // namespace ddp
