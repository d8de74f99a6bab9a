// The elastic rendezvous with many simulated nodes (threads) on one MemoryStore.
#include "rendezvous/dynamic_rendezvous.hpp"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/exit_barrier.hpp"
#include "rendezvous/round_keys.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "rendezvous/store/prefix_store.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {

// The simulated nodes' progress lines would only clutter the test output.
const ddp::log::ScopedSink kQuietLog{[](ddp::log::Level, std::string_view) {}};

// Guard against hangs only; no assertion depends on how fast anything is.
constexpr auto kGuard = 20s;

// Records membership changes reported to one agent.
class ChangeLog {
 public:
  void operator()(MembershipChange change) {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.push_back(change);
    cv_.notify_all();
  }
  // Waits (up to kGuard) for the first change and returns it.
  std::optional<MembershipChange> first() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, kGuard, [&] { return !seen_.empty(); });
    if (seen_.empty()) return std::nullopt;
    return seen_.front();
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<MembershipChange> seen_;
};

struct Cluster {
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>(10s);

  static DynamicRendezvousOptions options(int min_nodes, int max_nodes, int nproc = 1,
                                          std::string run_id = "job") {
    DynamicRendezvousOptions o;
    o.run_id = std::move(run_id);
    o.min_nodes = min_nodes;
    o.max_nodes = max_nodes;
    o.local_world_size = nproc;
    o.node_addr = "127.0.0.1";
    o.master_addr = "127.0.0.1";
    o.master_port = 29400;
    o.join_timeout = 10s;
    o.last_call_timeout = 300ms;
    o.close_timeout = 5s;
    o.heartbeat_interval = 50ms;
    o.lease_timeout = 300ms;
    o.progress_interval = 1s;
    return o;
  }

  // The node hosting the store: its shutdown() waits in the exit barrier (60 s at most, so
  // a wait for a node that never comes hits the test's hang guard first).
  std::unique_ptr<DynamicRendezvous> store_host(DynamicRendezvousOptions o) {
    o.hosts_store = true;
    o.exit_barrier_timeout = std::chrono::seconds(60);
    return node(o);
  }

  std::unique_ptr<DynamicRendezvous> node(const DynamicRendezvousOptions& o) {
    auto shared = store;
    return std::make_unique<DynamicRendezvous>(o, shared, [shared] { return shared; });
  }
};

std::future<RendezvousInfo> join_async(DynamicRendezvous& node) {
  return std::async(std::launch::async, [&node] { return node.next_rendezvous(); });
}

// Joins every node concurrently and returns their infos in node order.
std::vector<RendezvousInfo> join_all(const std::vector<DynamicRendezvous*>& nodes) {
  std::vector<std::future<RendezvousInfo>> futures;
  for (auto* n : nodes) futures.push_back(join_async(*n));
  std::vector<RendezvousInfo> infos;
  for (auto& f : futures) infos.push_back(f.get());
  return infos;
}

// Group ranks form 0..n-1 and RANK offsets are prefix sums of nproc in group-rank order.
void check_consistent(const std::vector<RendezvousInfo>& infos, const std::vector<int>& nproc) {
  std::map<int, size_t> by_rank;
  int total = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    by_rank[infos[i].group_rank] = i;
    total += nproc[i];
  }
  REQUIRE(by_rank.size() == infos.size());
  int offset = 0;
  int expected_rank = 0;
  for (const auto& [rank, i] : by_rank) {
    CHECK(rank == expected_rank++);
    CHECK(infos[i].rank_offset == offset);
    CHECK(infos[i].world_size == total);
    CHECK(infos[i].group_world_size == static_cast<int>(infos.size()));
    CHECK(infos[i].round == infos[0].round);
    offset += nproc[i];
  }
}

}  // namespace

TEST_CASE("dynamic: MAX nodes agree at once on ranks and offsets", "[rdzv][dynamic]") {
  Cluster c;
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  std::vector<DynamicRendezvous*> ptrs;
  std::vector<int> nproc;
  for (int i = 0; i < 8; ++i) {
    nproc.push_back(i % 3 + 1);
    auto o = Cluster::options(8, 8, nproc.back());
    o.last_call_timeout = 60s;  // must not matter: the round closes at MAX
    nodes.push_back(c.node(o));
    ptrs.push_back(nodes.back().get());
  }
  const auto infos = join_all(ptrs);
  check_consistent(infos, nproc);
  CHECK(infos[0].round == 0);
  CHECK(infos[0].master_port == 29400);
}

TEST_CASE("dynamic: between MIN and MAX the round closes after the last call", "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 4);
  o.last_call_timeout = 1s;
  auto a = c.node(o), b = c.node(o), d = c.node(o);
  const auto began = std::chrono::steady_clock::now();
  const auto infos = join_all({a.get(), b.get(), d.get()});
  const auto waited = std::chrono::steady_clock::now() - began;
  check_consistent(infos, {1, 1, 1});
  // The last call starts at the MIN-th arrival, after `began`: the round waited all of it
  // for a fourth node (closing at MIN, or as soon as the three were in, would be sooner),
  // and closed then, not at the join timeout (a bound only loose: a busy machine is slow).
  CHECK(waited >= o.last_call_timeout);
  CHECK(waited < o.join_timeout);
}

TEST_CASE("dynamic: group ranks are stable when the same nodes re-form", "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(3, 3);
  auto a = c.node(o), b = c.node(o), d = c.node(o);
  const auto first = join_all({a.get(), b.get(), d.get()});
  const auto second = join_all({d.get(), b.get(), a.get()});
  CHECK(second[0].round == 1);
  CHECK(second[2].group_rank == first[0].group_rank);
  CHECK(second[1].group_rank == first[1].group_rank);
  CHECK(second[0].group_rank == first[2].group_rank);
}

