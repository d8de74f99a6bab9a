#include "worker_runtime/cancellable_store.hpp"

#include <algorithm>

#include "common/deadline.hpp"
#include "common/error.hpp"

namespace ddp::worker_runtime {

CancellableStore::CancellableStore(std::shared_ptr<rendezvous::Store> base,
                                   std::function<bool()> cancelled, std::string why,
                                   rendezvous::Duration slice)
    : Store(base->timeout()),
      base_(std::move(base)),
      cancelled_(std::move(cancelled)),
      why_(std::move(why)),
      slice_(std::max(slice, rendezvous::Duration(1))) {}

namespace {

std::string names_of(const std::vector<std::string>& keys) {
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
  return names;
}

}  // namespace

void CancellableStore::throw_if_cancelled(const std::vector<std::string>& keys) const {
  if (!cancelled_()) return;
  throw CollectiveError("the wait for " + names_of(keys) + " on " + base_->describe() +
                        " ended: " + why_);
}

void CancellableStore::wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) {
  const auto deadline = Deadline::after(timeout);
  for (;;) {
    throw_if_cancelled(keys);
    try {
      base_->wait(keys, deadline.slice(slice_));
      return;
    } catch (const StoreTimeout&) {
      if (!deadline.expired()) continue;
    }
    // The slice's own message would name the slice, not the wait that ran out.
    throw StoreTimeout("wait for " + names_of(keys) + " on " + base_->describe() +
                       " timed out after " + std::to_string(timeout.count()) + " ms");
  }
}

void CancellableStore::set(const std::string& key, const std::string& value) {
  base_->set(key, value);
}
std::string CancellableStore::get(const std::string& key) {
  return base_->get(key);
}
int64_t CancellableStore::add(const std::string& key, int64_t delta) {
  return base_->add(key, delta);
}
std::string CancellableStore::compare_set(const std::string& key, const std::string& expected,
                                          const std::string& desired) {
  return base_->compare_set(key, expected, desired);
}
bool CancellableStore::check(const std::vector<std::string>& keys) {
  return base_->check(keys);
}
bool CancellableStore::delete_key(const std::string& key) {
  return base_->delete_key(key);
}
int64_t CancellableStore::num_keys() {
  return base_->num_keys();
}
void CancellableStore::append(const std::string& key, const std::string& value) {
  base_->append(key, value);
}
std::vector<std::string> CancellableStore::multi_get(const std::vector<std::string>& keys) {
  return base_->multi_get(keys);
}
void CancellableStore::multi_set(const std::vector<std::string>& keys,
                                 const std::vector<std::string>& values) {
  base_->multi_set(keys, values);
}
std::string CancellableStore::describe() const {
  return base_->describe();
}
void CancellableStore::set_timeout(rendezvous::Duration timeout) {
  Store::set_timeout(timeout);
  base_->set_timeout(timeout);
}

}  // namespace ddp::worker_runtime
