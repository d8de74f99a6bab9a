#include "common/fd.hpp"

#include <unistd.h>

namespace ddp {

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

int Fd::close() noexcept {
  const int fd = release();
  return fd >= 0 ? ::close(fd) : 0;
}

}  // namespace ddp
