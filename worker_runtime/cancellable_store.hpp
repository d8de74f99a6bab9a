#pragma once
// A store whose waits end early when asked: the store a process group is built through
// during an in-place recovery. A second membership change while the new group is built
// (a peer of the new round died before it published its address) would otherwise keep the
// build waiting for that peer until the connect timeout (5 minutes by default), longer than
// the agent's --recovery_timeout, so every survivor would be killed and started afresh. The
// wait is cut into slices and `cancelled` is asked between them; once it says yes the wait
// throws CollectiveError, the build fails at once, and the worker recovers again.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store/forwarding_store.hpp"

namespace ddp::worker_runtime {

// Forwards every call to its base; only wait() is cut into slices.
class CancellableStore final : public rendezvous::ForwardingStore {
 public:
  // cancelled: cheap and thread-safe (asked about every slice of every wait); why: what the
  // CollectiveError says, after "the wait for <keys> ended: ".
  CancellableStore(std::shared_ptr<rendezvous::Store> base, std::function<bool()> cancelled,
                   std::string why, rendezvous::Duration slice = std::chrono::milliseconds(100));

  using Store::wait;
  void wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) override;

 private:
  void throw_if_cancelled(const std::vector<std::string>& keys) const;

  std::function<bool()> cancelled_;
  std::string why_;
  rendezvous::Duration slice_;
};

}  // namespace ddp::worker_runtime