TEST_CASE("dynamic: a late node makes the running nodes re-form with it", "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 3, 2);
  auto a = c.node(o), b = c.node(o);
  const auto first = join_all({a.get(), b.get()});
  check_consistent(first, {2, 2});
  ChangeLog log_a, log_b;
  a->watch(std::ref(log_a));
  b->watch(std::ref(log_b));

  auto late = c.node(o);
  auto late_join = join_async(*late);
  REQUIRE(log_a.first() == MembershipChange::kNodeWaiting);
  REQUIRE(log_b.first() == MembershipChange::kNodeWaiting);
  auto ja = join_async(*a);
  auto jb = join_async(*b);
  const std::vector<RendezvousInfo> second{ja.get(), jb.get(), late_join.get()};
  check_consistent(second, {2, 2, 2});
  CHECK(second[0].world_size == 6);
  CHECK(second[0].group_rank == first[0].group_rank);
  CHECK(second[1].group_rank == first[1].group_rank);
  CHECK(second[2].group_rank == 2);
}

TEST_CASE(
    "dynamic: a late node whose agent starts workers first asks the group once they are ready",
    "[rdzv][dynamic][spare]") {
  // With a watcher (an agent that parks its workers before it is admitted), the late node says
  // kJoining and asks the running nodes to re-form only after workers_ready(): they go on
  // training meanwhile instead of waiting for its workers' start-up in the new round.
  Cluster c;
  auto o = Cluster::options(2, 3);
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  ChangeLog log_a;
  a->watch(std::ref(log_a));
  auto late = c.node(o);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<SpareNotice> notices;
  late->watch_spare([&](const SpareNotice& notice) {
    std::lock_guard<std::mutex> lock(mu);
    notices.push_back(notice);
    cv.notify_all();
  });
  auto late_join = join_async(*late);
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, kGuard, [&] { return !notices.empty(); }));
    CHECK(notices[0].kind == SpareNotice::Kind::kJoining);
    CHECK(notices[0].round == 1);
  }
  std::this_thread::sleep_for(300ms);  // (a claim would reach a's watcher within ms)
  CHECK(log_a.count() == 0);           // not asked yet: the workers are not ready
  late->workers_ready();
  REQUIRE(log_a.first() == MembershipChange::kNodeWaiting);
  auto ja = join_async(*a);
  auto jb = join_async(*b);
  const std::vector<RendezvousInfo> second{ja.get(), jb.get(), late_join.get()};
  check_consistent(second, {1, 1, 1});
  CHECK(second[2].round == 1);
}

TEST_CASE("dynamic: a node that stops heartbeating is reported lost, survivors re-form",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 3);
  auto a = c.node(o), b = c.node(o), d = c.node(o);
  join_all({a.get(), b.get(), d.get()});
  ChangeLog log_a, log_b;
  a->watch(std::ref(log_a));
  b->watch(std::ref(log_b));
  d.reset();  // dies without a word: its heartbeats stop
  REQUIRE(log_a.first() == MembershipChange::kNodeLost);
  REQUIRE(log_b.first() == MembershipChange::kNodeLost);
  // Destroyed, it also left its presence (an orderly leave): the others may see that first.
  CHECK_THAT(a->last_change().text, Catch::Contains("stopped heartbeating") ||
                                        Catch::Contains("is gone (its store connection"));
  const auto infos = join_all({a.get(), b.get()});
  check_consistent(infos, {1, 1});
  CHECK(infos[0].round == 1);
}

TEST_CASE("dynamic: a survivor later than the re-formed round's last call opens the next round",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(1, 3);
  o.last_call_timeout = 2s;  // a re-joins round 2 within it once told, even on a loaded machine
  auto a = c.node(o), b = c.node(o), d = c.node(o);
  join_all({a.get(), b.get(), d.get()});  // MAX: round 0 closes at once
  ChangeLog log_a, log_b;
  a->watch(std::ref(log_a));
  b->watch(std::ref(log_b));
  d.reset();
  REQUIRE(log_a.first() == MembershipChange::kNodeLost);
  REQUIRE(log_b.first() == MembershipChange::kNodeLost);
  // a is quick: round 1 closes with it alone (MIN 1) after the last call; b is slower.
  const auto alone = a->next_rendezvous();
  REQUIRE(alone.round == 1);
  REQUIRE(alone.group_world_size == 1);
  ChangeLog log_a1;
  a->watch(std::ref(log_a1));
  auto jb = join_async(*b);
  // b, a member of round 0, finds round 1 closed: it opens round 2 itself and arrives there
  // rather than wait for a round 2 that only a member of round 1 could open.
  const auto until = std::chrono::steady_clock::now() + kGuard;
  while (!c.store->check({"/ddp_rdzv/job/r2/arrived"}) &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  REQUIRE(c.store->check({"/ddp_rdzv/job/r2/open", "/ddp_rdzv/job/r2/arrived"}));
  // The running member is told and re-forms with it.
  REQUIRE(log_a1.first() == MembershipChange::kNodeWaiting);
  auto ja = join_async(*a);
  const auto infos = std::vector<RendezvousInfo>{ja.get(), jb.get()};
  check_consistent(infos, {1, 1});
  CHECK(infos[0].round == 2);
}

TEST_CASE("dynamic: fewer than MIN nodes left after a loss is a clear error", "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  o.join_timeout = 1s;
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  ChangeLog log_a;
  a->watch(std::ref(log_a));
  b.reset();
  REQUIRE(log_a.first() == MembershipChange::kNodeLost);
  REQUIRE_THROWS_AS(a->next_rendezvous(), ddp::RendezvousError);
  try {
    a->next_rendezvous();
  } catch (const ddp::RendezvousError& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("/2 nodes joined") && Catch::Contains("stopped heartbeating"));
  }
}

TEST_CASE("dynamic: MIN never reached times out naming the count", "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 4);
  o.join_timeout = 500ms;
  auto a = c.node(o);
  REQUIRE_THROWS_WITH(a->next_rendezvous(), Catch::Contains("only 1/2 nodes joined") &&
                                                Catch::Contains("join_timeout 500 ms") &&
                                                Catch::Contains("'job'"));
}

