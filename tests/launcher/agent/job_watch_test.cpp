// The job's record and store as the agent's loop sees them (job_watch.hpp), on its own over a
// MemoryStore: news of the failure watch's thread arrives on the loop, news of an attempt
// left behind is dropped, a store host that leaves is no failure, and the rendezvous
// watcher's report of a lost store waits for the watch's own error (which says how) and is
// dropped once a failure holds.
#include "launcher/agent/job_watch.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "tests/launcher/agent/captures.hpp"
#include "tests/launcher/agent/failure_elsewhere.hpp"
#include "tests/support/io_loop.hpp"

using namespace ddp::launcher;
using ddp::PeerLoss;
using ddp::launcher::testing::failure_elsewhere;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::RecordedEvents;
using ddp::rendezvous::FailureRecord;
using ddp::rendezvous::MemoryStore;
using ddp::rendezvous::Store;
using ddp::test::run_for;
using ddp::test::run_until;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 10s;
// Longer than the 500 ms the rendezvous watcher's store loss is held back.
constexpr auto kPastCauseWait = 600ms;

ddp::rendezvous::RendezvousInfo round_of(uint64_t round, int group_rank, int nodes) {
  ddp::rendezvous::RendezvousInfo info;
  info.round = round;
  info.group_rank = group_rank;
  info.group_world_size = nodes;
  info.master_addr = "10.0.0.1";
  info.master_port = 29400;
  return info;
}

// A connection that can be cut: its blocked WAIT then fails at once, as a reset does.
class CuttableStore final : public ddp::rendezvous::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, ddp::rendezvous::Duration timeout) override {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!cut) {
      const auto left = end - std::chrono::steady_clock::now();
      if (left <= ddp::rendezvous::Duration(0)) throw ddp::StoreTimeout("cuttable: timed out");
      try {
        base().wait(keys, std::min<ddp::rendezvous::Duration>(
                              std::chrono::duration_cast<ddp::rendezvous::Duration>(left), 10ms));
        return;
      } catch (const ddp::StoreTimeout&) {
      }
    }
    throw ddp::StoreError("connection reset by peer", PeerLoss::kDeath);
  }
  std::atomic<bool> cut{false};
};

// One node's watch with its loop, and what it called back.
struct Bench : RecordedEvents, LoggedLines {
  Bench() : watch(io, "10.0.0.1", 15s, log, hooks()) {}

  JobWatch::Hooks hooks() {
    JobWatch::Hooks h;
    h.on_failure = [this](const FailureRecord& record) {
      on_loop = on_loop && std::this_thread::get_id() == loop_thread;
      failures.push_back(record);
    };
    h.on_store_leaving = [this] { ++leaving; };
    h.on_store_lost = [this](const std::string& message, PeerLoss loss) {
      on_loop = on_loop && std::this_thread::get_id() == loop_thread;
      lost.emplace_back(message, loss);
    };
    return h;
  }
  // Watches round as group rank node of nodes, over connections to store (the watch's own
  // connection: wait_store when given).
  void begin(uint64_t round, int node = 0, int nodes = 2,
             const std::shared_ptr<Store>& wait_store = nullptr) {
    int connects = 0;
    watch.begin(round_of(round, node, nodes),
                connect_job(
                    [&]() -> std::shared_ptr<Store> {
                      return ++connects == 1 && wait_store ? wait_store : store;
                    },
                    nodes),
                /*report_stalls=*/false);
  }
  // Publishes record as another node does, and returns once the watch of group rank node
  // delivered it (the watch acknowledges a record right after handing it over), without
  // running the loop: the news waits there.
  void publish_and_await_delivery(const FailureRecord& record, int node = 0) {
    ddp::rendezvous::publish_failure(*store, record);
    store->wait({ddp::rendezvous::store_leaving_ack_key(record.attempt, node)}, kGuard);
  }

  boost::asio::io_context io;
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>(10s);
  const std::thread::id loop_thread = std::this_thread::get_id();
  bool on_loop = true;  // every hook ran on the loop's thread
  std::vector<FailureRecord> failures;
  int leaving = 0;
  std::vector<std::pair<std::string, PeerLoss>> lost;
  JobWatch watch;  // last: its hooks use the members above
};

}  // namespace

