// HangWatch on its own (hang_watch.hpp), with real FIFOs, a fake /proc and a MemoryStore for
// the other nodes' views: what the workers are told, when a rank is reported hung (once per
// attempt, never a running rank without a progress source, never one that exited or that its
// file timer killed), the analysis over every node's ranks (a slow rank is waited for), a late
// analysis of an attempt that ended, and the file timer's expiries.
#include "launcher/hang/hang_watch.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <csignal>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "tests/launcher/hang/fifo_test_support.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using ddp::progress::Phase;
using ddp::test::progress_line;
using ddp::test::run_for;
using ddp::test::run_until;
using ddp::test::TempDir;
using ddp::test::timer_request;
using ddp::test::wall_now;
using ddp::test::write_fifo;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 10s;
// Pids no live process has (above any pid_max), for timers that never signal anyone.
constexpr int kStranger = 2000000001;
constexpr int kOtherStranger = 2000000002;

// One node's watch, its loop, and what it reported.
struct Bench {
  explicit Bench(HangWatchOptions o) : watch(io, with_dir(std::move(o)), callbacks(), proc()) {}

  HangWatchOptions with_dir(HangWatchOptions o) const {
    o.run_dir = dir.path();
    return o;
  }
  HangWatchCallbacks callbacks() {
    HangWatchCallbacks c;
    c.on_timer_expired = [this](const ExpiredTimer& timer) { expired.push_back(timer); };
    c.on_hang = [this](const HangReport& report, const std::vector<RankSnapshot>& all) {
      hangs.emplace_back(report, all);
    };
    c.warn = [this](const std::string& message) { warnings.push_back(message); };
    return c;
  }
  HangWatch::ProcReader proc() {
    return [this](int pid) -> std::optional<ProcStatus> {
      std::lock_guard<std::mutex> lock(mu);
      ProcStatus status;
      status.pid = pid;
      status.state = states.count(pid) != 0 ? states.at(pid) : 'S';
      return status;
    };
  }
  // The value of NAME in what every worker gets ("" when absent).
  [[nodiscard]] std::string env(const std::string& name) const {
    for (const auto& entry : watch.worker_env()) {
      if (entry.starts_with(name + "=")) return entry.substr(name.size() + 1);
    }
    return "";
  }
  void progress(int rank, int pid, int64_t step, int64_t seq, Phase phase) {
    REQUIRE(write_fifo(env("DDPLAUNCH_PROGRESS_FILE"), progress_line(rank, pid, step, seq, phase)));
  }
  bool await_hangs(size_t n) {
    return run_until(
        io, [&] { return hangs.size() >= n; }, kGuard);
  }

  TempDir dir;
  boost::asio::io_context io;
  std::mutex mu;
  std::map<int, char> states;  // the fake /proc: each pid's state ('S' when not set)
  std::vector<std::pair<HangReport, std::vector<RankSnapshot>>> hangs;
  std::vector<ExpiredTimer> expired;
  std::vector<std::string> warnings;
  HangWatch watch;  // last: its callbacks use the members above
};

HangWatchOptions watching_progress(std::chrono::milliseconds timeout = 200ms) {
  HangWatchOptions o;
  o.timeout = timeout;
  return o;
}

HangWatchOptions file_timer() {
  HangWatchOptions o;
  o.file_timer = true;
  return o;
}

// Another node's view of one of its ranks, as its board wrote it ago_s seconds ago: at step 5,
// after (exit) or inside (enter) all_reduce #seq, silent for silent_s at that write.
std::string view_of(int rank, int64_t seq, Phase phase, double silent_s, bool hung,
                    double ago_s = 0) {
  RankSnapshot r;
  r.rank = rank;
  r.has_source = true;
  r.last.rank = rank;
  r.last.step = 5;
  r.last.op = "all_reduce";
  r.last.seq = seq;
  r.last.phase = phase;
  r.silent_s = silent_s;
  r.hung = hung;
  return encode_snapshots({r}, static_cast<int64_t>((wall_now() - ago_s) * 1000));
}

