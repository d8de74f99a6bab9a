// The agent's link to the job-wide failure record, on its own over a MemoryStore: what it
// publishes (once, filled in), what it hears, whose record it is, and what stopping keeps.
#include "launcher/agent/job_failure_link.hpp"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/error.hpp"
#include "rendezvous/store/memory_store.hpp"

using namespace ddp::launcher;
using ddp::rendezvous::FailureRecord;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 20s;

ddp::rendezvous::RendezvousInfo round_of(uint64_t round, int group_rank, int nodes) {
  ddp::rendezvous::RendezvousInfo info;
  info.round = round;
  info.group_rank = group_rank;
  info.group_world_size = nodes;
  return info;
}

// What one link's watch reported (from its thread).
struct Heard {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<FailureRecord> record;
  std::optional<std::string> store_lost;
  int calls = 0;
  ddp::rendezvous::FailureWatchCallbacks callbacks() {
    ddp::rendezvous::FailureWatchCallbacks cb;
    cb.on_failure = [this](const FailureRecord& r) {
      std::lock_guard<std::mutex> lock(mu);
      record = r;
      ++calls;
      cv.notify_all();
    };
    cb.on_store_lost = [this](const std::string& m, ddp::PeerLoss) {
      std::lock_guard<std::mutex> lock(mu);
      store_lost = m;
      ++calls;
      cv.notify_all();
    };
    return cb;
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kGuard, [&] { return record || store_lost; });
  }
};

FailureRecord worker_exit(int rank, int code) {
  FailureRecord r;
  r.kind = "worker";
  r.rank = rank;
  r.exit_code = code;
  r.message = "boom";
  return r;
}

}  // namespace

TEST_CASE("job failure link: one node, or no job store, links nothing", "[job_link]") {
  int connects = 0;
  Heard heard;
  JobFailureLink link("node0", std::chrono::seconds(15));
  SECTION("one node: its own failures are the job's") {
    link.begin(round_of(0, 0, 1),
               connect_job(
                   [&] {
                     ++connects;
                     return std::make_shared<ddp::rendezvous::MemoryStore>();
                   },
                   1),
               heard.callbacks());
    CHECK(connects == 0);
  }
  SECTION("a rendezvous without a job store") {
    link.begin(round_of(0, 0, 2),
               connect_job(
                   [&]() -> std::shared_ptr<ddp::rendezvous::Store> {
                     ++connects;
                     return nullptr;
                   },
                   2),
               heard.callbacks());
    CHECK(connects == 1);
  }
  CHECK_FALSE(link.watching());
  CHECK_FALSE(link.publish(worker_exit(0, 1)));
  CHECK_FALSE(link.published());
}

TEST_CASE("job failure link: an unreachable store is said by connect_job, with what it means",
          "[job_link]") {
  const auto connections = connect_job(
      []() -> std::shared_ptr<ddp::rendezvous::Store> {
        throw ddp::StoreError("connect to 10.0.0.1:29400 failed: timed out",
                              ddp::PeerLoss::kSilence);
      },
      2);
  CHECK(connections.wait == nullptr);
  CHECK(connections.publish == nullptr);
  CHECK(connections.error == "connect to 10.0.0.1:29400 failed: timed out");
  CHECK(connections.loss == ddp::PeerLoss::kSilence);
  Heard heard;
  JobFailureLink link("node0", std::chrono::seconds(15));
  link.begin(round_of(0, 0, 2), connections, heard.callbacks());
  CHECK_FALSE(link.watching());
}

