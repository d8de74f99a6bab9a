// Store succession (rendezvous/store_succession.hpp): the rules as pure functions, then the
// elastic rendezvous carrying its store on to a successor's standby when the node hosting it
// is lost, with every node's store a MemoryStore behind an endpoint that a test can kill (a
// death: refused at once) or silence (no answer), as a network would.
#include "rendezvous/store_succession.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/round_keys.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "rendezvous/store/prefix_store.hpp"
#include "rendezvous/store_takeover.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;
using ddp::PeerLoss;

namespace {

const ddp::log::ScopedSink kQuietLog{[](ddp::log::Level, std::string_view) {}};
constexpr auto kGuard = 30s;

Endpoint at(int node) {
  return Endpoint{"10.0.0." + std::to_string(node + 1), 29400};
}

// Every node's store behind its endpoint. kill(): the endpoint refuses (a death); silence(a,
// b): a cannot hear b's endpoint (its calls time out), as across a partition.
class StoreNet {
 public:
  explicit StoreNet(int nodes) {
    for (int n = 0; n < nodes; ++n)
      stores_[format_endpoint(at(n))] = std::make_shared<MemoryStore>(10s);
  }
  void kill(int node) {
    std::lock_guard<std::mutex> lock(mu_);
    dead_.insert(format_endpoint(at(node)));
  }
  // Everything from `from` to `to`'s endpoint goes unanswered (both directions: call twice).
  void cut(int from, int to) {
    std::lock_guard<std::mutex> lock(mu_);
    cut_.insert({from, format_endpoint(at(to))});
  }
  void heal() {
    std::lock_guard<std::mutex> lock(mu_);
    cut_.clear();
  }
  // Throws what the network says of a call from node `from` to endpoint `to`, if anything.
  void check(int from, const std::string& to) {
    bool dead = false;
    bool cut = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dead = dead_.count(to) != 0;
      cut = cut_.count({from, to}) != 0;
    }
    if (dead) throw ddp::StoreError("store tcp://" + to + ": Connection refused", PeerLoss::kDeath);
    if (cut) {
      std::this_thread::sleep_for(20ms);
      throw ddp::StoreError("store tcp://" + to + ": Connection timed out", PeerLoss::kSilence);
    }
  }
  std::shared_ptr<Store> dial(int from, const Endpoint& endpoint);
  std::shared_ptr<MemoryStore> store(int node) { return stores_.at(format_endpoint(at(node))); }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<MemoryStore>> stores_;
  std::set<std::string> dead_;
  std::set<std::pair<int, std::string>> cut_;
};

// One node's connection to one endpoint: every call asks the network first; a wait is cut
// into slices so a death or a cut ends it as it would a socket.
class NetStore final : public ForwardingStore {
 public:
  NetStore(StoreNet& net, int from, std::string to, std::shared_ptr<Store> base)
      : ForwardingStore(std::move(base)), net_(net), from_(from), to_(std::move(to)) {}
  void set(const std::string& k, const std::string& v) override {
    net_.check(from_, to_);
    ForwardingStore::set(k, v);
  }
  std::string get(const std::string& k) override {
    net_.check(from_, to_);
    return ForwardingStore::get(k);
  }
  int64_t add(const std::string& k, int64_t d) override {
    net_.check(from_, to_);
    return ForwardingStore::add(k, d);
  }
  std::string compare_set(const std::string& k, const std::string& e,
                          const std::string& d) override {
    net_.check(from_, to_);
    return ForwardingStore::compare_set(k, e, d);
  }
  bool check(const std::vector<std::string>& k) override {
    net_.check(from_, to_);
    return ForwardingStore::check(k);
  }
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (true) {
      net_.check(from_, to_);
      const auto left =
          std::chrono::duration_cast<Duration>(until - std::chrono::steady_clock::now());
      try {
        ForwardingStore::wait(keys, std::max(Duration(1), std::min<Duration>(left, 20ms)));
        return;
      } catch (const ddp::StoreTimeout&) {
        if (left <= 20ms) throw;
      }
    }
  }
  bool delete_key(const std::string& k) override {
    net_.check(from_, to_);
    return ForwardingStore::delete_key(k);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& k) override {
    net_.check(from_, to_);
    return ForwardingStore::multi_get(k);
  }
  void multi_set(const std::vector<std::string>& k, const std::vector<std::string>& v) override {
    net_.check(from_, to_);
    ForwardingStore::multi_set(k, v);
  }
  [[nodiscard]] std::string describe() const override { return "tcp://" + to_; }

 private:
  StoreNet& net_;
  int from_;
  std::string to_;
};

