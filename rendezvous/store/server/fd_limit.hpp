#pragma once
// Thousands of store clients need thousands of descriptors: servers and load generators
// raise their own soft limit at start-up.
#include <cstdint>

namespace ddp::rendezvous {

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force.
uint64_t raise_fd_limit();

}  // namespace ddp::rendezvous
