#include "rendezvous/rdzv_exit_barrier.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace ddp::rendezvous {

void ExitBarrier::depart(bool wait) const {
  const std::string all = key + "/all";
  if (store.add(key, 1) >= nodes) store.set(all, "1");
  if (!wait) return;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    try {
      store.wait({all}, std::clamp(left, Duration(1), progress_interval));
      return;
    } catch (const StoreTimeout&) {
    }
    const std::string count = std::to_string(store.add(key, 0)) + "/" + std::to_string(nodes);
    if (left <= progress_interval) {
      rdzv_log(log, "exit barrier: only " + count + " nodes finished within " +
                        describe_timeout(timeout) + "; closing the store anyway");
      return;
    }
    rdzv_log(log, "exit barrier: " + count +
                      " nodes finished; this node hosts the store and waits for the rest");
  }
}

}  // namespace ddp::rendezvous
