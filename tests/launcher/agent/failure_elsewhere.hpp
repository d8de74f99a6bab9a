#pragma once
// A worker failure record from another node (group rank 1, rank 3, "boom"), as the agent's
// collaborators hear one in their tests.
#include <cstdint>

#include "rendezvous/failure_record.hpp"

namespace ddp::launcher::testing {

inline rendezvous::FailureRecord failure_elsewhere(uint64_t attempt, int exit_code = 5) {
  rendezvous::FailureRecord r;
  r.kind = "worker";
  r.attempt = attempt;
  r.group_rank = 1;
  r.host = "10.0.0.2";
  r.rank = 3;
  r.exit_code = exit_code;
  r.message = "boom";
  return r;
}

}  // namespace ddp::launcher::testing
