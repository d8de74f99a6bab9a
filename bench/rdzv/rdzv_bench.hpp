#pragma once
// Rendezvous at scale: N simulated agents (threads) in one process against one store
// server (in a child process, see server_process.hpp) on loopback, each with its own TCP
// connection(s), as separate agents would have.
#include <chrono>
#include <cstdint>
#include <vector>

#include "server_process.hpp"

namespace ddp::bench {

// Where one round's time goes: seconds from releasing the N threads until...
struct AgreePhases {
  double all_started = 0;    // every node has sent its first request
  double last_arrival = 0;   // the last node has its arrival index (ADD), so it closes
  double records_ready = 0;  // the closer saw every node record (WAIT of N keys)
  double records_read = 0;   // ... read them (MULTI_GET of N keys)
  double assigned = 0;       // ... computed the ranks (assign_ranks, formatting)
  double published = 0;      // ... wrote assignments + "closed" (MULTI_SET of N + 2 keys)
  double all_woken = 0;      // every node's WAIT for "closed" returned
  double all_done = 0;       // every node read its assignment (the round's time)
};

struct AgreeResult {
  int nodes = 0;
  double connect_s = 0;              // opening the N connections (not part of agreeing)
  std::vector<double> agree_s;       // per repeat: start -> last node has its ranks
  double ops_per_node_mean = 0;      // store requests per node in one round
  int64_t ops_per_node_max = 0;      // the closing node (one MULTI_GET + one MULTI_SET more)
  std::vector<AgreePhases> phases;   // per repeat
  std::vector<double> server_cpu_s;  // per repeat: CPU time of the store server process
  std::vector<double> agents_cpu_s;  // per repeat: CPU time of the agents' process
};

// N nodes with --nnodes N:N agree `repeats` times (a fresh rdzv_id each time).
// Each node has one connection to the server (TcpStoreOptions::one_connection).
AgreeResult bench_agree(const ServerProcess& server, int nodes, int repeats);

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
ReformResult bench_reform(uint16_t port, const ReformOptions& options);

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

// Runs both tables against one store server (a child process) and prints them; returns 0,
// or 1 after printing the error.
int run_rdzv_bench(const BenchOptions& options);

}  // namespace ddp::bench