TEST_CASE("dynamic: after shutdown, new and waiting nodes get RendezvousClosed",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  o.join_timeout = 60s;  // the closed error must come long before this
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  auto waiting = c.node(o);  // the group is full: waits for a next round
  auto waiting_join = join_async(*waiting);
  a->shutdown();
  // One node finished: the job goes on for the other, and the waiting node still waits.
  CHECK(waiting_join.wait_for(300ms) == std::future_status::timeout);
  b->shutdown();  // the last member out closes the rendezvous
  REQUIRE_THROWS_AS(waiting_join.get(), ddp::RendezvousClosed);
  auto fresh = c.node(o);
  REQUIRE_THROWS_WITH(fresh->next_rendezvous(), Catch::Contains("closed"));
}

TEST_CASE("dynamic: two rdzv_ids on one store never mix", "[rdzv][dynamic]") {
  Cluster c;
  auto x1 = c.node(Cluster::options(2, 2, 1, "x")), x2 = c.node(Cluster::options(2, 2, 1, "x"));
  auto y1 = c.node(Cluster::options(2, 2, 3, "y")), y2 = c.node(Cluster::options(2, 2, 3, "y"));
  const auto infos = join_all({x1.get(), y1.get(), x2.get(), y2.get()});
  check_consistent({infos[0], infos[2]}, {1, 1});
  check_consistent({infos[1], infos[3]}, {3, 3});
  x1->shutdown();  // closing one job leaves the other usable
  const auto again = join_all({y1.get(), y2.get()});
  check_consistent(again, {3, 3});
}

TEST_CASE("dynamic: a member re-joining (its workers failed) makes the others re-form",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  ChangeLog log_b;
  b->watch(std::ref(log_b));
  auto ja = join_async(*a);
  REQUIRE(log_b.first() == MembershipChange::kNodeWaiting);
  auto jb = join_async(*b);
  check_consistent({ja.get(), jb.get()}, {1, 1});
}

TEST_CASE("dynamic: a late node does not disturb a full group", "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(1, 2);
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  ChangeLog log_a;
  a->watch(std::ref(log_a));
  auto late_options = o;
  late_options.join_timeout =
      300ms;  // a spare waits past it: join_timeout is for a group with room
  auto late = c.node(late_options);
  auto late_join = join_async(*late);
  CHECK(late_join.wait_for(1s) == std::future_status::timeout);
  CHECK(log_a.count() == 0);
  a->shutdown();
  b->shutdown();
  REQUIRE_THROWS_AS(late_join.get(), NotNeeded);
}

namespace {

// What one node logs and reports as a spare (from the rendezvous thread).
struct SpareLog {
  std::mutex mu;
  std::vector<std::string> lines;
  std::vector<SpareNotice> notices;
  size_t lines_with(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    return static_cast<size_t>(std::count_if(lines.begin(), lines.end(), [&](const auto& line) {
      return line.find(text) != std::string::npos;
    }));
  }
  std::vector<SpareNotice> seen() {
    std::lock_guard<std::mutex> lock(mu);
    return notices;
  }
};

}  // namespace

TEST_CASE("dynamic: a node that finds the group full stands by as a spare until a member is lost",
          "[rdzv][dynamic][spare]") {
  SpareLog log;
  const ddp::log::ScopedSink capture{[&](ddp::log::Level, std::string_view line) {
    std::lock_guard<std::mutex> lock(log.mu);
    log.lines.emplace_back(line);
  }};
  Cluster c;
  auto o = Cluster::options(2, 2);
  o.progress_interval = 100ms;  // a waiting line every 5 s would show up here many times
  auto a = c.node(o), b = c.node(o);
  const auto first = join_all({a.get(), b.get()});
  ChangeLog log_a;
  a->watch(std::ref(log_a));
  auto spare = c.node(o);
  spare->watch_spare([&](const SpareNotice& notice) {
    std::lock_guard<std::mutex> lock(log.mu);
    log.notices.push_back(notice);
  });
  auto spare_join = join_async(*spare);
  CHECK(spare_join.wait_for(1s) == std::future_status::timeout);
  CHECK(log_a.count() == 0);  // a full group is not asked to re-form
  CHECK(log.lines_with("standing by as a spare for job job (group full at 2 nodes)") == 1);
  CHECK(log.lines_with("waiting") == 0);
  auto notices = log.seen();
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].kind == SpareNotice::Kind::kStandingBy);
  CHECK(notices[0].round == 1);
  CHECK(notices[0].group_full_at == 2);

  b.reset();  // dies: a re-forms, and the spare takes b's place
  REQUIRE(log_a.first() == MembershipChange::kNodeLost);
  auto ja = join_async(*a);
  const std::vector<RendezvousInfo> second{ja.get(), spare_join.get()};
  check_consistent(second, {1, 1});
  CHECK(second[0].round == 1);
  CHECK(second[0].group_world_size == 2);  // the world size is kept
  CHECK(second[0].group_rank == first[0].group_rank);
  notices = log.seen();
  REQUIRE(notices.size() == 2);
  CHECK(notices[1].kind == SpareNotice::Kind::kAdmitted);
  CHECK(notices[1].round == 1);
  CHECK(notices[1].group_rank == second[1].group_rank);
  CHECK(log.lines_with("admitted as a spare in round 1") == 1);
  CHECK(log.lines_with("standing by as a spare") == 1);
}

namespace {

// A spare's connection that wakes from its wait for a round to open only once the test opens
// a gate: the spare is slow (a loaded machine), so a later spare reaches the round first.
class SlowToOpenStore final : public ForwardingStore {
 public:
  SlowToOpenStore(std::shared_ptr<Store> base, std::shared_future<void> gate)
      : ForwardingStore(std::move(base)), gate_(std::move(gate)) {}
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    base().wait(keys, timeout);
    const bool opening = std::any_of(keys.begin(), keys.end(), [](const std::string& k) {
      return k.size() >= 5 && k.compare(k.size() - 5, 5, "/open") == 0;
    });
    if (opening) gate_.wait();
  }

 private:
  std::shared_future<void> gate_;
};

}  // namespace

