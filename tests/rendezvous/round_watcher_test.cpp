// RoundWatcher on its own, on a MemoryStore whose connections tell the test of every write
// (so it waits on the store and on the change callback, not on time): heartbeats, the ring's
// monitor finding a silent node lost after its lease and moving past one that left, claims
// checked and refuted or acted on, a stalled pass not held against the watched node, the
// lease-store mode (no heartbeats: presence), stop_beating, a store that fails, stop().
#include "rendezvous/round_watcher.hpp"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/exit_barrier.hpp"
#include "rendezvous/membership_claims.hpp"
#include "rendezvous/round_keys.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/memory_store.hpp"

using namespace ddp::rendezvous;
namespace keys = ddp::rendezvous::rdzv_keys;
using Catch::Matchers::Contains;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// Guard against hangs only.
constexpr auto kGuard = 20s;

class Ring;

// One connection of a watcher to the ring's store: every write wakes the test's waits; a
// hook runs before each WAIT; once cut, every call fails as a reset connection does.
class Connection final : public ForwardingStore {
 public:
  Connection(std::shared_ptr<Store> base, Ring& ring)
      : ForwardingStore(std::move(base)), ring_(ring) {}

  void set(const std::string& key, const std::string& value) override {
    check_cut();
    ForwardingStore::set(key, value);
    wrote();
  }
  int64_t add(const std::string& key, int64_t delta) override {
    check_cut();
    const auto value = ForwardingStore::add(key, delta);
    wrote();
    return value;
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    check_cut();
    auto value = ForwardingStore::compare_set(key, expected, desired);
    wrote();
    return value;
  }
  bool delete_key(const std::string& key) override {
    check_cut();
    const bool deleted = ForwardingStore::delete_key(key);
    wrote();
    return deleted;
  }
  void multi_set(const std::vector<std::string>& keys,
                 const std::vector<std::string>& values) override {
    check_cut();
    writing(keys);
    ForwardingStore::multi_set(keys, values);
    wrote();
  }
  std::string get(const std::string& key) override {
    check_cut();
    return ForwardingStore::get(key);
  }
  bool check(const std::vector<std::string>& keys) override {
    check_cut();
    return ForwardingStore::check(keys);
  }
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    check_cut();
    if (before_wait) before_wait(keys);
    ForwardingStore::wait(keys, timeout);
  }

  std::function<void(const std::vector<std::string>&)> before_wait;
  std::atomic<bool> cut{false};
  std::atomic<int> refused{0};  // calls failed since the cut

 private:
  void check_cut() {
    if (!cut) return;
    ++refused;
    wrote();  // wakes the test's waits
    throw ddp::StoreError("store 127.0.0.1:29400: connection reset by peer", ddp::PeerLoss::kDeath);
  }
  void writing(const std::vector<std::string>& keys);
  void wrote();
  Ring& ring_;
};

// The store of one round (round 0) shared by the watchers of its nodes, what each watcher
// reported, and the log.
class Ring {
 public:
  struct Change {
    int watcher = 0;  // the group rank whose watcher reported it
    MembershipChange change = MembershipChange::kNodeLost;
    ChangeReason reason;
    Clock::time_point at;
  };

  // A watcher for group rank `rank` of `size` nodes, on connections of its own.
  std::unique_ptr<RoundWatcher> watcher(int rank, int size, RoundWatcherOptions o = {}) {
    o.round = 0;
    o.group_rank = rank;
    o.group_world_size = size;
    return std::make_unique<RoundWatcher>(
        o, connect(), connect(), [this, rank](MembershipChange change, const ChangeReason& why) {
          std::lock_guard<std::mutex> lock(mu_);
          changes_.push_back(Change{rank, change, why, Clock::now()});
          cv_.notify_all();
        });
  }
  std::shared_ptr<Connection> connect() { return std::make_shared<Connection>(memory, *this); }