TEST_CASE("job watch: another node's record arrives on the loop, held and recorded",
          "[job_watch]") {
  Bench b;
  b.begin(0);
  REQUIRE(b.watch.watching());
  b.publish_and_await_delivery(failure_elsewhere(0));
  CHECK(b.failures.empty());  // the news waits for the loop
  REQUIRE(run_until(
      b.io, [&] { return !b.failures.empty(); }, kGuard));
  CHECK(b.on_loop);
  CHECK(b.failures.size() == 1);
  CHECK(b.failures[0].rank == 3);
  REQUIRE(b.watch.failure());
  CHECK(b.watch.failure()->group_rank == 1);
  CHECK_FALSE(b.watch.is_mine(*b.watch.failure()));
  const auto heard = b.named("job_failure");
  REQUIRE(heard.size() == 1);
  CHECK(heard[0]["kind"] == "worker");
  CHECK(heard[0]["node"] == 1);
  CHECK(heard[0]["rank"] == 3);
  CHECK(heard[0]["exit_code"] == 5);
  CHECK(heard[0]["mine"] == false);
  // Held: a node that knows the attempt's record publishes nothing of its own.
  CHECK_FALSE(b.watch.publish(failure_elsewhere(0)));
}

TEST_CASE("job watch: this node's failure comes back as the attempt's record, its own",
          "[job_watch]") {
  Bench b;
  b.begin(2);
  FailureRecord mine;
  mine.rank = 0;
  mine.exit_code = 9;
  REQUIRE(b.watch.publish(mine));
  CHECK(b.watch.published());
  REQUIRE(run_until(
      b.io, [&] { return !b.failures.empty(); }, kGuard));
  CHECK(b.failures[0].attempt == 2);
  CHECK(b.failures[0].host == "10.0.0.1");
  CHECK(b.watch.is_mine(b.failures[0]));
  CHECK(b.named("job_failure").at(0)["mine"] == true);
}

TEST_CASE("job watch: the record of an attempt left behind is dropped, a live watch hears it",
          "[job_watch]") {
  // Both nodes' watches delivered attempt 0's record to the loop; before the loop ran, node
  // 0 stopped and began attempt 1 (it re-joined). Node 1's watch shows the news was there.
  Bench b;
  JobWatch live(b.io, "10.0.0.2", 15s, b.log, b.hooks());
  b.begin(0, 0);
  live.begin(round_of(0, 1, 2), connect_job([&]() -> std::shared_ptr<Store> { return b.store; }, 2),
             false);
  b.publish_and_await_delivery(failure_elsewhere(0), 0);
  b.store->wait({ddp::rendezvous::store_leaving_ack_key(0, 1)}, kGuard);
  SECTION("stopped, then the next attempt begun") {
    b.watch.stop();
    b.begin(1, 0);
  }
  SECTION("released without watching on") {
    (void)b.watch.release(/*keep_watching=*/false);
  }
  b.io.restart();
  b.io.poll();                      // both deliveries were posted before: they run now
  REQUIRE(b.failures.size() == 1);  // the live watch's
  CHECK(live.failure());
  CHECK_FALSE(b.watch.failure());
  CHECK(b.named("job_failure").size() == 1);
}

TEST_CASE("job watch: a watch released to keep watching still brings records, and hear() too",
          "[job_watch]") {
  Bench b;
  b.begin(0);
  auto released = b.watch.release(/*keep_watching=*/true);
  REQUIRE(released != nullptr);
  CHECK_FALSE(b.watch.watching());
  SECTION("what the released watch hears") {
    ddp::rendezvous::publish_failure(*b.store, failure_elsewhere(0, 7));
    REQUIRE(run_until(
        b.io, [&] { return !b.failures.empty(); }, kGuard));
    CHECK(b.failures[0].exit_code == 7);
  }
  SECTION("a record read after the exit barrier") {
    b.watch.hear(failure_elsewhere(0, 8));
    REQUIRE(b.failures.size() == 1);
    CHECK(b.failures[0].exit_code == 8);
  }
  REQUIRE(b.watch.failure());
  // Once one holds, a second is not news.
  b.watch.hear(failure_elsewhere(0, 9));
  run_for(b.io, 20ms);
  CHECK(b.failures.size() == 1);
  CHECK(b.named("job_failure").size() == 1);
}

TEST_CASE("job watch: a store host that leaves is no failure, but the store is gone",
          "[job_watch]") {
  Bench b;
  b.begin(0, 1, 3);
  ddp::rendezvous::announce_store_leaving(*b.store, 0, 0, "10.0.0.9", {1}, kGuard);
  REQUIRE(run_until(
      b.io, [&] { return b.leaving == 1; }, kGuard));
  CHECK(b.failures.empty());
  CHECK_FALSE(b.watch.failure());
  CHECK(b.watch.store_leaving());
  CHECK(b.watch.store_gone());
  const auto said = b.named("store_leaving");
  REQUIRE(said.size() == 1);
  CHECK(said[0]["node"] == 0);
  // Its store going away a moment later is not a loss either.
  b.watch.rendezvous_lost_store("lost the rendezvous store: reset", PeerLoss::kDeath);
  run_for(b.io, kPastCauseWait);
  CHECK(b.lost.empty());
}