// Node 1's agent last wrote ago_s seconds ago: its rank inside all_reduce #3 of step 5,
// moving for the last time just before that write.
std::string view_written_ago(int rank, double ago_s) {
  return view_of(rank, 3, Phase::kEnter, 0, false, ago_s);
}

// A job store that stops answering writes when told to (this node cut off from it).
class SilencedStore final : public ddp::rendezvous::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void set(const std::string& key, const std::string& value) override {
    if (silent_) throw ddp::StoreTimeout("set '" + key + "': no answer (test)");
    ForwardingStore::set(key, value);
  }
  std::atomic<bool> silent_{false};
};

// A connection to the job's store that breaks for good when told (its peer closed it: the
// store's host was paused past the tolerance, or the store moved to a successor).
class BreakableStore final : public ddp::rendezvous::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void set(const std::string& key, const std::string& value) override {
    fail_if_broken();
    ForwardingStore::set(key, value);
  }
  std::string get(const std::string& key) override {
    fail_if_broken();
    return ForwardingStore::get(key);
  }
  bool check(const std::vector<std::string>& keys) override {
    fail_if_broken();
    return ForwardingStore::check(keys);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    fail_if_broken();
    return ForwardingStore::multi_get(keys);
  }
  std::atomic<bool> broken_{false};

 private:
  void fail_if_broken() const {
    if (broken_) throw ddp::StoreError("connection closed by the peer (test)");
  }
};

// A job store whose reads wait at a gate the test opens: an analysis in flight.
class GatedStore final : public ddp::rendezvous::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    std::unique_lock<std::mutex> lock(mu_);
    reached_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    lock.unlock();
    return ForwardingStore::compare_set(key, expected, desired);
  }
  // A read is waiting at the gate.
  bool reached() {
    std::lock_guard<std::mutex> lock(mu_);
    return reached_;
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool reached_ = false;
  bool open_ = false;
};

}  // namespace

TEST_CASE("hang watch: the workers are told where to write progress and file timers",
          "[hang_watch]") {
  SECTION("both, in the run directory") {
    auto o = watching_progress();
    o.file_timer = true;
    Bench b{o};
    CHECK(b.env("DDPLAUNCH_PROGRESS_FILE") == (b.dir.path() / "progress.fifo").string());
    CHECK(b.env("TORCHELASTIC_TIMER_FILE") == (b.dir.path() / "timer.fifo").string());
  }
  SECTION("the timer file torch names") {
    auto o = file_timer();
    TempDir elsewhere;
    o.timer_file = elsewhere.path() / "torch_timer";
    Bench b{o};
    CHECK(b.env("TORCHELASTIC_TIMER_FILE") == o.timer_file.string());
    CHECK(b.env("DDPLAUNCH_PROGRESS_FILE").empty());
  }
}

TEST_CASE("hang watch: a rank stopped for the timeout is reported, once per attempt",
          "[hang_watch]") {
  Bench b{watching_progress()};
  b.states[1000] = 'T';
  const auto began = std::chrono::steady_clock::now();
  b.watch.begin_attempt(nullptr, 0, 0, 1, {{0, 1000}, {1, 1001}});
  REQUIRE(b.await_hangs(1));
  CHECK(std::chrono::steady_clock::now() - began >= 200ms);
  const auto& [report, all] = b.hangs[0];
  CHECK(report.culprits == std::vector<int>{0});
  CHECK_THAT(report.text, StartsWith("rank 0: stopped (state T), no progress for"));
  REQUIRE(all.size() == 2);
  for (const auto& rank : all) {
    CHECK(rank.hung == (rank.rank == 0));
    CHECK(rank.state == (rank.rank == 0 ? 'T' : 'S'));
    CHECK_FALSE(rank.has_source);
  }
  run_for(b.io, 300ms);
  CHECK(b.hangs.size() == 1);
  // The next attempt is watched afresh.
  b.watch.end_attempt();
  b.watch.begin_attempt(nullptr, 1, 0, 1, {{0, 1000}});
  REQUIRE(b.await_hangs(2));
}