  // Waits until pred holds (it runs under the ring's lock: it may read memory, not wait).
  bool await(const std::function<bool()>& pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kGuard, pred);
  }
  // Waits for the first change reported.
  std::optional<Change> first_change() {
    if (!await([&] { return !changes_.empty(); })) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    return changes_.front();
  }
  [[nodiscard]] size_t change_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return changes_.size();
  }
  void notify() {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  // A watcher is about to write keys (heartbeats: multi_set).
  void writing(const std::vector<std::string>& keys) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& key : keys) write_began_[key] = Clock::now();
  }
  // When a watcher last began writing key.
  Clock::time_point write_began(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    return write_began_.at(key);
  }

  // The latest heartbeat tick group rank g wrote (-1: none).
  int64_t latest_tick(int g) {
    const auto text = read_if_present(*memory, keys::heartbeat_latest(0, g));
    return text ? std::stoll(*text) : -1;
  }
  // Waits until group rank g wrote tick `tick`.
  bool await_tick(int g, int64_t tick) {
    return await([&] { return latest_tick(g) >= tick; });
  }
  // Group rank g's heartbeat tick, written by the test (a node without a watcher).
  void beat(int g, uint64_t tick) {
    memory->multi_set({keys::heartbeat(0, g, tick), keys::heartbeat_latest(0, g)},
                      {"", std::to_string(tick)});
  }
  // Waits until slot's claim was refuted.
  bool await_refuted(int slot) {
    return await([&] {
      const auto value = read_if_present(*memory, keys::changed(0, slot));
      return value && value->starts_with(kRefutedPrefix);
    });
  }
  [[nodiscard]] ExitBarrier departed(int size) const {
    return ExitBarrier{*memory, keys::departed(0), size};
  }
  // Waits until a log line says text.
  bool await_logged(const std::string& text) {
    return await([&] {
      return std::any_of(lines_.begin(), lines_.end(), [&](const std::string& line) {
        return line.find(text) != std::string::npos;
      });
    });
  }

  std::shared_ptr<MemoryStore> memory = std::make_shared<MemoryStore>(10s);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Change> changes_;
  std::map<std::string, Clock::time_point> write_began_;
  std::vector<std::string> lines_;
  ddp::log::ScopedSink sink_{[this](ddp::log::Level, std::string_view line) {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.emplace_back(line);
  }};
};

void Connection::writing(const std::vector<std::string>& keys) {
  ring_.writing(keys);
}

void Connection::wrote() {
  ring_.notify();
}

