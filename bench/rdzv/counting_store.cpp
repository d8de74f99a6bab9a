#include "counting_store.hpp"

namespace ddp::bench {

CountingStore::Timed::Timed(CountingStore& s, const char* name)
    : store_(s), op_{name, std::chrono::steady_clock::now(), {}} {
  ++store_.ops_;
}

CountingStore::Timed::~Timed() {
  op_.end = std::chrono::steady_clock::now();
  store_.timeline_.push_back(op_);
}

void CountingStore::set(const std::string& key, const std::string& value) {
  const Timed timed(*this, "set");
  base().set(key, value);
}
std::string CountingStore::get(const std::string& key) {
  const Timed timed(*this, "get");
  return base().get(key);
}
int64_t CountingStore::add(const std::string& key, int64_t delta) {
  const Timed timed(*this, "add");
  return base().add(key, delta);
}
std::string CountingStore::compare_set(const std::string& key, const std::string& expected,
                                       const std::string& desired) {
  const Timed timed(*this, "compare_set");
  return base().compare_set(key, expected, desired);
}
bool CountingStore::check(const std::vector<std::string>& keys) {
  const Timed timed(*this, "check");
  return base().check(keys);
}
void CountingStore::wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) {
  const Timed timed(*this, "wait");
  base().wait(keys, timeout);
}
bool CountingStore::delete_key(const std::string& key) {
  const Timed timed(*this, "delete_key");
  return base().delete_key(key);
}
int64_t CountingStore::num_keys() {
  const Timed timed(*this, "num_keys");
  return base().num_keys();
}
void CountingStore::append(const std::string& key, const std::string& value) {
  const Timed timed(*this, "append");
  base().append(key, value);
}
std::vector<std::string> CountingStore::multi_get(const std::vector<std::string>& keys) {
  const Timed timed(*this, "multi_get");
  return base().multi_get(keys);
}
void CountingStore::multi_set(const std::vector<std::string>& keys,
                              const std::vector<std::string>& values) {
  const Timed timed(*this, "multi_set");
  base().multi_set(keys, values);
}

}  // namespace ddp::bench