TEST_CASE("hang watch: a running rank without a progress source is never hung", "[hang_watch]") {
  Bench b{watching_progress(100ms)};
  b.watch.begin_attempt(nullptr, 0, 0, 1, {{0, 1000}, {1, 1001}});
  run_for(b.io, 500ms);
  CHECK(b.hangs.empty());
}

TEST_CASE("hang watch: progress lines feed the analysis, which names the rank behind",
          "[hang_watch]") {
  Bench b{watching_progress()};
  b.watch.begin_attempt(nullptr, 0, 0, 1, {{0, 1000}, {1, 1001}});
  b.progress(0, 1000, 5, 3, Phase::kEnter);
  b.progress(1, 1001, 5, 2, Phase::kExit);
  REQUIRE(b.await_hangs(1));
  const auto& [report, all] = b.hangs[0];
  CHECK(report.culprits == std::vector<int>{1});
  CHECK(report.victims == std::vector<int>{0});
  CHECK_THAT(report.text, Contains("rank 1: no progress for") &&
                              Contains("in step 5, after collective all_reduce #2"));
  for (const auto& rank : all) {
    CHECK(rank.has_source);
    CHECK(rank.hung);
    CHECK(rank.last.seq == (rank.rank == 0 ? 3 : 2));
    CHECK(rank.silent_s >= 0.2);
  }
}

TEST_CASE("hang watch: a rank that is gone, or an attempt that ended, is not watched",
          "[hang_watch]") {
  Bench b{watching_progress(100ms)};
  b.states[1000] = 'T';
  b.watch.begin_attempt(nullptr, 0, 0, 1, {{0, 1000}});
  SECTION("the worker exited") {
    b.watch.worker_exited(1000);
  }
  SECTION("the attempt ended") {
    b.watch.end_attempt();
  }
  run_for(b.io, 500ms);
  CHECK(b.hangs.empty());
}

TEST_CASE("hang watch: every node's view is analysed, a slow rank elsewhere is waited for",
          "[hang_watch]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  Bench b{watching_progress()};
  // Node 1's rank 1 is behind (after all_reduce #2) but moved a moment ago by its clock.
  store->set("hang/0/1", view_of(1, 2, Phase::kExit, -30, false));
  b.watch.begin_attempt([store] { return store; }, 0, 0, 2, {{0, 1000}});
  b.progress(0, 1000, 5, 3, Phase::kEnter);  // rank 0 waits inside #3
  REQUIRE(run_until(
      b.io, [&] { return !b.warnings.empty(); }, kGuard));
  CHECK_THAT(b.warnings[0], Contains("rank 1 is behind at all_reduce #2 but still progressing"));
  // This node's view went to the store for the others.
  const auto mine =
      decode_snapshots(store->get("hang/0/0"), static_cast<int64_t>(wall_now() * 1000));
  REQUIRE(mine.size() == 1);
  CHECK(mine[0].rank == 0);
  CHECK(mine[0].last.seq == 3);
  run_for(b.io, 300ms);  // checked again meanwhile: said once, nothing acted on
  CHECK(b.warnings.size() == 1);
  CHECK(b.hangs.empty());
  // Rank 1 stops too: now it is the culprit, on node 1.
  store->set("hang/0/1", view_of(1, 2, Phase::kExit, 30, true));
  REQUIRE(b.await_hangs(1));
  CHECK(b.hangs[0].first.culprits == std::vector<int>{1});
  CHECK(b.hangs[0].first.victims == std::vector<int>{0});
  CHECK(b.hangs[0].second.size() == 2);
}

