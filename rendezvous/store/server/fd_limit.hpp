#pragma once
// Thousands of store clients need thousands of descriptors: servers and load generators
// raise their own soft limit at start-up.
#include <cstdint>

namespace ddp::rendezvous {

// Raises the soft RLIMIT_NOFILE to the hard limit, and first the hard limit to needed when
// that is higher and the process may (root with CAP_SYS_RESOURCE); returns the soft limit
// now in force.
uint64_t raise_fd_limit(uint64_t needed = 0);

}  // namespace ddp::rendezvous
