#pragma once
// Where the rendezvous store is not one the workers can use (etcd: PyTorch's env:// speaks
// the TCP store protocol only), group rank 0 of each round serves the workers a TCP store of
// its own, and publishes its address through the rendezvous store. The dynamic rendezvous
// calls this interface; the launcher implements it with a StoreServer (tests with a fake).
#include <cstdint>
#include <functional>

#include "rendezvous/rdzv_conf.hpp"

namespace ddp::rendezvous {

class WorkerStoreHost {
 public:
  virtual ~WorkerStoreHost() = default;
  // This node is group rank 0 of a round: serves the workers' store (started the first time,
  // kept for later rounds) and returns where the workers of every node dial it. Throws
  // StoreError when it cannot listen.
  virtual Endpoint host() = 0;
  // The round's workers use the store at endpoint (called on every node, the host included,
  // before next_rendezvous() returns).
  virtual void use(const Endpoint& endpoint) = 0;

  // Death witness, for a rendezvous store that tells a dead agent only once its lease runs out
  // (etcd): every member of round keeps a connection to the workers' store that group rank 0
  // serves at endpoint. That host sees a member's connection close, every member sees the
  // host's: on_death(group rank) at once, from the witness's own thread. Silence is left to the
  // lease. A new call replaces the previous round's witness. Default: no witness.
  virtual void witness(uint64_t /*round*/, int /*group_rank*/, int /*members*/,
                       const Endpoint& /*endpoint*/, const std::function<void(int)>& /*on_death*/) {
  }
  // Ends the witness; no on_death runs once this returns (an orderly leave says nothing).
  virtual void stop_witness() {}
};

}  // namespace ddp::rendezvous