// A node that only beats: group rank g's ticks every interval, from a thread of the test's.
class Beater {
 public:
  Beater(Ring& ring, int g, std::chrono::milliseconds interval)
      : thread_([this, &ring, g, interval] {
          for (uint64_t tick = 0; !stop_; ++tick) {
            ring.beat(g, tick);
            std::this_thread::sleep_for(interval);
          }
        }) {}
  ~Beater() {
    stop_ = true;
    thread_.join();
  }
  Beater(const Beater&) = delete;
  Beater& operator=(const Beater&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

RoundWatcherOptions with_lease(std::chrono::milliseconds lease) {
  RoundWatcherOptions o;
  o.heartbeat_interval = 50ms;
  o.lease_timeout = lease;
  return o;
}

}  // namespace

TEST_CASE("round watcher: the lease outlasts the tolerance, a beat and a link coming back",
          "[round_watcher]") {
  CHECK(lease_for(15s, 1s) == 18500ms);
  CHECK(lease_for(2s, 200ms) == 4700ms);
}

TEST_CASE("round watcher: a member beats once per interval, keeping only its last ticks",
          "[round_watcher]") {
  Ring ring;
  const auto began = Clock::now();
  auto alone = ring.watcher(0, 1, with_lease(1s));
  REQUIRE(ring.await_tick(0, 5));
  CHECK(Clock::now() - began >= 5 * 50ms);
  CHECK_FALSE(ring.memory->check({keys::heartbeat(0, 0, 0)}));
  CHECK_FALSE(ring.memory->check({keys::heartbeat(0, 0, 1)}));
  alone->stop();
  CHECK(ring.change_count() == 0);
}

TEST_CASE(
    "round watcher: a beating peer is never lost, once silent for the lease it is, "
    "counted out and claimed lost",
    "[round_watcher]") {
  Ring ring;
  auto peer = ring.watcher(1, 2, with_lease(300ms));
  auto watcher = ring.watcher(0, 2, with_lease(300ms));
  // Two leases of beats: nobody is taken for lost.
  REQUIRE(ring.await_tick(1, 13));
  CHECK(ring.change_count() == 0);
  peer->stop();
  const auto last_beat = ring.write_began(keys::heartbeat_latest(0, 1));
  const auto change = ring.first_change();
  REQUIRE(change);
  CHECK(change->watcher == 0);
  CHECK(change->change == MembershipChange::kNodeLost);
  CHECK(change->reason.text == "node with group rank 1 stopped heartbeating (round 0)");
  CHECK(change->reason.loss == ddp::PeerLoss::kUnknown);
  CHECK(change->at - last_beat >= 300ms);
  // Posted for the others, and counted out of the round (maybe only stopped: not for good).
  REQUIRE(ring.await([&] { return ring.departed(2).out_reason(1) == "lost"; }));
  CHECK(ring.memory->get(keys::changed(0)) == "lost 1");
  CHECK(ring.departed(2).gone() == 0);
  watcher->stop();
  CHECK(ring.change_count() == 1);
}

TEST_CASE("round watcher: a peer that left the round is not lost, the ring watches the next",
          "[round_watcher]") {
  Ring ring;
  auto watcher = ring.watcher(0, 3, with_lease(300ms));
  auto finished = ring.watcher(1, 3, with_lease(300ms));
  auto third = ring.watcher(2, 3, with_lease(300ms));
  REQUIRE(ring.await_tick(1, 2));
  // Group rank 1's workers finished: it counts itself out and goes.
  ring.departed(3).count_out(1, "finished");
  finished->stop();
  REQUIRE(ring.await_tick(2, ring.latest_tick(2) + 13));  // two leases later
  CHECK(ring.change_count() == 0);
  third->stop();
  const auto change = ring.first_change();
  REQUIRE(change);
  CHECK(change->watcher == 0);
  CHECK(change->reason.text == "node with group rank 2 stopped heartbeating (round 0)");
}

TEST_CASE(
    "round watcher: claims are checked against the store, false ones are refuted and "
    "the next slot listened to, a true one ends the round",
    "[round_watcher]") {
  Ring ring;
  Beater peer(ring, 1, 20ms);  // group rank 1 beats, and checks no claims
  auto watcher = ring.watcher(0, 2, with_lease(10s));
  REQUIRE(ring.await_tick(0, 1));
  // The round closed with 2 members, 2 arrivals.
  ring.memory->set(keys::closed(0), "2 0");
  ring.memory->add(keys::arrived(0), 2);
  struct False {
    const char* claim;
    const char* why;  // what the watcher of group rank 0 says
  };
  const std::vector<False> claims = {
      {"lost 1", "group rank 1 is still heartbeating"},
      {"lost 5", "the round has no group rank 5"},
      {"lost 0", "this node is group rank 0 and is running"},
      {"waiting", "no node arrived after the round closed (2 arrivals, 2 members)"},
      {"rejoin", "no member opened round 1"},
      {"bogus", "expected 'waiting', 'rejoin' or 'lost <group rank>'"},
  };
  int slot = 0;
  for (const auto& claim : claims) {
    INFO(claim.claim);
    REQUIRE(post_change(*ring.memory, 0, claim.claim) == ++slot);
    REQUIRE(ring.await_refuted(slot));
    CHECK(ring.memory->get(keys::changed(0, slot)) == kRefutedPrefix + claim.claim);
    CHECK(ring.await_logged("rendezvous round 0: ignoring the membership claim '" +
                            std::string(claim.claim) + "': " + claim.why));
  }
  CHECK(ring.change_count() == 0);
  // A node did arrive after the round closed: the claim holds.
  ring.memory->add(keys::arrived(0), 1);
  REQUIRE(post_change(*ring.memory, 0, "waiting") == ++slot);
  const auto change = ring.first_change();
  REQUIRE(change);
  CHECK(change->change == MembershipChange::kNodeWaiting);
  CHECK(change->reason.text == "a new node is waiting to join (round 0)");
}

TEST_CASE("round watcher: a member re-joining, or a node arriving once a member finished",
          "[round_watcher]") {
  Ring ring;
  auto watcher = ring.watcher(0, 2, with_lease(10s));
  ring.beat(1, 0);
  SECTION("re-joining: only once it opened the next round") {
    REQUIRE(post_change(*ring.memory, 0, "rejoin") == 1);
    REQUIRE(ring.await_refuted(1));
    ring.memory->set(keys::opened(1), "1");
    REQUIRE(post_change(*ring.memory, 0, "rejoin") == 2);
    const auto change = ring.first_change();
    REQUIRE(change);
    CHECK(change->change == MembershipChange::kNodeWaiting);
    CHECK(change->reason.text == "a member node is re-joining (round 0)");
  }
  SECTION("a late node when a member already finished is refused") {
    ring.memory->set(keys::closed(0), "2 0");
    ring.memory->add(keys::arrived(0), 3);
    ring.memory->set(keys::finished(0), "1");
    REQUIRE(post_change(*ring.memory, 0, "waiting") == 1);
    REQUIRE(ring.await_refuted(1));
    CHECK(ring.await_logged("a member already finished, so the round admits nobody new"));
    watcher->stop();
    CHECK(ring.change_count() == 0);
  }
}

TEST_CASE(
    "round watcher: a claim that a node whose connection closed is lost holds at once, "
    "for good",
    "[round_watcher]") {
  Ring ring;
  auto watcher = ring.watcher(0, 2, with_lease(10s));
  // Group rank 1 bound its presence to the round, then its connection dropped.
  auto presence = ring.memory->open_presence();
  presence->set_ephemeral(keys::alive(0, 1), "node1");
  ring.memory->set(keys::bound(0, 1), "node1");
  ring.beat(1, 0);
  REQUIRE(ring.memory->sever_presence_holding(keys::alive(0, 1)));
  REQUIRE(post_change(*ring.memory, 0, "lost 1") == 1);
  const auto change = ring.first_change();
  REQUIRE(change);
  CHECK(change->change == MembershipChange::kNodeLost);
  CHECK(change->reason.text ==
        "node with group rank 1 is gone (its store connection closed) (round 0)");
  // Gone for good: the re-formed round does not wait for it.
  CHECK(ring.departed(2).out_reason(1) == "disconnected");
  CHECK(ring.departed(2).gone() == 1);
}

TEST_CASE("round watcher: a stalled pass of its own is not held against the watched node",
          "[round_watcher]") {
  Ring ring;
  ring.beat(1, 0);  // the watched node, beaten by the test
  std::mutex mu;
  std::condition_variable cv;
  int waits = 0;  // the monitor's waits for the watched node's beats
  auto monitor = ring.connect();
  monitor->before_wait = [&](const std::vector<std::string>& waited) {
    if (waited.front().find("/hb/1/") == std::string::npos) return;
    int n = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      n = ++waits;
      cv.notify_all();
    }
    // Its second pass: the store (or this process) does not answer for longer than the lease
    // and the slack, and the watched node's beats do not get through either.
    if (n == 2) std::this_thread::sleep_for(1300ms);
  };
  auto o = with_lease(600ms);
  o.round = 0;
  o.group_rank = 0;
  o.group_world_size = 2;
  RoundWatcher watcher(o, ring.connect(), monitor, [&](MembershipChange, const ChangeReason&) {
    std::lock_guard<std::mutex> lock(mu);
    waits = -1000;  // lost: no more passes to wait for
    cv.notify_all();
  });
  const auto await_waits = [&](int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kGuard, [&] { return waits >= n || waits < 0; });
  };
  // The pass after the stall was judged: the watched node beats again, within the lease.
  REQUIRE(await_waits(3));
  ring.beat(1, 1);
  REQUIRE(await_waits(6));
  CHECK(waits >= 6);  // not found lost
  CHECK(ring.await_logged("rendezvous round 0: this node or the store was unresponsive for"));
  CHECK(ring.await_logged("(paused, or a network blip); not held against group rank 1"));
  watcher.stop();
}