TEST_CASE("dynamic: spares enter in the order they came, even when a later one is quicker",
          "[rdzv][dynamic][spare]") {
  // s1 stands by first, then s2. b dies: a re-joins and round 1 opens with one place left.
  // s1 is slow to wake; s2 is let in first but waits for s1, which takes the place. Expected:
  // round 1 is a and s1; s2 stands by again and ends with NotNeeded.
  Cluster c;
  auto o = Cluster::options(2, 2);
  o.last_call_timeout = 20s;  // no time-out decides here
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  ChangeLog log_a;
  a->watch(std::ref(log_a));
  std::promise<void> wake;
  auto slow = std::make_shared<SlowToOpenStore>(c.store, wake.get_future().share());
  auto s1 = std::make_unique<DynamicRendezvous>(o, slow, [slow] { return slow; });
  std::atomic<int> standing{0};
  s1->watch_spare([&](const SpareNotice& n) {
    if (n.kind == SpareNotice::Kind::kStandingBy) ++standing;
  });
  auto s1_join = join_async(*s1);
  const auto guard = std::chrono::steady_clock::now() + kGuard;
  while (standing == 0 && std::chrono::steady_clock::now() < guard) {
    std::this_thread::sleep_for(5ms);
  }
  auto s2 = c.node(o);
  s2->watch_spare([&](const SpareNotice& n) {
    if (n.kind == SpareNotice::Kind::kStandingBy) ++standing;
  });
  auto s2_join = join_async(*s2);
  while (standing < 2 && std::chrono::steady_clock::now() < guard) {
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(standing == 2);
  CHECK(c.store->get("/ddp_rdzv/job/spare/1") == "waiting");
  CHECK(c.store->get("/ddp_rdzv/job/spare/2") == "waiting");

  b.reset();  // dies: a re-joins
  REQUIRE(log_a.first() == MembershipChange::kNodeLost);
  auto ja = join_async(*a);
  // a is in round 1; s2 (awake) must not take the place while s1 still waits.
  while (c.store->add("/ddp_rdzv/job/r1/arrived", 0) < 1 &&
         std::chrono::steady_clock::now() < guard) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(ja.wait_for(300ms) == std::future_status::timeout);
  CHECK(s2_join.wait_for(1ms) == std::future_status::timeout);
  wake.set_value();  // s1 wakes and takes the place
  REQUIRE(ja.wait_for(kGuard) == std::future_status::ready);
  REQUIRE(s1_join.wait_for(kGuard) == std::future_status::ready);
  const std::vector<RendezvousInfo> round1{ja.get(), s1_join.get()};
  check_consistent(round1, {1, 1});
  CHECK(round1[0].round == 1);
  CHECK(c.store->get("/ddp_rdzv/job/spare/1") == "admitted");
  CHECK(c.store->get("/ddp_rdzv/job/spare/2") == "waiting");
  CHECK(s2_join.wait_for(100ms) == std::future_status::timeout);
  s1->shutdown();
  a->shutdown();
  REQUIRE_THROWS_AS(s2_join.get(), NotNeeded);
}

TEST_CASE("dynamic: a spare the job ends without leaves with NotNeeded, naming why",
          "[rdzv][dynamic][spare]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  auto a = c.store_host(o);
  auto b = c.node(o);
  join_all({a.get(), b.get()});
  auto spare = c.node(o);
  auto spare_join = join_async(*spare);
  CHECK(spare_join.wait_for(300ms) == std::future_status::timeout);
  b->shutdown();
  a->shutdown();  // the store host, last out: closes the rendezvous
  try {
    spare_join.get();
    FAIL("the spare was admitted into a job that had ended");
  } catch (const NotNeeded& e) {
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("the job finished without needing this node") &&
                   Catch::Contains("stood by as a spare"));
  }
}

TEST_CASE("dynamic: a spare lets the members re-join first: they keep their places",
          "[rdzv][dynamic][spare]") {
  // Round 1 opens because b re-joins (its workers failed); the spare is let in at once but
  // waits until a, the other member, re-joined too (a long last_call_timeout: no time-out
  // decides here). Expected: round 1 is a and b with their group ranks; the spare stands by
  // again, and leaves with NotNeeded when the job ends.
  Cluster c;
  auto o = Cluster::options(2, 2);
  o.last_call_timeout = 20s;
  auto a = c.node(o), b = c.node(o);
  const auto first = join_all({a.get(), b.get()});
  std::atomic<int> spare_notices{0};
  auto spare = c.node(o);
  spare->watch_spare([&](const SpareNotice&) { ++spare_notices; });
  auto spare_join = join_async(*spare);
  const auto guard = std::chrono::steady_clock::now() + kGuard;
  while (spare_notices == 0 && std::chrono::steady_clock::now() < guard) {
    std::this_thread::sleep_for(5ms);  // until it stands by
  }
  REQUIRE(spare_notices == 1);
  auto jb = join_async(*b);
  // b is in round 1 (its ticket taken) and a is still out: the spare must wait for a. Its
  // yield is bounded by the 20 s last call; a arriving now ends it.
  while (c.store->add("/ddp_rdzv/job/r1/arrived", 0) < 1 &&
         std::chrono::steady_clock::now() < guard) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(spare_join.wait_for(100ms) == std::future_status::timeout);
  auto ja = join_async(*a);
  // (Before the fix the spare took a's place here, and a stood by: this wait failed.)
  REQUIRE(ja.wait_for(kGuard) == std::future_status::ready);
  const std::vector<RendezvousInfo> round1{ja.get(), jb.get()};
  check_consistent(round1, {1, 1});
  CHECK(round1[0].round == 1);
  CHECK(round1[0].group_rank == first[0].group_rank);
  CHECK(round1[1].group_rank == first[1].group_rank);
  CHECK(spare_join.wait_for(100ms) == std::future_status::timeout);
  b->shutdown();
  a->shutdown();
  REQUIRE_THROWS_AS(spare_join.get(), NotNeeded);
}