std::shared_ptr<Store> StoreNet::dial(int from, const Endpoint& endpoint) {
  const std::string to = format_endpoint(endpoint);
  check(from, to);
  return std::make_shared<NetStore>(*this, from, to, stores_.at(to));
}

// Node n of a job whose store node 0 hosts; every node keeps a standby at its own endpoint.
std::unique_ptr<DynamicRendezvous> make_node(StoreNet& net, int n, int min_nodes, int max_nodes) {
  DynamicRendezvousOptions o;
  o.run_id = "job";
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.node_addr = at(n).host;
  o.master_addr = at(0).host;
  o.master_port = at(0).port;
  o.join_timeout = 15s;
  o.last_call_timeout = 200ms;
  o.close_timeout = 5s;
  o.heartbeat_interval = 50ms;
  o.lease_timeout = 2s;
  o.progress_interval = 1s;
  o.tolerance = 400ms;
  o.takeover_margin = 200ms;
  o.hosts_store = n == 0;
  o.exit_barrier_timeout = 1s;
  o.standby = at(n);
  o.dial = [&net, n](const Endpoint& e, Duration) { return net.dial(n, e); };
  return std::make_unique<DynamicRendezvous>(o, net.dial(n, at(0)),
                                             [&net, n] { return net.dial(n, at(0)); });
}

std::vector<RendezvousInfo> join_all(const std::vector<DynamicRendezvous*>& nodes) {
  std::vector<std::future<RendezvousInfo>> futures;
  for (auto* node : nodes) {
    futures.push_back(std::async(std::launch::async, [node] { return node->next_rendezvous(); }));
  }
  std::vector<RendezvousInfo> infos;
  for (auto& f : futures) {
    REQUIRE(f.wait_for(kGuard) == std::future_status::ready);
    infos.push_back(f.get());
  }
  return infos;
}

// Every info names one round, one store and group ranks 0..n-1.
void check_group(const std::vector<RendezvousInfo>& infos, uint64_t round, const Endpoint& store) {
  std::set<int> ranks;
  for (const auto& info : infos) {
    CHECK(info.round == round);
    CHECK(info.group_world_size == static_cast<int>(infos.size()));
    CHECK(info.master_addr == store.host);
    CHECK(info.master_port == store.port);
    ranks.insert(info.group_rank);
  }
  CHECK(ranks.size() == infos.size());
  CHECK(*ranks.rbegin() == static_cast<int>(infos.size()) - 1);
}

}  // namespace