TEST_CASE("round watcher: without heartbeats a member whose presence ended is lost",
          "[round_watcher]") {
  Ring ring;
  RoundWatcherOptions o = with_lease(200ms);
  o.heartbeats = false;
  auto presence = ring.memory->open_presence();
  presence->set_ephemeral(keys::alive(0, 1), "node1");
  ring.memory->set(keys::bound(0, 1), "node1");
  auto watcher = ring.watcher(0, 2, o);
  REQUIRE(ring.memory->sever_presence_holding(keys::alive(0, 1)));  // its lease expired
  const auto change = ring.first_change();
  REQUIRE(change);
  CHECK(change->change == MembershipChange::kNodeLost);
  CHECK(change->reason.text == "node with group rank 1 is gone (its lease expired) (round 0)");
  REQUIRE(ring.await([&] { return ring.departed(2).out_reason(1) == "disconnected"; }));
  CHECK(ring.memory->get(keys::changed(0)) == "lost 1");
  // A lease store is the liveness: no heartbeat key was ever written.
  CHECK_FALSE(ring.memory->check({keys::heartbeat_latest(0, 0)}));
}

TEST_CASE(
    "round watcher: without heartbeats a member that never bound its presence is lost "
    "after twice the lease",
    "[round_watcher]") {
  Ring ring;
  RoundWatcherOptions o = with_lease(200ms);
  o.heartbeats = false;
  const auto began = Clock::now();
  auto watcher = ring.watcher(0, 2, o);
  const auto change = ring.first_change();
  REQUIRE(change);
  CHECK(change->at - began >= 400ms);
  CHECK(change->reason.text ==
        "node with group rank 1 never bound its presence (it died before the round started) "
        "(round 0)");
  // Maybe only stopped before it bound one: still expected back in the re-formed round.
  REQUIRE(ring.await([&] { return ring.departed(2).out_reason(1) == "lost"; }));
  CHECK(ring.departed(2).gone() == 0);
}