TEST_CASE("dynamic: a member slower to re-join than the last call stands by as a spare itself",
          "[rdzv][dynamic][spare]") {
  // Round 1 opens because b re-joins (its workers failed); a does not re-join within the
  // last call (300 ms here), so the spare takes the place and the round closes full with b
  // and the spare. a then finds the group full: it is a spare now, and leaves as one
  // (NotNeeded) when the job ends.
  Cluster c;
  auto o = Cluster::options(2, 2);
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  auto spare = c.node(o);
  auto spare_join = join_async(*spare);
  CHECK(spare_join.wait_for(300ms) == std::future_status::timeout);
  auto jb = join_async(*b);
  const std::vector<RendezvousInfo> round1{jb.get(), spare_join.get()};
  check_consistent(round1, {1, 1});
  CHECK(round1[0].round == 1);
  auto ja = join_async(*a);
  CHECK(ja.wait_for(300ms) == std::future_status::timeout);
  b->shutdown();
  spare->shutdown();
  REQUIRE_THROWS_AS(ja.get(), NotNeeded);
}

TEST_CASE("dynamic: a spare that leaves while standing by leaves the job's rendezvous open",
          "[rdzv][dynamic][spare]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  auto spare = c.node(o);
  auto spare_join = join_async(*spare);
  CHECK(spare_join.wait_for(300ms) == std::future_status::timeout);
  spare->shutdown_after_failure();  // its agent got a signal
  REQUIRE_THROWS_WITH(spare_join.get(), Catch::Contains("left while it stood by as a spare"));
  CHECK_FALSE(c.store->check({"/ddp_rdzv/job/closed"}));
  // The members still re-form as before.
  ChangeLog log_b;
  b->watch(std::ref(log_b));
  auto ja = join_async(*a);
  REQUIRE(log_b.first() == MembershipChange::kNodeWaiting);
  auto jb = join_async(*b);
  check_consistent({ja.get(), jb.get()}, {1, 1});
}

TEST_CASE("dynamic: bad options are rejected naming the value", "[rdzv][dynamic]") {
  Cluster c;
  CHECK_THROWS_WITH(c.node(Cluster::options(3, 2)), Catch::Contains("3:2"));
  CHECK_THROWS_WITH(c.node(Cluster::options(0, 2)), Catch::Contains("0:2"));
  auto o = Cluster::options(1, 2);
  o.lease_timeout = 60ms;
  CHECK_THROWS_WITH(c.node(o), Catch::Contains("lease_timeout=60 ms"));
}

TEST_CASE("dynamic: shutdown from another thread ends a blocked next_rendezvous",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  o.join_timeout = 60s;
  auto a = c.node(o);
  auto joining = join_async(*a);
  // Wait until it has arrived, so shutdown hits it mid-round.
  c.store->wait({"/ddp_rdzv/job/r0/arrived"}, kGuard);
  a->shutdown();
  REQUIRE_THROWS_AS(joining.get(), ddp::RendezvousClosed);
}

TEST_CASE("dynamic: the store host's exit barrier waits for members, not for lost ones",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  o.hosts_store = true;
  o.exit_barrier_timeout = 60s;  // a wait for the lost node would hit the hang guard
  auto host = c.node(o);
  auto b = c.node(Cluster::options(2, 2));
  join_all({host.get(), b.get()});
  ChangeLog log;
  host->watch(std::ref(log));
  b.reset();  // lost: it will never shut down
  REQUIRE(log.first() == MembershipChange::kNodeLost);
  auto done = std::async(std::launch::async, [&] { host->shutdown(); });
  REQUIRE(done.wait_for(kGuard) == std::future_status::ready);
}

TEST_CASE("dynamic: a member that finished is not lost, the others run on, nobody re-forms",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  ChangeLog log_b;
  b->watch(std::ref(log_b));
  a->shutdown();  // a's workers all succeeded first; it leaves
  // Several leases pass without a beat from a: b must not call it lost.
  std::this_thread::sleep_for(o.lease_timeout * 4);
  CHECK(log_b.count() == 0);
  CHECK_FALSE(c.store->check({"/ddp_rdzv/job/closed"}));  // b still runs
  b->shutdown();
  CHECK(c.store->check({"/ddp_rdzv/job/closed"}));
}

TEST_CASE("dynamic: the store host finishing first serves until the others finish",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  auto host = c.store_host(o);
  auto b = c.node(o);
  join_all({host.get(), b.get()});
  ChangeLog log_b;
  b->watch(std::ref(log_b));
  auto host_done = std::async(std::launch::async, [&] { host->shutdown(); });
  CHECK(host_done.wait_for(o.lease_timeout * 4) == std::future_status::timeout);
  CHECK(log_b.count() == 0);
  b->shutdown();
  REQUIRE(host_done.wait_for(kGuard) == std::future_status::ready);
}

TEST_CASE("dynamic: a store host that finished still notices a member lost afterwards",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  auto host = c.store_host(o);
  auto b = c.node(o);
  const auto infos = join_all({host.get(), b.get()});
  auto host_done = std::async(std::launch::async, [&] { host->shutdown(); });
  b.reset();  // killed while the host waits: its beats stop and it never counts itself out
  REQUIRE(host_done.wait_for(kGuard) == std::future_status::ready);
  const ExitBarrier departed{*c.store, "/ddp_rdzv/job/r0/departed", 2};
  CHECK(departed.out_reason(infos[1].group_rank) == "lost");
}

TEST_CASE("dynamic: the exit barrier wait ends at once on interrupt()", "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 2);
  auto host = c.store_host(o);
  auto b = c.node(o);
  join_all({host.get(), b.get()});
  auto host_done = std::async(std::launch::async, [&] { host->shutdown(); });
  CHECK(host_done.wait_for(200ms) == std::future_status::timeout);
  host->interrupt();
  REQUIRE(host_done.wait_for(kGuard) == std::future_status::ready);
}

