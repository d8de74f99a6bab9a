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

#include "rendezvous/store/store.hpp"

namespace ddp::worker_runtime {

class CancellableStore final : public rendezvous::Store {
 public:
  // cancelled: cheap and thread-safe (asked about every slice of every wait); why: what the
  // CollectiveError says, after "the wait for <keys> ended: ".
  CancellableStore(std::shared_ptr<rendezvous::Store> base, std::function<bool()> cancelled,
                   std::string why, rendezvous::Duration slice = std::chrono::milliseconds(100));

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void append(const std::string& key, const std::string& value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;
  [[nodiscard]] std::string describe() const override;
  void set_timeout(rendezvous::Duration timeout) override;

 private:
  void throw_if_cancelled(const std::vector<std::string>& keys) const;

  std::shared_ptr<rendezvous::Store> base_;
  std::function<bool()> cancelled_;
  std::string why_;
  rendezvous::Duration slice_;
};

}  // namespace ddp::worker_runtime
