// The job-wide failure record and its watch: what every agent of a multi-node job relies
// on to stop at once and agree on the root cause.
#include "rendezvous/failure_record.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/failure_watch.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/tcp_store.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {

const ddp::log::ScopedSink kQuietLog{[](ddp::log::Level, std::string_view) {}};
constexpr auto kGuard = 20s;

FailureRecord crash(int node, int rank, int code) {
  FailureRecord r;
  r.kind = "worker";
  r.attempt = 2;
  r.group_rank = node;
  r.host = "10.0.0." + std::to_string(node + 1);
  r.rank = rank;
  r.local_rank = 0;
  r.pid = 4242;
  r.exit_code = code;
  r.time = 1700000000.25;
  r.message = "boom on rank " + std::to_string(rank);
  r.traceback = "Traceback:\n  line 1";
  return r;
}

// What one agent's watch reported.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<FailureRecord> record;
  std::optional<std::string> store_lost;
  FailureWatchCallbacks callbacks() {
    FailureWatchCallbacks cb;
    cb.on_failure = [this](const FailureRecord& r) {
      std::lock_guard<std::mutex> lock(mu);
      record = r;
      cv.notify_all();
    };
    cb.on_store_lost = [this](const std::string& m, ddp::PeerLoss) {
      std::lock_guard<std::mutex> lock(mu);
      store_lost = m;
      cv.notify_all();
    };
    return cb;
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kGuard, [&] { return record || store_lost; });
  }
};

}  // namespace

TEST_CASE("failure record: encodes and decodes every field", "[rdzv][failure]") {
  const auto r = crash(1, 3, 7);
  const auto back = decode_failure(encode_failure(r));
  CHECK(back.kind == "worker");
  CHECK(back.attempt == 2);
  CHECK(back.group_rank == 1);
  CHECK(back.host == "10.0.0.2");
  CHECK(back.rank == 3);
  CHECK(back.pid == 4242);
  CHECK(back.exit_code == 7);
  CHECK(back.time == Approx(1700000000.25));
  CHECK(back.message == "boom on rank 3");
  CHECK(back.traceback == "Traceback:\n  line 1");
  CHECK(back.shell_status() == 7);
  CHECK_THAT(back.describe(), Catch::Contains("rank 3") && Catch::Contains("node 1 (10.0.0.2)") &&
                                  Catch::Contains("exit code 7: boom on rank 3"));
}

TEST_CASE("failure record: shell status of a signal, a lost node, an agent told to stop",
          "[rdzv][failure]") {
  auto r = crash(0, 0, 0);
  r.signal = 9;
  CHECK(r.shell_status() == 137);
  CHECK(r.restartable());
  r.final = true;  // its node will not restart itself: nobody does
  CHECK_FALSE(r.restartable());
  r.final = false;
  r.kind = "agent_signal";  // that node's agent is going away: nobody restarts
  r.signal = 15;
  CHECK(r.shell_status() == 143);
  CHECK_FALSE(r.restartable());
  r.kind = "node_lost";
  CHECK(r.shell_status() == 1);
  CHECK_FALSE(r.restartable());
}

TEST_CASE("failure record: text that is not a record is an error naming it", "[rdzv][failure]") {
  CHECK_THROWS_WITH(decode_failure("restart!"), Catch::Contains("failure record 'restart!'") &&
                                                    Catch::Contains("expected a JSON object"));
  CHECK_THROWS_AS(decode_failure(R"({"kind": "worker", "rank": "three"})"), ddp::ProtocolError);
}

TEST_CASE("failure record: the first published record wins for everyone", "[rdzv][failure]") {
  MemoryStore store;
  const auto first = publish_failure(store, crash(2, 5, 3));
  CHECK(first.group_rank == 2);
  // A node whose workers died of the first failure (a collective on a dead peer) loses.
  const auto second = publish_failure(store, crash(0, 0, 1));
  CHECK(second.group_rank == 2);
  CHECK(second.rank == 5);
  CHECK(second.exit_code == 3);
  // Another attempt has a record of its own.
  auto later = crash(0, 0, 1);
  later.attempt = 3;
  CHECK(publish_failure(store, later).group_rank == 0);
}

TEST_CASE("failure watch: every node hears the one record, whoever publishes", "[rdzv][failure]") {
  auto base = std::make_shared<MemoryStore>(10s);
  auto job = std::make_shared<PrefixStore>("/ddp_rdzv/j", base);
  constexpr int kNodes = 8;
  std::vector<Seen> seen(kNodes);
  std::vector<std::unique_ptr<FailureWatch>> watches;
  for (int i = 0; i < kNodes; ++i) {
    watches.push_back(std::make_unique<FailureWatch>(job, job, 2, i, seen[i].callbacks(), 50ms));
  }
  // Two nodes fail at once: one record holds, and every node hears the same one.
  auto a = std::async(std::launch::async, [&] { watches[3]->publish(crash(3, 9, 3)); });
  auto b = std::async(std::launch::async, [&] { watches[6]->publish(crash(6, 12, 139)); });
  a.get();
  b.get();
  for (auto& s : seen) REQUIRE(s.wait());
  const int winner = seen[0].record->group_rank;
  CHECK((winner == 3 || winner == 6));
  for (auto& s : seen) {
    REQUIRE(s.record);
    CHECK(s.record->group_rank == winner);
    CHECK(s.record->attempt == 2);
    CHECK_FALSE(s.store_lost);
  }
}