TEST_CASE("dynamic: a late node does not make a finishing group re-form", "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 3);
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  ChangeLog log_b;
  b->watch(std::ref(log_b));
  a->shutdown();  // finished
  auto late_options = o;
  late_options.join_timeout = 60s;
  auto late = c.node(late_options);
  auto late_join = join_async(*late);
  CHECK(late_join.wait_for(o.lease_timeout * 3) == std::future_status::timeout);
  CHECK(log_b.count() == 0);
  b->shutdown();  // the job is over: the late node is told so
  REQUIRE_THROWS_AS(late_join.get(), ddp::RendezvousClosed);
}

TEST_CASE("dynamic: false membership claims in the store are refuted, the group runs on",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 3);
  // Slower beats and a longer lease than the other cases: a loaded machine must not make a
  // live node look silent here, where the point is telling live nodes from false claims.
  o.heartbeat_interval = 200ms;
  o.lease_timeout = 3s;
  auto a = c.node(o), b = c.node(o);
  join_all({a.get(), b.get()});
  ChangeLog log_a, log_b;
  a->watch(std::ref(log_a));
  b->watch(std::ref(log_b));
  // A stranger with store access writes each kind of claim into the next free slot.
  const std::vector<std::pair<std::string, std::string>> claims{
      {"/ddp_rdzv/job/r0/changed", "lost 1"},      // b is alive and beating
      {"/ddp_rdzv/job/r0/changed/2", "waiting"},   // nobody arrived after the close
      {"/ddp_rdzv/job/r0/changed/3", "rejoin"},    // nobody opened round 1
      {"/ddp_rdzv/job/r0/changed/4", "restart!"},  // not a claim at all
  };
  for (const auto& [key, value] : claims) {
    c.store->set(key, value);
    // The members refute it (the first one to check marks it) before the next one comes.
    const auto deadline = std::chrono::steady_clock::now() + kGuard;
    while (c.store->get(key) == value && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    CHECK(c.store->get(key) == "refuted " + value);
  }
  CHECK(log_a.count() == 0);
  CHECK(log_b.count() == 0);
  // A real change after them is still seen: a third node joins. (A member still checking
  // the first claim when the other leaves to re-form may see that one stop beating and
  // report it lost instead: it re-forms all the same.)
  auto d = c.node(o);
  auto jd = join_async(*d);
  REQUIRE(log_a.first().has_value());
  REQUIRE(log_b.first().has_value());
  const auto infos = join_all({a.get(), b.get()});
  check_consistent({infos[0], infos[1], jd.get()}, {1, 1, 1});
}

TEST_CASE("dynamic: a node whose store connection drops is lost at once, not after its lease",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 3);
  // A lease and a last call far longer than the guard: only the dropped connection can make
  // the survivors re-form in time, and only the expected count can close their round.
  o.lease_timeout = 60s;
  o.heartbeat_interval = 1s;
  o.last_call_timeout = 60s;
  auto a = c.node(o), b = c.node(o), d = c.node(o);
  const int lost_rank = join_all({a.get(), b.get(), d.get()})[2].group_rank;
  ChangeLog log_a, log_b;
  a->watch(std::ref(log_a));
  b->watch(std::ref(log_b));
  // The agent of d is SIGKILLed: its connection closes and the store runs its records.
  REQUIRE(c.store->sever_presence_holding("/ddp_rdzv/job/r0/alive/" + std::to_string(lost_rank)));
  d.reset();
  REQUIRE(log_a.first() == MembershipChange::kNodeLost);
  REQUIRE(log_b.first() == MembershipChange::kNodeLost);
  CHECK_THAT(a->last_change().text, Catch::Contains("is gone (its store connection closed)"));
  const auto infos = join_all({a.get(), b.get()});
  check_consistent(infos, {1, 1});
  CHECK(infos[0].group_world_size == 2);
  CHECK(infos[0].round == 1);
}

TEST_CASE("dynamic: without heartbeats (a lease store) only an ended presence loses a node",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(2, 3);
  o.heartbeats = false;  // the etcd backend: each agent's lease is its liveness
  o.last_call_timeout = 60s;
  auto a = c.node(o), b = c.node(o), d = c.node(o);
  const int lost_rank = join_all({a.get(), b.get(), d.get()})[2].group_rank;
  ChangeLog log_a, log_b;
  a->watch(std::ref(log_a));
  b->watch(std::ref(log_b));
  // Many lease_timeouts pass without a single heartbeat key: nobody is taken for lost.
  std::this_thread::sleep_for(o.lease_timeout * 4);
  CHECK(log_a.count() == 0);
  CHECK(log_b.count() == 0);
  CHECK_FALSE(c.store->check({"/ddp_rdzv/job/r0/hb/0/latest"}));
  // d's lease expires (its agent died): the store runs its records.
  REQUIRE(c.store->sever_presence_holding("/ddp_rdzv/job/r0/alive/" + std::to_string(lost_rank)));
  d.reset();
  REQUIRE(log_a.first() == MembershipChange::kNodeLost);
  REQUIRE(log_b.first() == MembershipChange::kNodeLost);
  CHECK_THAT(a->last_change().text, Catch::Contains("is gone (its lease expired)"));
  check_consistent(join_all({a.get(), b.get()}), {1, 1});
}

namespace {

// Records what the rendezvous asked of the workers' store host.
class FakeWorkerStore final : public ddp::rendezvous::WorkerStoreHost {
 public:
  explicit FakeWorkerStore(uint16_t port) : port_(port) {}
  ddp::rendezvous::Endpoint host() override {
    ++hosted;
    return {"10.0.0.7", port_};
  }
  void use(const ddp::rendezvous::Endpoint& endpoint) override {
    used = ddp::rendezvous::format_endpoint(endpoint);
  }
  std::atomic<int> hosted{0};
  std::string used;

 private:
  uint16_t port_;
};

}  // namespace

