#pragma once
// Rendezvous at scale: N simulated agents (threads) in one process against one store
// server on loopback, each with its own TCP connection(s), as separate agents would have.
#include <chrono>
#include <cstdint>
#include <vector>

#include "rendezvous/store/server/store_server.hpp"

namespace ddp::bench {

struct AgreeResult {
  int nodes = 0;
  double connect_s = 0;          // opening the N connections (not part of agreeing)
  std::vector<double> agree_s;   // per repeat: start -> last node has its ranks
  double ops_per_node_mean = 0;  // store requests per node in one round
  int64_t ops_per_node_max = 0;  // the closing node (one MULTI_GET + one MULTI_SET more)
};

// N nodes with --nnodes N:N agree `repeats` times (a fresh rdzv_id each time).
AgreeResult bench_agree(rendezvous::StoreServer& server, int nodes, int repeats);

struct ReformOptions {
  int nodes = 8;
  int repeats = 3;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds lease_timeout{5000};
  std::chrono::milliseconds last_call_timeout{200};
};

struct ReformResult {
  int nodes = 0;
  std::vector<double> detect_s;  // node killed -> every survivor told (kNodeLost)
  std::vector<double> reform_s;  // node killed -> every survivor has its new ranks
};

// N nodes (--nnodes N-1:N) form a round, one is killed (its heartbeats stop, no goodbye),
// the survivors notice and re-form.
ReformResult bench_reform(rendezvous::StoreServer& server, const ReformOptions& options);

// Raises RLIMIT_NOFILE (soft, and hard when allowed) to at least `needed`; returns the limit.
uint64_t raise_fd_limit(uint64_t needed);

double median(std::vector<double> values);

struct BenchOptions {
  std::vector<int> agree_nodes;
  std::vector<int> reform_nodes;
  int repeats = 5;
  int reform_repeats = 3;
  int heartbeat_ms = 1000;
  int lease_ms = 5000;
  int last_call_ms = 200;
};

// Runs both tables against one in-process store server and prints them; returns 0, or 1
// after printing the error.
int run_rdzv_bench(const BenchOptions& options);

}  // namespace ddp::bench