TEST_CASE("job failure link: one node publishes, every node hears the same record", "[job_link]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  const auto connect = [&]() -> std::shared_ptr<ddp::rendezvous::Store> { return store; };
  Heard heard0;
  Heard heard1;
  JobFailureLink node0("10.0.0.1", std::chrono::seconds(15));
  JobFailureLink node1("10.0.0.2", std::chrono::seconds(15));
  node0.begin(round_of(3, 0, 2), connect_job(connect, 2), heard0.callbacks());
  node1.begin(round_of(3, 1, 2), connect_job(connect, 2), heard1.callbacks());
  REQUIRE(node0.watching());
  REQUIRE(node1.watching());

  REQUIRE(node1.publish(worker_exit(5, 7)));
  CHECK(node1.published());
  CHECK_FALSE(node1.publish(worker_exit(6, 9)));  // once per attempt

  REQUIRE(heard0.wait());
  REQUIRE(heard1.wait());
  for (Heard* heard : {&heard0, &heard1}) {
    REQUIRE(heard->record);
    CHECK(heard->record->attempt == 3);  // filled in by the link
    CHECK(heard->record->group_rank == 1);
    CHECK(heard->record->host == "10.0.0.2");
    CHECK(heard->record->time > 0);
    CHECK(heard->record->rank == 5);
    CHECK(heard->record->exit_code == 7);
  }
  CHECK(node1.is_mine(*heard1.record));
  CHECK_FALSE(node0.is_mine(*heard0.record));

  // Once node 0 holds the record it publishes nothing of its own for this attempt.
  node0.hold(*heard0.record);
  REQUIRE(node0.failure());
  CHECK(node0.failure()->group_rank == 1);
  CHECK_FALSE(node0.publish(worker_exit(0, 1)));
  CHECK_FALSE(node0.published());

  // The next attempt starts clean.
  Heard next;
  node0.begin(round_of(4, 0, 2), connect_job(connect, 2), next.callbacks());
  CHECK_FALSE(node0.failure());
  CHECK_FALSE(node0.published());
  CHECK(node0.publish(worker_exit(0, 1)));
  REQUIRE(next.wait());
  CHECK(next.record->attempt == 4);
  CHECK(node0.is_mine(*next.record));
}

TEST_CASE("job failure link: a record from the same node number but another host is not mine",
          "[job_link]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  Heard heard;
  JobFailureLink link("10.0.0.1", std::chrono::seconds(15));
  link.begin(round_of(0, 0, 2),
             connect_job([&]() -> std::shared_ptr<ddp::rendezvous::Store> { return store; }, 2),
             heard.callbacks());
  FailureRecord other = worker_exit(0, 1);
  other.group_rank = 0;
  other.host = "10.0.0.9";
  CHECK_FALSE(link.is_mine(other));  // nothing published yet
  REQUIRE(link.publish(worker_exit(0, 1)));
  CHECK_FALSE(link.is_mine(other));
  other.host = "10.0.0.1";
  CHECK(link.is_mine(other));
}

TEST_CASE("job failure link: stopped, it calls nobody back and keeps what it knew", "[job_link]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  const auto connect = [&]() -> std::shared_ptr<ddp::rendezvous::Store> { return store; };
  Heard heard;
  JobFailureLink link("10.0.0.1", std::chrono::seconds(15));
  link.begin(round_of(0, 0, 2), connect_job(connect, 2), heard.callbacks());
  REQUIRE(link.publish(worker_exit(2, 3)));
  REQUIRE(heard.wait());
  link.hold(*heard.record);

  SECTION("stop") {
    link.stop();
    CHECK_FALSE(link.watching());
    CHECK(link.published());
    CHECK(link.failure());
    CHECK(link.is_mine(*heard.record));
    CHECK_FALSE(link.publish(worker_exit(1, 1)));
  }
  SECTION("release hands the stopped watch over, to flush what was published") {
    auto watch = link.release();
    REQUIRE(watch != nullptr);
    CHECK(watch->flush(5s));
    CHECK_FALSE(link.watching());
    CHECK(link.release() == nullptr);
  }
  std::lock_guard<std::mutex> lock(heard.mu);
  CHECK(heard.calls == 1);
}

TEST_CASE("job failure link: a stopped watch stays silent while a live one beside it hears",
          "[job_link]") {
  // Both nodes watch attempt 0; one stops before another node's failure is recorded. The live
  // watch must hear it (so the record did arrive), and the stopped one must not.
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  const auto connect = [&]() -> std::shared_ptr<ddp::rendezvous::Store> { return store; };
  Heard stopped_heard;
  Heard live_heard;
  JobFailureLink stopped("10.0.0.1", std::chrono::seconds(15));
  JobFailureLink live("10.0.0.2", std::chrono::seconds(15));
  stopped.begin(round_of(0, 0, 3), connect_job(connect, 3), stopped_heard.callbacks());
  live.begin(round_of(0, 1, 3), connect_job(connect, 3), live_heard.callbacks());
  stopped.stop();
  FailureRecord elsewhere = worker_exit(7, 5);
  elsewhere.group_rank = 2;
  ddp::rendezvous::publish_failure(*store, elsewhere);
  REQUIRE(live_heard.wait());
  CHECK(live_heard.record->rank == 7);
  std::lock_guard<std::mutex> lock(stopped_heard.mu);
  CHECK(stopped_heard.calls == 0);
  CHECK_FALSE(stopped_heard.record);
  CHECK_FALSE(stopped_heard.store_lost);
}