TEST_CASE("store succession: the standby list, the successors and the two rules",
          "[rdzv][succession]") {
  const std::vector<Endpoint> standbys = {at(0), {}, at(2), Endpoint{"fd00::4", 7}};
  const std::string text = format_standbys(standbys);
  CHECK(text == "10.0.0.1:29400\n\n10.0.0.3:29400\n[fd00::4]:7\n");
  const auto back = parse_standbys(text);
  REQUIRE(back.size() == 4);
  CHECK(back[1].host.empty());
  CHECK(back[3].host == "fd00::4");
  CHECK(back[3].port == 7);
  CHECK_THROWS_AS(parse_standbys("10.0.0.1:29400"), ddp::ProtocolError);  // no line end
  CHECK_THROWS_AS(parse_standbys("not a host:x\n"), ddp::ProtocolError);

  Succession s;
  s.standbys = standbys;
  s.store = at(0);
  const auto next = successors(s);
  REQUIRE(next.size() == 2);  // not the lost store's own entry, not the node without one
  CHECK(next[0].host == "10.0.0.3");
  CHECK(next[1].host == "fd00::4");

  // A strict majority of the members not proven dead; after silence (the host not proven
  // dead), only once the margin has passed.
  CHECK(may_take_over(1, 1, true, 0s, 2s));  // a 2-node job whose host died: the survivor
  CHECK_FALSE(may_take_over(0, 1, true, 0s, 2s));
  CHECK_FALSE(may_take_over(2, 4, true, 0s, 2s));  // 5 nodes, the host dead: 2 of 4 is no majority
  CHECK(may_take_over(3, 4, true, 0s, 2s));
  CHECK_FALSE(may_take_over(3, 5, false, 1s, 2s));
  CHECK(may_take_over(3, 5, false, 2s, 2s));
  CHECK_FALSE(may_take_over(2, 4, false, 5s, 2s));  // half is no majority: ties stay
  CHECK_FALSE(may_take_over(1, 2, false, 5s, 2s));
  // The host steps down only when the silent ones are a strict majority.
  CHECK(quorum_lost(2, 3));
  CHECK_FALSE(quorum_lost(1, 2));
  CHECK_FALSE(quorum_lost(2, 4));
  CHECK(quorum_lost(3, 5));
}

TEST_CASE("store takeover: the ballot counts live supporters against the living",
          "[rdzv][succession]") {
  // Five members, group rank 0 hosted the lost store. Each case is a fresh candidate store.
  auto candidate = [] { return std::make_shared<MemoryStore>(1s); };
  SECTION("the host dead: two of the four living are no majority, three are") {
    auto store = candidate();
    BallotRecord r1, r2, r3;
    TakeoverBallot b1(*store, 0, 1, 5, r1), b2(*store, 0, 2, 5, r2), b3(*store, 0, 3, 5, r3);
    b1.support(true, {0});
    b2.support(true, {0});
    CHECK(b1.tally().dead == 1);  // counted once, though both proved it
    CHECK_FALSE(b2.try_promote(0s, 2s));
    b3.support(true, {0});
    CHECK(b3.try_promote(0s, 2s));
    CHECK(b1.promoted());
    CHECK(store->get(rdzv_keys::takeover(0, "promoted")) == "3");
  }
  SECTION("a supporter proven dead no longer counts, though it leaves the electorate") {
    auto store = candidate();
    BallotRecord r1, r2, r3;
    TakeoverBallot b1(*store, 0, 1, 5, r1), b2(*store, 0, 2, 5, r2), b3(*store, 0, 3, 5, r3);
    b3.support(true, {0});
    b1.support(true, {0, 3});  // node 3 voted, then died
    const Tally t = b1.tally();
    CHECK(t.supporters == 2);
    CHECK(t.dead_voters == 1);
    CHECK(t.dead == 2);
    // One live supporter of three living (counting node 3's vote too would make 2 of 3).
    CHECK_FALSE(b1.try_promote(0s, 2s));
    b2.support(true, {0});
    CHECK(b2.try_promote(0s, 2s));  // 2 live of 3 living
  }
  SECTION("silence: a majority and the margin; a withdrawal voids the epoch's votes") {
    auto store = candidate();
    BallotRecord r1, r2, r3;
    TakeoverBallot b1(*store, 0, 1, 5, r1), b2(*store, 0, 2, 5, r2), b3(*store, 0, 3, 5, r3);
    b1.support(false, {});
    b2.support(false, {});
    b3.support(false, {});
    CHECK_FALSE(b1.try_promote(1s, 2s));  // the host may not have stepped down yet
    CHECK(b1.withdraw());                 // node 1 goes back to the lost store
    CHECK(b1.tally().epoch == 1);
    CHECK(b1.tally().supporters == 0);
    CHECK_FALSE(b2.try_promote(5s, 2s));
    b2.support(false, {});  // the others vote again in the new epoch
    b3.support(false, {});
    CHECK_FALSE(b2.try_promote(5s, 2s));  // 2 of 5
    b1.support(false, {});
    CHECK(b2.try_promote(5s, 2s));
    CHECK_FALSE(b1.withdraw());  // promoted: node 1 must move there, not back
  }
  SECTION("a state that does not parse is named") {
    auto store = candidate();
    store->set(rdzv_keys::takeover(0, "state"), "elected 3");
    BallotRecord r;
    TakeoverBallot b(*store, 0, 1, 3, r);
    CHECK_THROWS_WITH(b.promoted(),
                      Catch::Contains("'elected 3'") && Catch::Contains("expected 'open <epoch>'"));
  }
}