TEST_CASE("job watch: the rendezvous watcher's store loss waits for the watch's own error",
          "[job_watch]") {
  Bench b;
  auto wait_store = std::make_shared<CuttableStore>(b.store);
  b.begin(0, 0, 2, wait_store);
  b.watch.rendezvous_lost_store("lost the rendezvous store: timed out", PeerLoss::kUnknown);
  CHECK(b.lost.empty());
  wait_store->cut = true;  // the watch's connection fails too, and says it was a death
  REQUIRE(run_until(
      b.io, [&] { return !b.lost.empty(); }, kGuard));
  CHECK(b.on_loop);
  CHECK(b.lost[0].first.find("connection reset by peer") != std::string::npos);
  CHECK(b.lost[0].second == PeerLoss::kDeath);
  run_for(b.io, kPastCauseWait);
  CHECK(b.lost.size() == 1);  // the rendezvous watcher's own report is not passed on after it
}

TEST_CASE("job watch: the rendezvous watcher's store loss is passed on when the watch says nothing",
          "[job_watch]") {
  Bench b;
  b.begin(0);
  const auto said = std::chrono::steady_clock::now();
  b.watch.rendezvous_lost_store("lost the rendezvous store: timed out", PeerLoss::kSilence);
  REQUIRE(run_until(
      b.io, [&] { return !b.lost.empty(); }, kGuard));
  CHECK(std::chrono::steady_clock::now() - said >= 500ms);
  CHECK(b.lost[0] ==
        std::make_pair(std::string("lost the rendezvous store: timed out"), PeerLoss::kSilence));
}

TEST_CASE("job watch: with nothing watching a store loss is passed on at once", "[job_watch]") {
  Bench b;
  SECTION("one node") {
    b.begin(0, 0, 1);
  }
  SECTION("the job's store could not be reached") {
    JobConnections none;
    none.error = "connect to 10.0.0.1:29400 failed: refused";
    none.loss = PeerLoss::kDeath;
    b.watch.begin(round_of(0, 0, 2), none, false);
    CHECK(
        b.logged("this node cannot watch the job's failure record (connect to "
                 "10.0.0.1:29400 failed: refused)"));
  }
  CHECK_FALSE(b.watch.watching());
  b.watch.rendezvous_lost_store("lost the rendezvous store: reset", PeerLoss::kDeath);
  REQUIRE(b.lost.size() == 1);
  CHECK(b.lost[0].second == PeerLoss::kDeath);
}

TEST_CASE("job watch: a store loss is dropped once a failure holds", "[job_watch]") {
  Bench b;
  b.begin(0);
  // The store's loss is reported first; the record arrives while it is held back.
  b.watch.rendezvous_lost_store("lost the rendezvous store: reset", PeerLoss::kDeath);
  ddp::rendezvous::publish_failure(*b.store, failure_elsewhere(0));
  REQUIRE(run_until(
      b.io, [&] { return !b.failures.empty(); }, kGuard));
  run_for(b.io, kPastCauseWait);
  CHECK(b.lost.empty());
  // And with nothing watching any more: still the failure that holds.
  b.watch.stop();
  b.watch.rendezvous_lost_store("lost the rendezvous store: reset", PeerLoss::kDeath);
  CHECK(b.lost.empty());
}

TEST_CASE("job watch: a store loss held back is forgotten when the next attempt begins",
          "[job_watch]") {
  Bench b;
  b.begin(0);
  b.watch.rendezvous_lost_store("lost the rendezvous store: reset", PeerLoss::kDeath);
  b.begin(1);
  run_for(b.io, kPastCauseWait);
  CHECK(b.lost.empty());
  CHECK_FALSE(b.watch.store_gone());
  b.watch.mark_store_gone();
  CHECK(b.watch.store_gone());
}

TEST_CASE("job watch: a record awaited after publishing times out once, or is settled",
          "[job_watch]") {
  boost::asio::io_context io;
  RecordedEvents events;
  LoggedLines lines;
  JobWatch watch(io, "10.0.0.1", 15s, events.log, JobWatch::Hooks{}, 20ms);
  int timeouts = 0;
  watch.await_record([&] { ++timeouts; });
  CHECK(watch.awaiting_record());
  REQUIRE(run_until(
      io, [&] { return timeouts == 1; }, kGuard));
  CHECK_FALSE(watch.awaiting_record());
  CHECK(lines.logged("the job-wide failure record did not arrive"));
  CHECK_FALSE(watch.settle());  // nothing awaited any more

  watch.await_record([&] { ++timeouts; });
  CHECK(watch.settle());
  CHECK_FALSE(watch.awaiting_record());
  run_for(io, 60ms);
  CHECK(timeouts == 1);
}
