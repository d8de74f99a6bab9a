#pragma once
// Part c of failure_bench: node loss. One simulated agent runs in a process of its own (its
// own rendezvous connections, heartbeats and presence) and is SIGKILLed, or SIGSTOPped as a
// frozen or half-open host looks; the survivors (threads of this process, N-1 of them) are
// told and re-form without it.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.hpp"
#include "rendezvous/store/server/store_server.hpp"

namespace ddp::bench {

// What a simulated agent in a process of its own does in the rendezvous.
struct LostNodeSpec {
  uint16_t port = 0;
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  bool presence = true;  // false: the store's presence support is hidden (lease only)
  int heartbeat_ms = 1000;
  int lease_ms = 5000;
  int last_call_ms = 30000;
};

// Forks the simulated agents that get killed, from a helper process forked at start-up while
// this process still has a single thread (a fork of a multi-threaded process copies locks
// that other threads hold, and the child may deadlock on them).
class NodeFactory {
 public:
  // Forks the helper now: construct it before this process starts any thread.
  NodeFactory();
  ~NodeFactory();  // ends the helper; the agents it forked die with it (PR_SET_PDEATHSIG)
  NodeFactory(const NodeFactory&) = delete;
  NodeFactory& operator=(const NodeFactory&) = delete;

  // A new process joining spec's rendezvous; it stays in its round (heartbeats, presence
  // unless !spec.presence) until killed. Returns its pid.
  pid_t spawn(const LostNodeSpec& spec);
  // Blocks until that process holds its round with its presence bound; returns its group
  // rank. std::runtime_error when it failed or timeout passed.
  int wait_ready(pid_t pid, std::chrono::seconds timeout);

  struct Reply {
    int32_t kind = 0;  // kSpawned, kReady, kFailed (node_loss.cpp)
    int32_t pid = 0;
    int32_t value = 0;
  };

 private:
  Reply next_reply(const Deadline& deadline);

  pid_t helper_ = -1;
  int request_fd_ = -1;       // to the helper
  int reply_fd_ = -1;         // from the helper and its agents
  std::vector<Reply> early_;  // replies read while waiting for another
};

enum class LossKind {
  kKill,            // SIGKILL; the agent's presence posts "lost" when its connection closes
  kKillNoPresence,  // SIGKILL of an agent that never bound a presence: the lease finds it
  kStop,            // SIGSTOP: its connections stay open (a frozen host); the lease finds it
};
const char* loss_kind_name(LossKind kind);

struct LossOptions {
  int nodes = 8;  // including the one lost; --nnodes nodes-1:nodes
  int repeats = 3;
  LossKind kind = LossKind::kKill;
  int heartbeat_ms = 1000;
  int lease_ms = 5000;
  int last_call_ms = 30000;
};

struct LossResult {
  std::vector<double> told_ms;      // signal sent -> every survivor's membership callback
  std::vector<double> reformed_ms;  // signal sent -> every survivor holds the re-formed round
};

LossResult bench_loss(rendezvous::StoreServer& server, NodeFactory& factory,
                      const LossOptions& options);

}  // namespace ddp::bench