TEST_CASE("store succession: the store host dies, the survivors re-form on the next standby",
          "[rdzv][succession]") {
  StoreNet net(3);
  auto host = make_node(net, 0, 1, 3);
  auto a = make_node(net, 1, 1, 3);
  auto b = make_node(net, 2, 1, 3);
  check_group(join_all({host.get(), a.get(), b.get()}), 0, at(0));
  CHECK(a->kind().store_moves);
  net.kill(0);
  const auto infos = join_all({a.get(), b.get()});
  // The lowest group rank's standby that answers, after the lost host's own entry.
  const Endpoint successor = infos[0].master_addr == at(1).host ? at(1) : at(2);
  check_group(infos, 1, successor);
  CHECK(a->store_endpoint().host == successor.host);
  // The takeover was a death, so nobody waited for the margin; the store says so.
  const auto store = std::make_shared<PrefixStore>("/ddp_rdzv/job", net.dial(1, successor));
  CHECK(store->get(rdzv_keys::takeover(0, "death")) == "1");
  a->shutdown();
  b->shutdown();
}

TEST_CASE("store succession: two nodes dying together, the host among them", "[rdzv][succession]") {
  StoreNet net(4);
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  for (int n = 0; n < 4; ++n) nodes.push_back(make_node(net, n, 1, 4));
  const auto first = join_all({nodes[0].get(), nodes[1].get(), nodes[2].get(), nodes[3].get()});
  check_group(first, 0, at(0));
  // The host and the node whose standby comes first among the survivors' successors.
  int lowest = 1;
  for (int n = 1; n < 4; ++n) {
    if (first[static_cast<size_t>(n)].group_rank < first[static_cast<size_t>(lowest)].group_rank) {
      lowest = n;
    }
  }
  net.kill(0);
  net.kill(lowest);
  std::vector<DynamicRendezvous*> survivors;
  for (int n = 1; n < 4; ++n) {
    if (n != lowest) survivors.push_back(nodes[static_cast<size_t>(n)].get());
  }
  const auto infos = join_all(survivors);
  check_group(infos, 1, survivors[0]->store_endpoint());
  CHECK(survivors[0]->store_endpoint().host != at(lowest).host);
  for (auto* s : survivors) s->shutdown();
}

TEST_CASE("store succession: a two-node job whose host dies goes on with the survivor",
          "[rdzv][succession]") {
  StoreNet net(2);
  auto host = make_node(net, 0, 1, 2);
  auto a = make_node(net, 1, 1, 2);
  check_group(join_all({host.get(), a.get()}), 0, at(0));
  net.kill(0);
  check_group(join_all({a.get()}), 1, at(1));  // a death is certain: no majority needed
  a->shutdown();
}

