#pragma once
// A Store decorator that counts the operations passing through it (to show that each node
// does O(1) store operations per round) and keeps when each one started and ended (to say
// which phase of a round the time goes to). One thread at a time uses it.
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "rendezvous/store/forwarding_store.hpp"

namespace ddp::bench {

struct TimedOp {
  const char* name;  // the Store method
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
};

// Forwards to its base (rendezvous::ForwardingStore) and counts every request, take_ticket and
// tickets included (as add, which the plain Store makes them); presence stays off, as on a
// Store without it (the benchmark's rounds use heartbeats).
class CountingStore final : public rendezvous::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;

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
  int64_t take_ticket(const std::string& key) override { return add(key, 1); }
  int64_t tickets(const std::string& key) override { return add(key, 0); }
  std::unique_ptr<rendezvous::Presence> open_presence() override { return nullptr; }

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

  std::atomic<int64_t> ops_{0};
  std::vector<TimedOp> timeline_;
};

}  // namespace ddp::bench
