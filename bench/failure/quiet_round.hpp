#pragma once
// Part d of failure_bench: no failure at all. N agents form a round and are left alone; every
// membership change they report is a false one (a live node taken for lost, a store taken for
// gone), and each would stop and restart every node's workers.
#include <cstdint>

#include "rendezvous/store/server/store_server.hpp"

namespace ddp::bench {

struct QuietResult {
  int64_t node_lost = 0;     // kNodeLost callbacks (each agent reports at most one per round)
  int64_t store_lost = 0;    // kStoreLost callbacks
  int64_t node_waiting = 0;  // kNodeWaiting callbacks
};

// nodes agents (--nnodes nodes:nodes, default heartbeat and lease) in one round for seconds.
QuietResult bench_quiet(rendezvous::StoreServer& server, int nodes, int seconds);

}  // namespace ddp::bench
