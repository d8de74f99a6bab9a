#pragma once
// Where the rendezvous store is not one the workers can use (etcd: PyTorch's env:// speaks
// the TCP store protocol only), group rank 0 of each round serves the workers a TCP store of
// its own, and publishes its address through the rendezvous store. The dynamic rendezvous
// calls this interface; the launcher implements it with a StoreServer (tests with a fake).
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
};

}  // namespace ddp::rendezvous