TEST_CASE("failure watch: a stopped watch calls nobody back", "[rdzv][failure]") {
  auto store = std::make_shared<MemoryStore>(10s);
  Seen seen;
  auto watch = std::make_unique<FailureWatch>(store, store, 0, 0, seen.callbacks(), 20ms);
  watch->stop();
  publish_failure(*store, crash(0, 0, 1));
  std::this_thread::sleep_for(100ms);
  std::lock_guard<std::mutex> lock(seen.mu);
  CHECK_FALSE(seen.record);
}

TEST_CASE("failure watch: the store's death is reported at once, naming the store",
          "[rdzv][failure]") {
  StoreServerOptions so;
  so.host = "127.0.0.1";
  auto server = std::make_unique<StoreServer>(so);
  TcpStoreOptions co;
  co.port = server->port();
  co.timeout = 60s;  // the watch must not wait this out
  co.connect_timeout = 1s;
  auto wait_store = std::make_shared<TcpStore>(co);
  auto publish_store = std::make_shared<TcpStore>(co);
  Seen seen;
  FailureWatch watch(wait_store, publish_store, 0, 1, seen.callbacks(), 30s);
  std::this_thread::sleep_for(50ms);
  const auto stopped = std::chrono::steady_clock::now();
  server->stop();
  REQUIRE(seen.wait());
  CHECK(std::chrono::steady_clock::now() - stopped < 10s);  // not the 30 s slice
  REQUIRE(seen.store_lost);
  CHECK_THAT(*seen.store_lost, Catch::Contains("tcp://127.0.0.1:" + std::to_string(co.port)));
}

TEST_CASE("failure watch: a store host that leaves right after announcing it is heard, not lost",
          "[rdzv][failure]") {
  // The announcement waits for the running nodes' watches to have read it; then the server
  // may go at once (the store host's process ends), and nobody takes that for a failure.
  for (int i = 0; i < 20; ++i) {
    StoreServerOptions so;
    so.host = "127.0.0.1";
    auto server = std::make_unique<StoreServer>(so);
    TcpStoreOptions co;
    co.port = server->port();
    co.timeout = 60s;
    co.connect_timeout = 1s;
    Seen seen;
    FailureWatch watch(std::make_shared<TcpStore>(co), std::make_shared<TcpStore>(co), 0, 1,
                       seen.callbacks(), 30s);
    TcpStore host(co);
    announce_store_leaving(host, 0, 0, "10.0.0.1", {1}, 10s);
    server->stop();
    REQUIRE(seen.wait());
    CHECK_FALSE(seen.store_lost);
    REQUIRE(seen.record);
    CHECK(seen.record->kind == "store_leaving");
  }
}

namespace {

// A store whose first WAIT answers only after a stall (a store behind a network blip).
class StallingStore final : public ForwardingStore {
 public:
  explicit StallingStore(std::chrono::milliseconds stall)
      : ForwardingStore(std::make_shared<MemoryStore>()), stall_(stall) {}
  using Store::wait;
  void wait(const std::vector<std::string>& k, Duration timeout) override {
    if (!stalled_.exchange(true)) std::this_thread::sleep_for(stall_);
    base().wait(k, timeout);
  }

 private:
  std::chrono::milliseconds stall_;
  std::atomic<bool> stalled_{false};
};

}  // namespace

TEST_CASE("failure watch: a WAIT slice the store answers late is reported once as a stall",
          "[rdzv][failure]") {
  auto store = std::make_shared<StallingStore>(1500ms);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Duration> stalls;
  FailureWatchCallbacks cb;
  cb.on_store_stall = [&](Duration late) {
    std::lock_guard<std::mutex> lock(mu);
    stalls.push_back(late);
    cv.notify_all();
  };
  FailureWatch watch(store, store, 0, 1, std::move(cb), 100ms);
  std::unique_lock<std::mutex> lock(mu);
  REQUIRE(cv.wait_for(lock, kGuard, [&] { return !stalls.empty(); }));
  CHECK(stalls[0] >= 1400ms);
  CHECK(stalls[0] < 10s);
  // Later slices answer on time: no more reports.
  lock.unlock();
  std::this_thread::sleep_for(500ms);
  lock.lock();
  CHECK(stalls.size() == 1);
  lock.unlock();
  watch.stop();
}

TEST_CASE("failure record: a store host leaving after a failure waits for its readers only",
          "[rdzv][failure]") {
  auto store = std::make_shared<MemoryStore>(10s);
  const ExitBarrier barrier{*store, "departed", 4};
  const auto alive = [](int g) { return "alive/" + std::to_string(g); };
  // Members 1 and 2 still run and are connected; 3 is counted out already. Node 0 leaves.
  store->set(alive(1), "x");
  store->set(alive(2), "x");
  store->set(alive(3), "x");
  barrier.count_out(3, "failed");
  const auto left_within = [&](Duration timeout) {
    auto done = std::async(std::launch::async,
                           [&] { wait_for_failure_readers(barrier, 0, 0, alive, timeout); });
    return done.wait_for(kGuard) == std::future_status::ready;
  };
  // No record: nothing for anyone to read, nothing to wait for (an hour would show).
  CHECK(left_within(std::chrono::hours(1)));
  publish_failure(*store, crash(0, 0, 3));
  // Both readers acknowledge (their failure watches do): it leaves then.
  auto readers = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(100ms);
    store->set(store_leaving_ack_key(0, 1), "1");
    store->set(store_leaving_ack_key(0, 2), "1");
  });
  CHECK(left_within(std::chrono::hours(1)));
  readers.get();
  // A reader that never answers is waited for no longer than the bound.
  store->delete_key(store_leaving_ack_key(0, 2));
  CHECK(left_within(200ms));
  // One whose agent is gone (its alive key with it) is not waited for at all.
  store->delete_key(alive(2));
  CHECK(left_within(std::chrono::hours(1)));
}
