// serve_floor_uring for builds without liburing: --io io_uring says so.
#include "common/error.hpp"
#include "floor_server.hpp"

namespace ddp::bench {

void serve_floor_uring(int /*listener*/, const FloorReplies& /*replies*/) {
  throw Error("this build has no io_uring support (liburing-dev was not found); use --io epoll");
}

}  // namespace ddp::bench