TEST_CASE("dynamic: group rank 0 hosts the workers' store and every node gets its address",
          "[rdzv][dynamic]") {
  Cluster c;
  std::vector<std::shared_ptr<FakeWorkerStore>> fakes;
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  for (uint16_t i = 0; i < 3; ++i) {
    auto o = Cluster::options(3, 3);
    fakes.push_back(std::make_shared<FakeWorkerStore>(static_cast<uint16_t>(5000 + i)));
    o.worker_store = fakes.back();
    nodes.push_back(c.node(o));
  }
  const auto infos = join_all({nodes[0].get(), nodes[1].get(), nodes[2].get()});
  int host = -1;
  for (int i = 0; i < 3; ++i) {
    if (infos[i].group_rank == 0) host = i;
  }
  REQUIRE(host >= 0);
  const std::string expected = "10.0.0.7:" + std::to_string(5000 + host);
  for (int i = 0; i < 3; ++i) {
    INFO("node " << i);
    CHECK(fakes[i]->hosted == (i == host ? 1 : 0));
    CHECK(fakes[i]->used == expected);
    CHECK(infos[i].master_addr == "10.0.0.7");
    CHECK(infos[i].master_port == 5000 + host);
  }
}

TEST_CASE("dynamic: without heartbeats a member that never bound its presence is lost",
          "[rdzv][dynamic]") {
  // A node that died between its arrival and the end of the round holds no lease in it: the
  // ring's monitor finds it unbound after twice the lease and the others re-form. It may only
  // have been stopped, so the re-formed round expects it back until its last call ends: 1 s
  // (as long as the three joining nodes have to all arrive in the first round).
  Cluster c;
  auto o = Cluster::options(2, 3);
  o.heartbeats = false;
  o.last_call_timeout = 1s;
  auto dead = o;
  dead.watch_membership = false;  // closes the round with the others, never binds
  auto a = c.node(o), b = c.node(o), d = c.node(dead);
  const int lost_rank = join_all({a.get(), b.get(), d.get()})[2].group_rank;
  ChangeLog log_a, log_b;
  a->watch(std::ref(log_a));
  b->watch(std::ref(log_b));
  REQUIRE(log_a.first() == MembershipChange::kNodeLost);
  REQUIRE(log_b.first() == MembershipChange::kNodeLost);
  CHECK_THAT(
      a->last_change().text + b->last_change().text,
      Catch::Contains("group rank " + std::to_string(lost_rank) + " never bound its presence"));
  d.reset();
  check_consistent(join_all({a.get(), b.get()}), {1, 1});
}

namespace {

// The first host() of the job fails, as an agent dying between the close and its store.
class FailingFirstHost final : public ddp::rendezvous::WorkerStoreHost {
 public:
  FailingFirstHost(std::shared_ptr<std::atomic<bool>> failed, uint16_t port)
      : failed_(std::move(failed)), port_(port) {}
  ddp::rendezvous::Endpoint host() override {
    if (!failed_->exchange(true)) throw ddp::StoreError("this agent died before serving");
    return {"10.0.0.9", port_};
  }
  void use(const ddp::rendezvous::Endpoint& /*endpoint*/) override {}

 private:
  std::shared_ptr<std::atomic<bool>> failed_;
  uint16_t port_;
};

}  // namespace

TEST_CASE("dynamic: group rank 0 gone before publishing the workers' store, the rest re-form",
          "[rdzv][dynamic]") {
  Cluster c;
  auto failed = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  for (uint16_t i = 0; i < 3; ++i) {
    auto o = Cluster::options(2, 3);
    o.close_timeout = 1s;
    o.worker_store = std::make_shared<FailingFirstHost>(failed, static_cast<uint16_t>(6000 + i));
    nodes.push_back(c.node(o));
  }
  std::vector<std::future<RendezvousInfo>> joins;
  for (auto& n : nodes) joins.push_back(join_async(*n));
  std::vector<RendezvousInfo> survivors;
  int threw = 0;
  for (auto& j : joins) {
    REQUIRE(j.wait_for(kGuard) == std::future_status::ready);
    try {
      survivors.push_back(j.get());
    } catch (const ddp::StoreError&) {
      ++threw;
    }
  }
  CHECK(threw == 1);
  REQUIRE(survivors.size() == 2);
  for (const auto& info : survivors) {
    CHECK(info.round == 1);
    CHECK(info.group_world_size == 2);
    CHECK(info.master_addr == "10.0.0.9");
  }
  CHECK(survivors[0].master_port == survivors[1].master_port);
}

namespace {

// A node's connection while its agent is paused (SIGSTOP, a frozen VM): every call waits
// until the test resumes it. Its presence stays bound, so the others find it silent ("lost",
// maybe back) rather than gone.
class PausableStore final : public ForwardingStore {
 public:
  explicit PausableStore(std::shared_ptr<Store> base) : ForwardingStore(std::move(base)) {}
  void pause() { set_paused(true); }
  void resume() { set_paused(false); }

  void set(const std::string& k, const std::string& v) override {
    gate();
    ForwardingStore::set(k, v);
  }
  std::string get(const std::string& k) override {
    gate();
    return ForwardingStore::get(k);
  }
  int64_t add(const std::string& k, int64_t d) override {
    gate();
    return ForwardingStore::add(k, d);
  }
  std::string compare_set(const std::string& k, const std::string& e,
                          const std::string& d) override {
    gate();
    return ForwardingStore::compare_set(k, e, d);
  }
  bool check(const std::vector<std::string>& k) override {
    gate();
    return ForwardingStore::check(k);
  }
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    gate();
    ForwardingStore::wait(keys, timeout);
  }
  bool delete_key(const std::string& k) override {
    gate();
    return ForwardingStore::delete_key(k);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& k) override {
    gate();
    return ForwardingStore::multi_get(k);
  }
  void multi_set(const std::vector<std::string>& k, const std::vector<std::string>& v) override {
    gate();
    ForwardingStore::multi_set(k, v);
  }
  int64_t take_ticket(const std::string& k) override {
    gate();
    return ForwardingStore::take_ticket(k);
  }
  int64_t tickets(const std::string& k) override {
    gate();
    return ForwardingStore::tickets(k);
  }

 private:
  void set_paused(bool paused) {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
    cv_.notify_all();
  }
  void gate() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !paused_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool paused_ = false;
};