TEST_CASE("hang watch: an analysis that comes back after its attempt ended is dropped",
          "[hang_watch]") {
  auto store = std::make_shared<GatedStore>(std::make_shared<ddp::rendezvous::MemoryStore>(10s));
  Bench b{watching_progress(100ms)};
  b.states[1000] = 'T';
  b.watch.begin_attempt([store] { return store; }, 0, 0, 2, {{0, 1000}});
  // The hang is found and every node's view is being read (off the loop) when ...
  REQUIRE(run_until(
      b.io, [&] { return store->reached(); }, kGuard));
  SECTION("... the group stops") {
    b.watch.end_attempt();
  }
  SECTION("... the next attempt begins, whose rank runs") {
    b.watch.begin_attempt([store] { return store; }, 1, 0, 2, {{0, 1001}});
  }
  store->open();
  run_for(b.io, 300ms);
  CHECK(b.hangs.empty());
}

TEST_CASE(
    "hang watch: a file-timer scope that expired is reported, timers of exited workers "
    "and of the last attempt are forgotten",
    "[hang_watch]") {
  Bench b{file_timer()};
  b.watch.begin_attempt(nullptr, 0, 0, 1, {{0, kStranger}, {1, kOtherStranger}});
  const auto timers = b.env("TORCHELASTIC_TIMER_FILE");
  // Each batch ends with a timer already expired: once it is reported, the batch was read.
  const auto read_batch = [&](const std::string& lines) {
    const size_t before = b.expired.size();
    REQUIRE(
        write_fifo(timers, lines + timer_request(kOtherStranger + 1, "ack", wall_now() - 1, 0)));
    REQUIRE(run_until(
        b.io, [&] { return b.expired.size() > before; }, kGuard));
    CHECK(b.expired.back().pid == kOtherStranger + 1);
    CHECK(b.expired.back().scope == "ack");
    CHECK(b.expired.back().signal == 0);
    CHECK_FALSE(b.expired.back().stack_requested);
  };
  const double soon = wall_now() + 0.3;
  read_batch(timer_request(kStranger, "step", soon, 0) +
             timer_request(kOtherStranger, "step", soon, 0));
  b.watch.worker_exited(kOtherStranger);
  REQUIRE(run_until(
      b.io, [&] { return b.expired.back().pid == kStranger; }, kGuard));
  CHECK(b.expired.back().scope == "step");
  run_for(b.io, 100ms);
  CHECK(b.expired.back().pid == kStranger);  // the exited worker's timer never expired

  read_batch(timer_request(kStranger, "step", wall_now() + 0.3, 0));
  const size_t before = b.expired.size();
  b.watch.end_attempt();
  b.watch.begin_attempt(nullptr, 1, 0, 1, {{0, kStranger}});
  run_for(b.io, 500ms);
  CHECK(b.expired.size() == before);
}

TEST_CASE("hang watch: a rank its file timer killed is not reported hung as well", "[hang_watch]") {
  auto o = watching_progress(200ms);
  o.file_timer = true;
  Bench b{o};
  // The timer signals the real pid: this test's own, with a signal that does nothing here.
  const int me = ::getpid();
  b.states[me] = 'T';
  b.watch.begin_attempt(nullptr, 0, 0, 1, {{0, me}});
  REQUIRE(write_fifo(b.env("TORCHELASTIC_TIMER_FILE"),
                     timer_request(me, "step", wall_now() - 1, SIGWINCH)));
  REQUIRE(run_until(
      b.io, [&] { return !b.expired.empty(); }, kGuard));
  CHECK(b.expired[0].signal == SIGWINCH);
  CHECK(b.expired[0].kill_error == 0);
  run_for(b.io, 600ms);
  CHECK(b.hangs.empty());
}

TEST_CASE("hang watch: a bad progress line is a warning, not a crash", "[hang_watch]") {
  Bench b{watching_progress()};
  b.watch.begin_attempt(nullptr, 0, 0, 1, {{0, 1000}});
  REQUIRE(write_fifo(b.env("DDPLAUNCH_PROGRESS_FILE"), "v9 what is this\n"));
  REQUIRE(run_until(
      b.io, [&] { return !b.warnings.empty(); }, kGuard));
  CHECK_THAT(b.warnings[0], Contains("v9"));
}

