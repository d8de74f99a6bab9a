#pragma once
// The end of a multi-node job: every node counts itself out; the node hosting the store
// waits until all have, so a node still finishing its last step never loses the store.
#include <string>

#include "rendezvous/rdzv_log.hpp"
#include "rendezvous/store.hpp"

namespace ddp::rendezvous {

struct ExitBarrier {
  Store& store;
  std::string key;  // ADD counter of departed nodes; "<key>/all" is set by the last one
  int nodes = 1;
  Duration timeout = std::chrono::seconds(300);
  Duration progress_interval = std::chrono::seconds(5);
  LogSink log;

  // Counts this node out; when wait is true blocks until all nodes have (or timeout, after
  // which it logs who is missing and returns: the job is over either way).
  void depart(bool wait) const;
};

}  // namespace ddp::rendezvous
