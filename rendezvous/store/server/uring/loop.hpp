#pragma once
// The io_uring backend: the server's thread submits and reaps everything through one ring.
//
// Why: on loopback most of a store request's cost is the kernel's TCP work, which no server
// avoids, plus a fixed cost per system call. Here one io_uring_enter per loop turn submits
// the replies of every connection served in the turn and collects the next requests: each
// connection keeps one multishot recv armed (the kernel picks a buffer from a provided-buffer
// ring and posts a completion per arrival), and replies go out as send requests. The ring is
// DEFER_TASKRUN + SINGLE_ISSUER: arrivals are queued as work for this thread and run in its
// next io_uring_enter, in one batch, with no recv or send system call per socket.
// docs/store.md has the measurements.
//
// Needs Linux 6.1 (DEFER_TASKRUN, multishot recv and accept, provided-buffer rings); the
// constructor throws IoUringUnavailable where the kernel (or a seccomp filter) refuses.
#include <memory>

#include "common/error.hpp"
#include "rendezvous/store/server/server_loop.hpp"

namespace ddp::rendezvous {

// io_uring cannot be used here: the kernel, a sandbox or this build refused it. The message
// says which call failed and why.
class IoUringUnavailable : public StoreError {
 public:
  using StoreError::StoreError;
};

// Creates the io_uring loop on the calling thread, which must be the thread that runs it.
std::unique_ptr<ServerLoop> make_uring_loop(const LoopContext& context);

}  // namespace ddp::rendezvous
