// The exit barrier: members counted out once each (by themselves or by whoever found them
// lost), the store host waiting for all, a timeout and an interrupt.
#include "rendezvous/exit_barrier.hpp"

#include <catch2/catch.hpp>
#include <future>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/store/memory_store.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {
// The waiting host's progress lines would only clutter the test output.
const ddp::log::ScopedSink kQuietLog{[](ddp::log::Level, std::string_view) {}};
}  // namespace

TEST_CASE("exit barrier: the store host waits until every node is out", "[rdzv]") {
  MemoryStore store;
  ExitBarrier barrier{store, "departed", 3, 10s, 1s};
  auto host = std::async(std::launch::async, [&] { barrier.depart(0, "finished", true); });
  barrier.depart(1, "finished", false);
  CHECK(host.wait_for(50ms) == std::future_status::timeout);  // 2/3: still waiting
  barrier.depart(2, "failed", false);
  host.get();
  CHECK(store.get("departed") == "3");
  CHECK(barrier.out_reason(2) == "failed");
}

TEST_CASE("exit barrier: a node counted out as lost and then by itself counts once", "[rdzv]") {
  MemoryStore store;
  ExitBarrier barrier{store, "departed", 3, 10s, 1s};
  CHECK_FALSE(barrier.count_out(1, "lost"));      // a peer found it silent
  CHECK_FALSE(barrier.count_out(1, "finished"));  // it was only stopped, and ends later
  CHECK(barrier.out_reason(1) == "lost");
  CHECK(barrier.out_reason(0).empty());
  CHECK(store.get("departed") == "1");
  CHECK_FALSE(barrier.count_out(0, "finished"));
  CHECK(barrier.count_out(2, "finished"));  // the last one out says so
  CHECK(barrier.wait_all());
}

TEST_CASE("exit barrier: a node found gone by many peers at once counts once", "[rdzv]") {
  // Every watcher that sees a node's connection close counts it out as "disconnected": the
  // same words from 16 writers. Counted 16 times, the re-formed round took 16 members for
  // gone and closed with half of the survivors, and the store host's barrier ended early.
  MemoryStore store;
  ExitBarrier barrier{store, "departed", 17, 10s, 1s};
  std::vector<std::future<bool>> peers;
  for (int i = 0; i < 16; ++i) {
    peers.push_back(
        std::async(std::launch::async, [&] { return barrier.count_out(10, "disconnected"); }));
  }
  int won = 0;
  for (auto& p : peers) won += p.get() ? 1 : 0;
  CHECK(won == 0);  // nobody made all 17 out
  CHECK(barrier.gone() == 1);
  CHECK(store.get("departed") == "1");
  CHECK(barrier.out_reason(10) == "disconnected");
  CHECK_FALSE(barrier.count_out(10, "disconnected"));
  CHECK(barrier.gone() == 1);
}

TEST_CASE("exit barrier: gives up after its timeout, saying how many finished", "[rdzv]") {
  MemoryStore store;
  std::string said;
  const ddp::log::ScopedSink capture([&](ddp::log::Level level, std::string_view line) {
    if (level == ddp::log::Level::kWarn) said = line;
  });
  ExitBarrier barrier{store, "departed", 2, 200ms, 100ms};
  barrier.depart(0, "finished", true);
  CHECK_THAT(said, Catch::Contains("1/2 nodes finished"));
}

TEST_CASE("exit barrier: interrupt() ends the wait at once and is not taken for success",
          "[rdzv]") {
  MemoryStore store;
  ExitBarrier barrier{store, "departed", 2, 60s, 1s};
  barrier.count_out(0, "finished");
  auto host = std::async(std::launch::async, [&] { return barrier.wait_all(); });
  CHECK(host.wait_for(50ms) == std::future_status::timeout);
  barrier.interrupt();
  REQUIRE(host.wait_for(10s) == std::future_status::ready);  // hang guard only
  CHECK_FALSE(host.get());
}