// Three nodes in round 0 (MAX: it closes at once), the third on a connection the test pauses.
struct PausedMember {
  explicit PausedMember(Cluster& c, const DynamicRendezvousOptions& o)
      : paused(std::make_shared<PausableStore>(c.store)),
        a(c.node(o)),
        b(c.node(o)),
        d(std::make_unique<DynamicRendezvous>(o, paused, [s = paused] { return s; })) {
    join_all({a.get(), b.get(), d.get()});
  }
  ~PausedMember() { paused->resume(); }  // its threads must not stay blocked at destruction
  PausedMember(const PausedMember&) = delete;
  PausedMember& operator=(const PausedMember&) = delete;

  // Pauses d's connection and waits until a and b both report it lost.
  void pause_until_lost() {
    a->watch(std::ref(lost_a));
    b->watch(std::ref(lost_b));
    paused->pause();
    REQUIRE(lost_a.first() == MembershipChange::kNodeLost);
    REQUIRE(lost_b.first() == MembershipChange::kNodeLost);
  }

  ChangeLog lost_a, lost_b;  // before the nodes: their watchers report here until destroyed
  std::shared_ptr<PausableStore> paused;
  std::unique_ptr<DynamicRendezvous> a, b, d;
};

// Waits (up to kGuard) until n members of the previous round arrived in round as members.
bool members_back(Cluster& c, int round, int64_t n) {
  const std::string key = "/ddp_rdzv/job/r" + std::to_string(round) + "/rejoined";
  const auto until = std::chrono::steady_clock::now() + kGuard;
  while (c.store->add(key, 0) < n && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
  }
  return c.store->add(key, 0) == n;
}

}  // namespace

TEST_CASE("dynamic: in place, the survivors re-form without a member found silent at once",
          "[rdzv][dynamic]") {
  // --in_place_recovery: a member found silent (paused longer than the lease) is not waited
  // for; the survivors' round closes as soon as both are back, not after the last call,
  // which is longer than the guard here. Once the member runs again it finds itself counted
  // out and re-joins: the others re-form with it.
  Cluster c;
  auto o = Cluster::options(1, 3);
  o.last_call_timeout = 60s;
  o.wait_for_lost = false;
  PausedMember m(c, o);
  ChangeLog log_d;
  m.d->watch(std::ref(log_d));
  m.pause_until_lost();
  CHECK_THAT(m.a->last_change().text + m.b->last_change().text,
             Catch::Contains("stopped heartbeating"));
  auto ja = join_async(*m.a), jb = join_async(*m.b);
  REQUIRE(ja.wait_for(kGuard) == std::future_status::ready);
  REQUIRE(jb.wait_for(kGuard) == std::future_status::ready);
  const std::vector<RendezvousInfo> survivors{ja.get(), jb.get()};
  check_consistent(survivors, {1, 1});
  CHECK(survivors[0].round == 1);

  ChangeLog log_a1, log_b1;
  m.a->watch(std::ref(log_a1));
  m.b->watch(std::ref(log_b1));
  m.paused->resume();
  REQUIRE(log_d.first() == MembershipChange::kNodeLost);  // itself, counted out
  auto jd = join_async(*m.d);
  REQUIRE(log_a1.first() == MembershipChange::kNodeWaiting);
  REQUIRE(log_b1.first() == MembershipChange::kNodeWaiting);
  auto ja2 = join_async(*m.a), jb2 = join_async(*m.b);
  REQUIRE(jd.wait_for(kGuard) == std::future_status::ready);
  const std::vector<RendezvousInfo> all{ja2.get(), jb2.get(), jd.get()};
  check_consistent(all, {1, 1, 1});
  CHECK(all[0].round == 2);
}

TEST_CASE("dynamic: by default a re-formed round waits out the last call for a member found silent",
          "[rdzv][dynamic]") {
  Cluster c;
  auto o = Cluster::options(1, 3);
  o.last_call_timeout = 60s;
  PausedMember m(c, o);
  m.pause_until_lost();
  auto ja = join_async(*m.a), jb = join_async(*m.b);
  // Both are back and the lost member is counted out, yet the round stays open for it.
  REQUIRE(members_back(c, 1, 2));
  CHECK(ja.wait_for(1s) == std::future_status::timeout);
  CHECK_FALSE(c.store->check({"/ddp_rdzv/job/r1/closed"}));
  m.a->shutdown();
  m.b->shutdown();
  CHECK_THROWS_AS(ja.get(), ddp::RendezvousClosed);
  CHECK_THROWS_AS(jb.get(), ddp::RendezvousClosed);
}

TEST_CASE("dynamic: in place, a member counted out as lost after the survivors arrived closes it",
          "[rdzv][dynamic]") {
  // The one who finds a member silent reports before it counts it out, so every survivor
  // may be in before the count: the last call's re-check closes the round then, not its end.
  Cluster c;
  auto o = Cluster::options(1, 3);
  o.last_call_timeout = 60s;
  o.wait_for_lost = false;
  // Only the test counts d out: a lease no loaded machine makes it miss while it beats.
  o.lease_timeout = 10s;
  auto a = c.node(o), b = c.node(o), d = c.node(o);
  const int d_rank = join_all({a.get(), b.get(), d.get()})[2].group_rank;
  auto ja = join_async(*a), jb = join_async(*b);
  REQUIRE(members_back(c, 1, 2));
  CHECK(ja.wait_for(500ms) == std::future_status::timeout);  // d is still expected
  PrefixStore job("/ddp_rdzv/job", c.store);
  const ExitBarrier departed{job, rdzv_keys::departed(0), 3};
  INFO("d (group rank " << d_rank << ") out before: '" << departed.out_reason(d_rank) << "'");
  REQUIRE(departed.count_out(d_rank, "lost"));
  REQUIRE(ja.wait_for(kGuard) == std::future_status::ready);
  REQUIRE(jb.wait_for(kGuard) == std::future_status::ready);
  const std::vector<RendezvousInfo> survivors{ja.get(), jb.get()};
  check_consistent(survivors, {1, 1});
  CHECK(survivors[0].round == 1);
  d->shutdown();
}
