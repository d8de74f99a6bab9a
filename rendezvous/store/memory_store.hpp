#pragma once
// In-process Store: a map behind a mutex, waiters on a condition variable.
// The fast unit-test backend, and the reference semantics the TCP server shares.
#include <condition_variable>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rendezvous/store/store.hpp"

namespace ddp::rendezvous {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(Duration timeout = kDefaultStoreTimeout) : Store(timeout) {}

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  void append(const std::string& key, const std::string& value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override;
  [[nodiscard]] std::string describe() const override { return "memory"; }
  // A presence as a TCP connection would hold one (see Store::open_presence).
  std::unique_ptr<Presence> open_presence() override;

  // For tests: the process holding the presence that set ephemeral key "died" (its
  // connection dropped): its close actions run; its later calls throw StoreError. False when
  // no live presence holds key.
  bool sever_presence_holding(const std::string& key);

 private:
  // Waits (lock held) until every key exists; throws StoreTimeout at the deadline.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   Duration timeout);

  friend class MemoryPresence;
  struct PresenceRecord {
    std::vector<std::pair<std::string, std::string>> on_close;
    std::vector<std::string> ephemeral;
    bool severed = false;
  };
  // Runs (lock held) the close actions of record id and forgets it.
  void end_presence_locked(uint64_t id, bool orderly);

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<uint64_t, PresenceRecord> presences_;
  uint64_t next_presence_ = 1;
};

}  // namespace ddp::rendezvous
