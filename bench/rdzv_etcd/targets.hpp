#pragma once
// The two stores the etcd rendezvous benchmark compares: our TCP store server (a child
// process, bench/rdzv/server_process.hpp) and an etcd member started by the caller.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::bench {

struct Target {
  std::string name;  // "tcp" or "etcd"
  // A new client (its own connections), as one more agent would have.
  std::function<std::shared_ptr<rendezvous::Store>()> connect;
  // Options of one node for run_id (liveness as the launcher sets it for this backend).
  std::function<rendezvous::DynamicRendezvousOptions(const std::string& run_id, int min_nodes,
                                                     int max_nodes)>
      options;
};

Target tcp_target(uint16_t port, std::chrono::milliseconds lease_timeout);
Target etcd_target(const std::string& endpoint, std::chrono::milliseconds lease_timeout);

// N agents (threads, one client each) agree `repeats` times; seconds per repeat.
std::vector<double> agree(const Target& target, int nodes, int repeats);

struct LossResult {
  std::vector<double> detect_s;  // SIGKILL -> every survivor told
  std::vector<double> reform_s;  // SIGKILL -> every survivor has its new ranks
};
// N-1 agents (threads) and one more in a child process (victim_argv + run id) form a round;
// the child is SIGKILLed; the survivors notice and re-form.
LossResult node_loss(const Target& target, int nodes, int repeats,
                     const std::vector<std::string>& victim_argv);

// The victim's side: joins run_id's round, writes "bound\n" to stdout, then waits to be killed.
int run_victim(const Target& target, const std::string& run_id, int nodes);

double median(std::vector<double> values);

}  // namespace ddp::bench
