// The elastic rendezvous over the real store server, nodes as threads each with their
// own TcpStore connections (as separate agents have).
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/tcp_store.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {

// The simulated nodes' progress lines would only clutter the test output.
const ddp::log::ScopedSink kQuietLog{[](ddp::log::Level, std::string_view) {}};

class Changes {
 public:
  void operator()(MembershipChange c) {
    std::lock_guard<std::mutex> lock(mu_);
    seen_ = c;
    cv_.notify_all();
  }
  std::optional<MembershipChange> wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 20s, [&] { return seen_.has_value(); });  // hang guard only
    return seen_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<MembershipChange> seen_;
};

struct TcpCluster {
  StoreServer server{StoreServerOptions{"127.0.0.1", 0}};

  std::shared_ptr<Store> connect() {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = server.port();
    o.timeout = 10s;
    o.connect_timeout = 2s;
    return std::make_shared<TcpStore>(o);
  }

  std::unique_ptr<DynamicRendezvous> node(int min_nodes, int max_nodes, int nproc) {
    DynamicRendezvousOptions o;
    o.run_id = "tcp-job";
    o.min_nodes = min_nodes;
    o.max_nodes = max_nodes;
    o.local_world_size = nproc;
    o.master_addr = "127.0.0.1";
    o.master_port = server.port();
    // Windows wide enough for 17 nodes' threads on a loaded 2-core CI machine: the first
    // round (16 of max 17) closes only by its last call. The node destroyed below clears its
    // close actions as it goes, so no claim comes from its connection: its ring monitor finds
    // it silent after lease_timeout, posts the claim and counts it out as "lost", while the
    // others, handling that claim, find its presence gone and count it out as
    // "disconnected". Whoever writes first decides: "lost" (still expected) leaves round 2
    // to close by its last call; "disconnected" (gone for good) closes it as soon as the 16
    // are back, and then every survivor has written the same words, the case the exit
    // barrier once counted 16 times.
    o.join_timeout = 30s;
    o.last_call_timeout = 10s;
    o.heartbeat_interval = 200ms;
    o.lease_timeout = 2s;
    return std::make_unique<DynamicRendezvous>(o, connect(), [this] { return connect(); });
  }
};

std::vector<RendezvousInfo> join_all(const std::vector<DynamicRendezvous*>& nodes) {
  std::vector<std::future<RendezvousInfo>> futures;
  for (auto* n : nodes) {
    futures.push_back(std::async(std::launch::async, [n] { return n->next_rendezvous(); }));
  }
  std::vector<RendezvousInfo> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

}  // namespace

TEST_CASE("dynamic over TCP: 16 nodes agree, a late node and a lost node re-form the group",
          "[rdzv][dynamic][tcp]") {
  TcpCluster c;
  // What the nodes' watchers report to; declared before the nodes so it outlives their
  // watcher threads (which may still fire while the nodes are destroyed).
  std::vector<Changes> changes(16);
  std::vector<Changes> lost(16);
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  std::vector<DynamicRendezvous*> ptrs;
  for (int i = 0; i < 16; ++i) {
    nodes.push_back(c.node(2, 17, 2));
    ptrs.push_back(nodes.back().get());
  }
  auto infos = join_all(ptrs);
  CHECK(infos[0].group_world_size == 16);
  CHECK(infos[0].world_size == 32);
  CHECK(infos[0].master_port == c.server.port());

  // A 17th node arrives: every running node is told, and all 17 form round 1.
  for (size_t i = 0; i < 16; ++i) nodes[i]->watch(std::ref(changes[i]));
  nodes.push_back(c.node(2, 17, 2));
  auto late = std::async(std::launch::async, [&] { return nodes.back()->next_rendezvous(); });
  for (auto& ch : changes) REQUIRE(ch.wait() == MembershipChange::kNodeWaiting);
  std::vector<DynamicRendezvous*> running(ptrs);
  auto grown = join_all(running);
  const auto late_info = late.get();
  CHECK(late_info.group_world_size == 17);
  CHECK(late_info.world_size == 34);
  for (size_t i = 0; i < 16; ++i) CHECK(grown[i].group_rank == infos[i].group_rank);

  // One node dies: the others are told it is lost and re-form with 16.
  for (size_t i = 0; i < 16; ++i) nodes[i]->watch(std::ref(lost[i]));
  nodes.back()->watch([](MembershipChange) {});
  nodes.erase(nodes.begin() + 5);  // destroyed without shutdown: its heartbeats stop
  ptrs.clear();
  for (auto& n : nodes) ptrs.push_back(n.get());
  for (size_t i = 0; i < 16; ++i) {
    if (i == 5) continue;
    REQUIRE(lost[i].wait() == MembershipChange::kNodeLost);
  }
  // Counted out as "disconnected" by every survivor and counted 16 times, the loss once
  // closed round 2 with half of them and left the rest waiting for a round 3.
  auto shrunk = join_all(ptrs);
  for (const auto& info : shrunk) {
    CHECK(info.group_world_size == 16);
    CHECK(info.world_size == 32);
    CHECK(info.round == 2);
  }
}

TEST_CASE("dynamic over TCP: losing the store is reported as such", "[rdzv][dynamic][tcp]") {
  TcpCluster c;
  Changes changes;  // outlives a's watcher thread
  auto a = c.node(2, 2, 1), b = c.node(2, 2, 1);
  join_all({a.get(), b.get()});
  a->watch(std::ref(changes));
  c.server.stop();
  REQUIRE(changes.wait() == MembershipChange::kStoreLost);
  CHECK_THAT(a->last_change().text, Catch::Contains("lost the rendezvous store"));
}
