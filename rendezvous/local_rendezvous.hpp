#pragma once
// Single-node rendezvous: this agent is the whole job, so every round closes at once with
// GROUP_RANK 0 of 1. Membership never changes, so watch() never calls back.
#include <atomic>
#include <cstdint>
#include <string>

#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::rendezvous {

struct LocalRendezvousOptions {
  std::string run_id = "none";
  int nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";  // where workers reach the store
  uint16_t master_port = 0;
};

class LocalRendezvous final : public RendezvousHandler {
 public:
  explicit LocalRendezvous(LocalRendezvousOptions options) : options_(std::move(options)) {}

  // Returns the next round at once; RendezvousClosed after shutdown().
  RendezvousInfo next_rendezvous() override;
  // Nothing can join or leave a single-node job: the callback is never called.
  void watch(std::function<void(MembershipChange)> on_change) override;
  void shutdown() override { closed_ = true; }
  [[nodiscard]] std::string run_id() const override { return options_.run_id; }

 private:
  LocalRendezvousOptions options_;
  uint64_t round_ = 0;
  std::atomic<bool> closed_{false};
};

}  // namespace ddp::rendezvous
