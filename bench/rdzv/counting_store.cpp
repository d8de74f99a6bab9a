#include "counting_store.hpp"

namespace ddp::bench {

void CountingStore::set(const std::string& key, const std::string& value) {
  ++ops_;
  base_->set(key, value);
}
std::string CountingStore::get(const std::string& key) {
  ++ops_;
  return base_->get(key);
}
int64_t CountingStore::add(const std::string& key, int64_t delta) {
  ++ops_;
  return base_->add(key, delta);
}
std::string CountingStore::compare_set(const std::string& key, const std::string& expected,
                                       const std::string& desired) {
  ++ops_;
  return base_->compare_set(key, expected, desired);
}
bool CountingStore::check(const std::vector<std::string>& keys) {
  ++ops_;
  return base_->check(keys);
}
void CountingStore::wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) {
  ++ops_;
  base_->wait(keys, timeout);
}
bool CountingStore::delete_key(const std::string& key) {
  ++ops_;
  return base_->delete_key(key);
}
int64_t CountingStore::num_keys() {
  ++ops_;
  return base_->num_keys();
}
void CountingStore::append(const std::string& key, const std::string& value) {
  ++ops_;
  base_->append(key, value);
}
std::vector<std::string> CountingStore::multi_get(const std::vector<std::string>& keys) {
  ++ops_;
  return base_->multi_get(keys);
}
void CountingStore::multi_set(const std::vector<std::string>& keys,
                              const std::vector<std::string>& values) {
  ++ops_;
  base_->multi_set(keys, values);
}

}  // namespace ddp::bench
