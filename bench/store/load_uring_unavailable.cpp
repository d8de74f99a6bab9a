// run_uring for builds without liburing: store_bench --io io_uring says so.
#include "closed_loop.hpp"
#include "common/error.hpp"

namespace ddp::bench {

void run_uring(ClosedLoop& /*loop*/) {
  throw StoreError(
      "store_bench: this build has no io_uring support (liburing-dev was not found when it "
      "was configured); use --io epoll");
}

}  // namespace ddp::bench
