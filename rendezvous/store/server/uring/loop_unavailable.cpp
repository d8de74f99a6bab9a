// make_uring_loop for builds without liburing: io_uring is never used, StoreServer serves
// with epoll (and says why when DDPLAUNCH_STORE_IO=io_uring asks for it).
#include "rendezvous/store/server/uring/loop.hpp"

namespace ddp::rendezvous {

std::unique_ptr<ServerLoop> make_uring_loop(const LoopContext& /*context*/) {
  throw IoUringUnavailable(
      "this build has no io_uring support (liburing-dev was not found when it was configured)");
}

}  // namespace ddp::rendezvous
