#pragma once
// Static multi-node rendezvous (--nnodes N --node_rank R): every node writes its record
// under its node_rank, then waits until all N are there, printing "k/N nodes joined" every
// progress_interval (each on a key of its own that the last joiner, or a shutdown, sets).
// Ranks follow node_rank; RANK offsets are prefix sums of each node's
// nproc. Later rounds (worker restarts) return the same ranks without a barrier, as
// torchrun's static rendezvous does; membership never changes, so watch() never calls back.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "rendezvous/exit_barrier.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

struct StaticRendezvousOptions {
  std::string run_id = "none";  // keys live under "/ddp_rdzv/<run_id>/static/"
  int nnodes = 1;
  int node_rank = 0;
  int local_world_size = 1;  // this node's nproc
  std::string node_addr;     // this node's address, for messages
  std::string master_addr;   // store endpoint handed to workers
  uint16_t master_port = 0;
  Duration join_timeout = std::chrono::seconds(600);
  Duration progress_interval = std::chrono::seconds(5);
  // This agent hosts the store (node 0): shutdown() waits for every node to shut down.
  bool hosts_store = false;
  Duration exit_barrier_timeout = std::chrono::seconds(300);
};

class StaticRendezvous final : public RendezvousHandler {
 public:
  // Validates options (ConfigError naming the bad value).
  // connect (optional): opens another connection to the same store, for
  // connect_job_store() (the agent's progress board for hang detection).
  StaticRendezvous(StaticRendezvousOptions options, std::shared_ptr<Store> store,
                   StoreConnector connect = nullptr);

  // First call: waits for all nnodes (RendezvousError naming who is missing after
  // join_timeout; ConfigError when another agent already holds this node_rank).
  RendezvousInfo next_rendezvous() override;
  void watch(std::function<void(MembershipChange)> on_change) override;
  // Closes the rendezvous and counts this node out; the store host waits for all nodes.
  // Before every node joined, it wakes the nodes waiting to join (RendezvousClosed).
  void shutdown() override;
  void shutdown_after_failure() override;
  // "node 0 already finished (its workers succeeded) and a static job cannot restart without
  // it" once another node counted itself out as finished; "" otherwise.
  [[nodiscard]] std::string restart_blocker() override;
  // Ends the store host's exit barrier wait early.
  void interrupt() override;
  [[nodiscard]] std::string run_id() const override { return options_.run_id; }
  [[nodiscard]] RendezvousKind kind() const override {
    return {false, options_.nnodes, options_.nnodes};
  }
  std::shared_ptr<Store> connect_job_store() override;

 private:
  void join();
  // Leaves round's "node lost" record as this node's ON_CLOSE record.
  void bind_presence(uint64_t round);
  // The other nodes that counted themselves out as finished, "0, 2" ("" when none).
  [[nodiscard]] std::string finished_nodes() const;
  [[nodiscard]] std::string progress(const std::vector<std::string>& node_keys) const;

  StaticRendezvousOptions options_;
  std::shared_ptr<Store> store_;  // prefixed with /ddp_rdzv/<run_id>/static
  StoreConnector connect_;        // may be null
  std::string node_id_;
  std::optional<RendezvousInfo> info_;
  std::atomic<bool> shut_down_{false};   // read under presence_mu_ on the rendezvous thread
  std::atomic<bool> job_failed_{false};  // set before shutdown(): skip the exit barrier wait
  std::optional<ExitBarrier> barrier_;   // over store_, made once
  // This node's connection-bound record: when its agent dies, the store publishes its loss
  // as the attempt's failure record (null where the store cannot, a PyTorch server).
  std::mutex presence_mu_;  // shutdown() may come from another thread
  std::unique_ptr<Presence> presence_;
  bool presence_tried_ = false;
};

}  // namespace ddp::rendezvous
