#include "rendezvous/store/server/fd_limit.hpp"

#include <sys/resource.h>

namespace ddp::rendezvous {

uint64_t raise_fd_limit(uint64_t needed) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_max < needed) {
    const rlimit want{needed, needed};
    if (::setrlimit(RLIMIT_NOFILE, &want) == 0) return needed;
  }
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  return lim.rlim_cur;
}

}  // namespace ddp::rendezvous