TEST_CASE("round watcher: a node that stopped beating still watches the others",
          "[round_watcher]") {
  Ring ring;
  auto host = ring.watcher(0, 2, with_lease(300ms));
  auto peer = ring.watcher(1, 2, with_lease(300ms));
  REQUIRE(ring.await_tick(0, 1));
  // Group rank 0's workers finished: it counts itself out and stops beating, but waits for
  // the others (the store host's exit barrier).
  ring.departed(2).count_out(0, "finished");
  host->stop_beating();
  const int64_t stopped_at = ring.latest_tick(0);
  REQUIRE(ring.await_tick(1, ring.latest_tick(1) + 13));  // two leases of the peer's beats
  CHECK(ring.latest_tick(0) <= stopped_at + 1);           // one beat may have been on its way
  CHECK(ring.change_count() == 0);                        // the peer did not take it for lost
  peer->stop();
  const auto change = ring.first_change();
  REQUIRE(change);
  CHECK(change->watcher == 0);
  CHECK(change->reason.text == "node with group rank 1 stopped heartbeating (round 0)");
}

TEST_CASE("round watcher: a store that fails under it is reported lost once, with what it means",
          "[round_watcher]") {
  Ring ring;
  auto events = ring.connect();
  auto monitor = ring.connect();
  std::vector<std::pair<MembershipChange, ChangeReason>> seen;
  std::mutex mu;
  std::condition_variable cv;
  RoundWatcherOptions o = with_lease(10s);
  o.group_world_size = 2;
  ring.beat(1, 0);
  RoundWatcher watcher(o, events, monitor, [&](MembershipChange change, const ChangeReason& why) {
    std::lock_guard<std::mutex> lock(mu);
    seen.emplace_back(change, why);
    cv.notify_all();
  });
  events->cut = true;
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, kGuard, [&] { return !seen.empty(); }));
  }
  // The other connection fails as well, a moment later: said once is enough.
  monitor->cut = true;
  REQUIRE(ring.await([&] { return monitor->refused > 0; }));
  watcher.stop();  // joined: whatever the threads reported is in
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].first == MembershipChange::kStoreLost);
  CHECK(seen[0].second.text ==
        "lost the rendezvous store: store 127.0.0.1:29400: connection reset by peer (round 0)");
  CHECK(seen[0].second.loss == ddp::PeerLoss::kDeath);
}

TEST_CASE("round watcher: stop() returns within about an interval and nothing is reported after",
          "[round_watcher]") {
  Ring ring;
  // A peer that never beats would be lost after the lease; the watcher stops long before.
  auto watcher = ring.watcher(0, 2, with_lease(5s));
  REQUIRE(ring.await_tick(0, 1));
  const auto asked = Clock::now();
  watcher->stop();
  CHECK(Clock::now() - asked < 2s);
  watcher->stop();  // idempotent
  REQUIRE(post_change(*ring.memory, 0, "waiting"));
  CHECK(ring.change_count() == 0);
}