TEST_CASE("hang watch: ranks waiting on a node not heard from are not hung, and that is said once",
          "[hang_watch]") {
  // Node 1's agent last wrote its view 10 s ago (paused, or cut off): its rank 1 waits in the
  // same all-reduce as this node's rank 0, and looks neither stopped nor behind.
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  auto o = watching_progress();
  o.unheard_limit = 60s;
  Bench b{o};
  store->set("hang/0/1", view_written_ago(1, 10));
  b.watch.begin_attempt([store] { return store; }, 0, 0, 2, {{0, 1000}});
  b.progress(0, 1000, 5, 3, Phase::kEnter);
  REQUIRE(run_until(
      b.io, [&] { return !b.warnings.empty(); }, kGuard));
  CHECK_THAT(b.warnings[0], StartsWith("no progress, waiting on a node that is not heard from: "
                                       "rank 1: its node not heard from for 10 s") &&
                                Contains("--peer_tolerance") && Contains("after 60 s unheard"));
  run_for(b.io, 500ms);  // checked again meanwhile: said once, nothing reported
  CHECK(b.warnings.size() == 1);
  CHECK(b.hangs.empty());
  // Node 1 is heard again, its rank still where it was and now behind: a hang as any other.
  store->set("hang/0/1", view_of(1, 2, Phase::kExit, 30, true));
  REQUIRE(b.await_hangs(1));
  CHECK(b.hangs[0].first.culprits == std::vector<int>{1});
  CHECK(b.hangs[0].first.unheard.empty());
  CHECK(b.hangs[0].first.victims == std::vector<int>{0});
}

TEST_CASE("hang watch: a node unheard for longer than unheard_limit is a hang on it",
          "[hang_watch]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  auto o = watching_progress();
  o.unheard_limit = 5s;  // the tolerance did not count node 1 out in time
  Bench b{o};
  store->set("hang/0/1", view_written_ago(1, 10));
  b.watch.begin_attempt([store] { return store; }, 0, 0, 2, {{0, 1000}});
  b.progress(0, 1000, 5, 3, Phase::kEnter);
  REQUIRE(b.await_hangs(1));
  CHECK(b.warnings.empty());
  CHECK(b.hangs[0].first.culprits == std::vector<int>{1});
  CHECK(b.hangs[0].first.unheard == std::vector<int>{1});
  CHECK(b.hangs[0].first.victims == std::vector<int>{0});
}

TEST_CASE("hang watch: a store that does not answer this node is waited on until unheard_limit",
          "[hang_watch]") {
  // This node may be the one cut off: its own ranks wait on peers it cannot hear about.
  auto store = std::make_shared<SilencedStore>(std::make_shared<ddp::rendezvous::MemoryStore>(10s));
  auto o = watching_progress();
  o.unheard_limit = 1s;
  Bench b{o};
  b.watch.begin_attempt([store] { return store; }, 0, 0, 2, {{0, 1000}});
  b.progress(0, 1000, 5, 3, Phase::kEnter);
  store->silent_ = true;
  REQUIRE(run_until(
      b.io, [&] { return !b.warnings.empty(); }, kGuard));
  CHECK_THAT(b.warnings[0], Contains("the job's store does not answer this node"));
  CHECK(b.hangs.empty());
  // Past the limit: a hang, analysed on this node's ranks alone.
  REQUIRE(b.await_hangs(1));
  CHECK(b.warnings.size() == 1);
  CHECK(b.hangs[0].second.size() == 1);
  CHECK(b.hangs[0].first.victims == std::vector<int>{0});
}

