#pragma once
// Job-wide failure handling at scale (docs/benchmarks.md, "Job-wide failures and node loss"):
// N simulated agents (threads, each with TCP connections of its own, as separate agents would
// have) against one store server on loopback in this process.
#include <cstdint>
#include <string>
#include <vector>

#include "node_loss.hpp"
#include "rendezvous/store/server/store_server.hpp"

namespace ddp::bench {

struct StopResult {
  std::vector<double> all_ms;    // publish() -> the last node's on_failure
  std::vector<double> first_ms;  // publish() -> the first node's on_failure
  std::vector<double> floor_ms;  // one SET -> the last of N plain WAITs on that key returns
};

// a. Every node holds a FailureWatch on one attempt; one publishes a record.
StopResult bench_stop(rendezvous::StoreServer& server, int nodes, int repeats);

struct RestartResult {
  std::vector<double> told_ms;       // publish() -> the last node's on_failure
  std::vector<double> restarted_ms;  // publish() -> the last node holds its next round
  // Requests on each agent's main connection (next_rendezvous()) in the last restart.
  double requests_mean = 0;
  int64_t requests_max = 0;
};

// b. Elastic (--nnodes min:max): after the record every node re-joins (next_rendezvous()).
// The same agents restart `repeats` times, gap_ms after the previous restart.
RestartResult bench_restart(rendezvous::StoreServer& server, int nodes, int min_nodes, int repeats,
                            int last_call_ms, int gap_ms);

struct FailureBenchOptions {
  std::vector<int> nodes{2, 8, 64, 512};
  std::vector<int> lease_nodes{8, 512};  // part c's lease rows (slow: the lease each time)
  std::string parts = "abcd";
  int repeats = 5;        // a and b
  int loss_repeats = 5;   // c, presence
  int lease_repeats = 3;  // c, lease rows
  int heartbeat_ms = 1000;
  int lease_ms = 5000;
  // b: time between one restart and the next failure. Under a heartbeat interval, re-joining
  // waits for the watcher threads of two rounds ago to stop (up to a heartbeat, see docs).
  int restart_gap_ms = 1200;
  int last_call_ms = 30000;           // b and c's presence rows: a re-formed round must not wait it
  int lease_last_call_ms = 1000;      // c's lease rows: a silent node is expected back (see docs)
  std::vector<int> quiet_nodes{512};  // d: agents left alone, no failure
  int quiet_s = 15;
};

// Prints the tables of the parts asked for; returns 0, or 1 after printing the error.
// factory must have been made before any thread started (node_loss.hpp).
int run_failure_bench(const FailureBenchOptions& options, NodeFactory& factory);

}  // namespace ddp::bench
