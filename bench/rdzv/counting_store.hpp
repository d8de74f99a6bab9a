#pragma once
// A Store decorator that counts the operations passing through it (to show that each node
// does O(1) store operations per round) and keeps when each one started and ended (to say
// which phase of a round the time goes to). One thread at a time uses it.
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "rendezvous/store/store.hpp"

namespace ddp::bench {

struct TimedOp {
  const char* name;  // the Store method
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
};

class CountingStore final : public rendezvous::Store {
 public:
  explicit CountingStore(std::shared_ptr<rendezvous::Store> base)
      : Store(base->timeout()), base_(std::move(base)) {}

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
  [[nodiscard]] std::string describe() const override { return base_->describe(); }

  // Operations so far (a multi_get of k keys counts once: it is one request).
  [[nodiscard]] int64_t ops() const { return ops_.load(); }
  // The operations since reset(), in order.
  [[nodiscard]] const std::vector<TimedOp>& timeline() const { return timeline_; }
  void reset() {
    ops_ = 0;
    timeline_.clear();
  }

 private:
  // Counts the operation and records its start and end (also when it throws).
  class Timed {
   public:
    Timed(CountingStore& s, const char* name);
    ~Timed();
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

   private:
    CountingStore& store_;
    TimedOp op_;
  };

  std::shared_ptr<rendezvous::Store> base_;
  std::atomic<int64_t> ops_{0};
  std::vector<TimedOp> timeline_;
};

}  // namespace ddp::bench