TEST_CASE("hang watch: a check long overdue (the agent did not run) judges nothing until the next",
          "[hang_watch]") {
  // A paused node: the agent and its ranks stop together and resume together. At the first
  // check after the pause the ranks' silence includes it, though they are about to report.
  // Nor is this node's view published then: with a fresh time on it, the other nodes would
  // take these ranks for hung now.
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  Bench b{watching_progress(2000ms)};  // a check every 400 ms
  b.watch.begin_attempt([store] { return store; }, 0, 0, 2, {{0, 1000}});
  b.progress(0, 1000, 5, 3, Phase::kEnter);
  REQUIRE(run_until(
      b.io, [&] { return store->check({"hang/0/0"}); }, kGuard));
  run_for(b.io, 500ms);
  const auto written = [&] {
    const auto view = nlohmann::json::parse(store->get("hang/0/0"));
    return view.at("written_ms").get<int64_t>();
  };
  const int64_t before = written();
  std::this_thread::sleep_for(2500ms);  // the loop does not run: the pause
  REQUIRE(run_until(
      b.io, [&] { return !b.warnings.empty() || !b.hangs.empty(); }, kGuard));
  CHECK(b.hangs.empty());
  REQUIRE(b.warnings.size() == 1);
  CHECK_THAT(b.warnings[0],
             StartsWith("this agent did not run for") && Contains("judged at the next check"));
  run_for(b.io, 150ms);  // the next check is 400 ms away
  CHECK(written() == before);
  b.progress(0, 1000, 5, 4, Phase::kEnter);  // the rank runs again too
  run_for(b.io, 1000ms);
  CHECK(b.hangs.empty());
}

TEST_CASE("hang watch: an unchanged view is written again every second, with its time",
          "[hang_watch]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  Bench b{watching_progress(1000ms)};  // a check every 200 ms
  // A rank with no progress source, running: never hung, its view never changes.
  b.watch.begin_attempt([store] { return store; }, 0, 0, 2, {{0, 1000}});
  REQUIRE(run_until(
      b.io, [&] { return store->check({"hang/0/0"}); }, kGuard));
  const auto age = [&] {
    const auto view =
        decode_snapshots(store->get("hang/0/0"), static_cast<int64_t>(wall_now() * 1000));
    return view.empty() ? -1.0 : view[0].unheard_s;
  };
  // The view is rewritten anyway, so its age stays near a second (at most 1 s + a check).
  std::vector<double> ages;
  for (int i = 0; i < 5; ++i) {
    run_for(b.io, 500ms);
    ages.push_back(age());
  }
  INFO("ages: " << ages[0] << " " << ages[1] << " " << ages[2] << " " << ages[3] << " " << ages[4]);
  CHECK(*std::max_element(ages.begin(), ages.end()) < 2.5);
  CHECK(*std::min_element(ages.begin(), ages.end()) >= 0);
}

TEST_CASE("hang watch: after its store connection broke, the board opens another and is heard",
          "[hang_watch]") {
  // The board outlives rounds (one per job). Kept, a broken connection left this node unheard
  // by every other node from then on: after the store moved, each node analysed its own ranks
  // alone, and one joining later named its own healthy rank hung (docs/chaos.md, seed 7).
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  std::mutex mu;
  std::vector<std::shared_ptr<BreakableStore>> opened;
  const auto connections = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return opened.size();
  };
  Bench b{watching_progress(1000ms)};  // a check every 200 ms, the view rewritten every second
  b.watch.begin_attempt(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        opened.push_back(std::make_shared<BreakableStore>(base));
        return opened.back();
      },
      0, 0, 2, {{0, 1000}});
  REQUIRE(run_until(
      b.io, [&] { return base->check({"hang/0/0"}); }, kGuard));
  {
    std::lock_guard<std::mutex> lock(mu);
    REQUIRE(opened.size() == 1);
    opened[0]->broken_ = true;
  }
  base->delete_key("hang/0/0");
  REQUIRE(run_until(
      b.io, [&] { return base->check({"hang/0/0"}); }, kGuard));
  CHECK(connections() == 2);
}
