#include "worker_runtime/cancellable_store.hpp"

#include <algorithm>

#include "common/deadline.hpp"
#include "common/error.hpp"

namespace ddp::worker_runtime {

CancellableStore::CancellableStore(std::shared_ptr<rendezvous::Store> base,
                                   std::function<bool()> cancelled, std::string why,
                                   rendezvous::Duration slice)
    : ForwardingStore(std::move(base)),
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
  throw CollectiveError("the wait for " + names_of(keys) + " on " + base().describe() +
                        " ended: " + why_);
}

void CancellableStore::wait(const std::vector<std::string>& keys, rendezvous::Duration timeout) {
  const auto deadline = Deadline::after(timeout);
  for (;;) {
    throw_if_cancelled(keys);
    try {
      base().wait(keys, deadline.slice(slice_));
      return;
    } catch (const StoreTimeout&) {
      if (!deadline.expired()) continue;
    }
    // The slice's own message would name the slice, not the wait that ran out.
    throw StoreTimeout("wait for " + names_of(keys) + " on " + base().describe() +
                       " timed out after " + std::to_string(timeout.count()) + " ms");
  }
}

}  // namespace ddp::worker_runtime
