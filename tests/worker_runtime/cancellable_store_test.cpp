// The store a group is built through during an in-place recovery: its waits end as soon as
// another change is announced, and otherwise behave as the wrapped store's.
#include "worker_runtime/cancellable_store.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "common/error.hpp"
#include "rendezvous/store/memory_store.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::worker_runtime::CancellableStore;

TEST_CASE("cancellable store: a wait ends with the key, as the wrapped store's", "[recovery]") {
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>();
  CancellableStore store(
      base, [] { return false; }, "unused", 10ms);
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    base->set("peer/1", "addr");
  });
  store.wait({"peer/1"}, 30s);
  later.get();
  CHECK(store.get("peer/1") == "addr");
  CHECK(store.add("n", 2) == 2);
  CHECK(base->add("n", 0) == 2);  // every other call goes straight through
}

TEST_CASE("cancellable store: a change announced during the wait ends it at once", "[recovery]") {
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>();
  std::atomic<bool> changed{false};
  CancellableStore store(
      base, [&] { return changed.load(); },
      "the membership changed again while the group of round 1 was built", 10ms);
  auto announce = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    changed = true;
  });
  // A peer that never publishes its key: without the change this would wait 10 minutes.
  CHECK_THROWS_AS(store.wait({"peer/2"}, 600s), ddp::CollectiveError);
  announce.get();
  CHECK_THROWS_WITH(store.wait({"peer/2"}, 600s),
                    Contains("'peer/2'") && Contains("changed again while the group of round 1"));
}

TEST_CASE("cancellable store: a wait that runs out names the whole timeout", "[recovery]") {
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>();
  CancellableStore store(
      base, [] { return false; }, "unused", 10ms);
  CHECK_THROWS_AS(store.wait({"never"}, 60ms), ddp::StoreTimeout);
  CHECK_THROWS_WITH(store.wait({"never"}, 60ms), Contains("'never'") && Contains("60 ms"));
}
