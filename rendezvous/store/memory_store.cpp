#include "rendezvous/store/memory_store.hpp"

#include "common/error.hpp"
#include "rendezvous/store/store_semantics.hpp"

namespace ddp::rendezvous {

// One presence on a MemoryStore: a record in the store's table, like a connection's.
class MemoryPresence final : public Presence {
 public:
  MemoryPresence(MemoryStore& store, uint64_t id) : store_(store), id_(id) {}
  ~MemoryPresence() override {
    std::lock_guard<std::mutex> lock(store_.mu_);
    store_.end_presence_locked(id_, /*orderly=*/true);
  }
  void on_close(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(store_.mu_);
    live().on_close.emplace_back(key, value);
  }
  void set_ephemeral(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(store_.mu_);
      live().ephemeral.push_back(key);
      store_.data_[key] = value;
    }
    store_.cv_.notify_all();
  }
  void clear() override {
    std::lock_guard<std::mutex> lock(store_.mu_);
    auto& record = live();
    for (const auto& key : record.ephemeral) store_.data_.erase(key);
    record = {};
  }

 private:
  // This presence's record (lock held); StoreError once it was severed.
  MemoryStore::PresenceRecord& live() {
    auto& record = store_.presences_.at(id_);
    if (record.severed) throw StoreError("store memory: presence " + std::to_string(id_) + " lost");
    if (record.on_close.size() + record.ephemeral.size() >= 64) {
      throw StoreError("store memory: presence " + std::to_string(id_) +
                       " already holds 64 close actions");
    }
    return record;
  }

  MemoryStore& store_;
  uint64_t id_;
};

std::unique_ptr<Presence> MemoryStore::open_presence() {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_presence_++;
  presences_[id];
  return std::make_unique<MemoryPresence>(*this, id);
}

bool MemoryStore::sever_presence_holding(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t found = 0;
    for (const auto& [id, record] : presences_) {
      if (record.severed) continue;
      for (const auto& k : record.ephemeral) {
        if (k == key) found = id;
      }
    }
    if (found == 0) return false;
    end_presence_locked(found, /*orderly=*/false);
  }
  cv_.notify_all();
  return true;
}

void MemoryStore::end_presence_locked(uint64_t id, bool orderly) {
  auto it = presences_.find(id);
  if (it == presences_.end()) return;
  if (it->second.severed) {
    presences_.erase(it);  // the owner is destroying what was severed earlier
    return;
  }
  PresenceRecord record = std::move(it->second);
  if (orderly) {
    presences_.erase(it);
  } else {
    it->second = {};
    it->second.severed = true;  // kept until its owner lets go, so its calls fail
  }
  for (const auto& key : record.ephemeral) data_.erase(key);
  if (orderly) return;
  for (const auto& [key, value] : record.on_close) data_.try_emplace(key, value);
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

std::string MemoryStore::get(const std::string& key) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, {key}, timeout());
  return data_.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    result = apply_add(data_, key, delta);
  }
  cv_.notify_all();
  return result;
}

std::string MemoryStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  std::string result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    result = apply_compare_set(data_, key, expected, desired);
  }
  cv_.notify_all();
  return result;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : keys) {
    if (data_.find(k) == data_.end()) return false;
  }
  return true;
}

void MemoryStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, keys, timeout);
}

bool MemoryStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

int64_t MemoryStore::num_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(data_.size());
}

void MemoryStore::append(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] += value;
  }
  cv_.notify_all();
}

std::vector<std::string> MemoryStore::multi_get(const std::vector<std::string>& keys) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, keys, timeout());
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(data_.at(k));
  return out;
}

void MemoryStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values) {
  if (keys.size() != values.size()) {
    throw ConfigError("multi_set: " + std::to_string(keys.size()) + " keys but " +
                      std::to_string(values.size()) + " values");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < keys.size(); ++i) data_[keys[i]] = values[i];
  }
  cv_.notify_all();
}

void MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock,
                              const std::vector<std::string>& keys, Duration timeout) {
  auto all_present = [&] {
    for (const auto& k : keys) {
      if (data_.find(k) == data_.end()) return false;
    }
    return true;
  };
  if (timeout == kNoTimeout) {
    cv_.wait(lock, all_present);
    return;
  }
  if (!cv_.wait_for(lock, timeout, all_present)) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (data_.find(k) == data_.end()) missing.push_back(k);
    }
    throw StoreTimeout("store " + describe() + ": timed out after " + describe_timeout(timeout) +
                       " waiting for keys " + join_keys(missing));
  }
}

}  // namespace ddp::rendezvous
