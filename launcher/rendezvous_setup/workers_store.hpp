#pragma once
// The workers' TCP store where the rendezvous lives elsewhere (etcd): this agent serves it
// while it is group rank 0 (started the first time, kept for later rounds, so a restart on
// the same nodes reuses it), and remembers which node's store the current round's workers
// use, to confine them there (docs/etcd.md, docs/security.md).
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "launcher/rendezvous_setup/store_hosting.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/worker_store_host.hpp"

namespace ddp::launcher {

class WorkerStoreServer final : public rendezvous::WorkerStoreHost {
 public:
  // hosting: where the other nodes' workers reach this node (dial_host, their MASTER_ADDR),
  // --local_addr, --store_bind, the port (0: a free one) and the job secret; its reach (other
  // nodes) and name are set here.
  explicit WorkerStoreServer(StoreHostingOptions hosting);
  ~WorkerStoreServer() override;  // stop_witness()

  rendezvous::Endpoint host() override;
  void use(const rendezvous::Endpoint& endpoint) override;
  // The host polls its own store for members' close records ("witness/<round>/dead/<g>",
  // their presences' on_close) every 100 ms; a member holds a presence there and waits on a
  // connection of its own, which ends at once when the host dies.
  void witness(uint64_t round, int group_rank, int members, const rendezvous::Endpoint& endpoint,
               const std::function<void(int)>& on_death) override;
  void stop_witness() override;

  // Scopes the current round's PyTorch workers to prefix on the store they use: directly
  // when this agent serves it, else over a connection of its own (authenticated with a secret).
  void set_worker_namespace(const std::string& prefix);

 private:
  struct Witness;  // its thread, stop flag and connections (workers_store.cpp)

  StoreHostingOptions options_;
  std::mutex mu_;
  std::unique_ptr<rendezvous::StoreServer> server_;
  std::optional<rendezvous::Endpoint> in_use_;
  std::shared_ptr<Witness> witness_;
};

}  // namespace ddp::launcher