TEST_CASE("store succession: the new host killed during the takeover, the next one takes it",
          "[rdzv][succession]") {
  StoreNet net(4);
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  for (int n = 0; n < 4; ++n) nodes.push_back(make_node(net, n, 1, 4));
  const auto first = join_all({nodes[0].get(), nodes[1].get(), nodes[2].get(), nodes[3].get()});
  net.kill(0);
  // The first successor's standby, once it was promoted: dies before the round re-forms.
  std::vector<Endpoint> order;
  for (size_t g = 0; g < 4; ++g) {
    for (int n = 0; n < 4; ++n) {
      if (first[static_cast<size_t>(n)].group_rank == static_cast<int>(g) && n != 0) {
        order.push_back(at(n));
      }
    }
  }
  int doomed = 0;
  for (int n = 1; n < 4; ++n) {
    if (at(n).host == order[0].host) doomed = n;
  }
  std::atomic<bool> done{false};
  std::thread killer([&] {
    const auto promoted = "/ddp_rdzv/job/" + rdzv_keys::takeover(0, "promoted");
    while (!done && !net.store(doomed)->check({promoted})) std::this_thread::sleep_for(1ms);
    net.kill(doomed);
  });
  std::vector<DynamicRendezvous*> survivors;
  for (int n = 1; n < 4; ++n) {
    if (n != doomed) survivors.push_back(nodes[static_cast<size_t>(n)].get());
  }
  // The doomed node takes no part: it dies with its store (its calls are refused from then
  // on), right after the store opened and before the re-formed round could close.
  const auto infos = join_all(survivors);
  done = true;
  killer.join();
  CHECK(infos[0].master_addr == order[1].host);
  for (const auto& info : infos) CHECK(info.group_world_size == 2);
  for (auto* s : survivors) s->shutdown();
}

TEST_CASE("store succession: a survivor cut off from the first successor opens no other",
          "[rdzv][succession]") {
  // Four nodes; the host is SIGKILLed while survivor x cannot reach the first successor's
  // node f (a partition inside the job). f and the third survivor are two of the three living:
  // they open f's standby. x, which cannot reach it, keeps trying it rather than opening the
  // next one for itself (that would be a second job); once the cut heals it joins them.
  StoreNet net(4);
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  for (int n = 0; n < 4; ++n) nodes.push_back(make_node(net, n, 1, 4));
  const auto first = join_all({nodes[0].get(), nodes[1].get(), nodes[2].get(), nodes[3].get()});
  int f = 0;  // the survivor of the lowest group rank: its standby comes first
  for (int n = 1; n < 4; ++n) {
    if (f == 0 ||
        first[static_cast<size_t>(n)].group_rank < first[static_cast<size_t>(f)].group_rank) {
      f = n;
    }
  }
  const int x = f == 1 ? 2 : 1;
  const int y = 6 - f - x;
  net.cut(x, f);
  net.cut(f, x);
  net.kill(0);
  auto cut_off = std::async(std::launch::async,
                            [&] { return nodes[static_cast<size_t>(x)]->next_rendezvous(); });
  const auto two =
      join_all({nodes[static_cast<size_t>(f)].get(), nodes[static_cast<size_t>(y)].get()});
  for (const auto& info : two) CHECK(info.master_addr == at(f).host);
  std::this_thread::sleep_for(1500ms);  // several of x's tries
  CHECK(cut_off.wait_for(0s) == std::future_status::timeout);
  for (int n = 1; n < 4; ++n) {
    if (n == f) continue;
    INFO("node " << n << "'s standby");
    CHECK_FALSE(net.store(n)->check({"/ddp_rdzv/job/" + rdzv_keys::takeover(0, "promoted")}));
  }
  // Healed, x reaches f's standby, finds it open and moves there (the agents would then
  // re-form with it; here the test only follows x).
  net.heal();
  CHECK(ddp::test::wait_until(
      [&] { return nodes[static_cast<size_t>(x)]->store_endpoint().host == at(f).host; }, kGuard));
  for (int n = 1; n < 4; ++n) nodes[static_cast<size_t>(n)]->shutdown_after_failure();
  REQUIRE(cut_off.wait_for(kGuard) == std::future_status::ready);
}

TEST_CASE("store succession: a host cut off from the majority steps down, and they move on",
          "[rdzv][succession]") {
  // Three nodes; the host's link is cut for good. Nodes 1 and 2 (a strict majority) carry the
  // store on to a standby after the tolerance and the margin; the host, hearing from nobody,
  // steps down first, so at no moment do two stores open rounds.
  StoreNet net(3);
  auto host = make_node(net, 0, 1, 3);
  auto a = make_node(net, 1, 1, 3);
  auto b = make_node(net, 2, 1, 3);
  check_group(join_all({host.get(), a.get(), b.get()}), 0, at(0));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MembershipChange> host_changes;
  host->watch([&](MembershipChange change) {
    std::lock_guard<std::mutex> lock(mu);
    host_changes.push_back(change);
    cv.notify_all();
  });
  for (int n = 1; n < 3; ++n) {
    net.cut(0, n);
    net.cut(n, 0);
  }
  // The host's own store answers it (its node is the one cut off): it sees the others' beats
  // stop, and steps down.
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, kGuard, [&] { return !host_changes.empty(); }));
    CHECK(host_changes.front() == MembershipChange::kSteppedDown);
  }
  CHECK(net.store(0)->check({"/ddp_rdzv/job/" + rdzv_keys::kSteppedDown}));
  const auto infos = join_all({a.get(), b.get()});
  check_group(infos, 1, a->store_endpoint());
  CHECK(a->store_endpoint().host != at(0).host);
  // Silence, not death: promoted by the majority.
  const auto store =
      std::make_shared<PrefixStore>("/ddp_rdzv/job", net.dial(1, a->store_endpoint()));
  CHECK_FALSE(store->check({rdzv_keys::takeover(0, "death")}));
  CHECK(store->add(rdzv_keys::takeover(0, "supporters/0"), 0) == 2);
  // The host, joining again, finds its own store stepped down and the successor's only once
  // the cut heals.
  net.heal();
  auto back = std::async(std::launch::async, [&] { return host->next_rendezvous(); });
  REQUIRE(back.wait_for(kGuard) == std::future_status::ready);
  CHECK(back.get().master_addr == a->store_endpoint().host);
  a->shutdown();
  b->shutdown();
  host->shutdown();
}

TEST_CASE("store succession: a minority cut off from the host never opens a store of its own",
          "[rdzv][succession]") {
  // Five nodes; nodes 3 and 4 are cut off from the others. Two of five is no majority: they
  // keep trying and no round forms on a standby of theirs; the host keeps its store.
  StoreNet net(5);
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  for (int n = 0; n < 5; ++n) nodes.push_back(make_node(net, n, 1, 5));
  join_all({nodes[0].get(), nodes[1].get(), nodes[2].get(), nodes[3].get(), nodes[4].get()});
  for (int cut_off : {3, 4}) {
    for (int n = 0; n < 3; ++n) {
      net.cut(cut_off, n);
      net.cut(n, cut_off);
    }
  }
  std::atomic<bool> stop{false};
  auto minority = std::async(std::launch::async, [&] {
    std::vector<std::future<void>> tries;
    for (int n : {3, 4}) {
      tries.push_back(std::async(std::launch::async, [&, n] {
        try {
          nodes[static_cast<size_t>(n)]->next_rendezvous();
        } catch (const std::exception&) {
        }
      }));
    }
    for (auto& t : tries) t.wait();
  });
  std::this_thread::sleep_for(2s);  // several tolerances and margins
  for (int n : {3, 4}) {
    CHECK_FALSE(net.store(n)->check({"/ddp_rdzv/job/" + rdzv_keys::takeover(0, "promoted")}));
  }
  CHECK_FALSE(net.store(0)->check({"/ddp_rdzv/job/" + rdzv_keys::kSteppedDown}));
  for (int n : {3, 4}) nodes[static_cast<size_t>(n)]->shutdown_after_failure();
  stop = true;
  REQUIRE(minority.wait_for(kGuard) == std::future_status::ready);
}
