// Static multi-node rendezvous with nodes as threads on one MemoryStore.
#include "rendezvous/static_rendezvous.hpp"

#include <catch2/catch.hpp>
#include <future>

#include "common/error.hpp"
#include "common/log.hpp"
#include "rendezvous/failure_record.hpp"
#include "rendezvous/store/forwarding_store.hpp"
#include "rendezvous/store/memory_store.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {

// The simulated nodes' progress lines would only clutter the test output.
const ddp::log::ScopedSink kQuietLog{[](ddp::log::Level, std::string_view) {}};

StaticRendezvousOptions options(int nnodes, int node_rank, int nproc) {
  StaticRendezvousOptions o;
  o.run_id = "static-job";
  o.nnodes = nnodes;
  o.node_rank = node_rank;
  o.local_world_size = nproc;
  o.master_addr = "10.1.2.3";
  o.master_port = 29500;
  o.join_timeout = 10s;
  o.progress_interval = 100ms;
  return o;
}

// A node's view of a shared store whose wait() returns only once the test opens a gate:
// the node is slow to wake (a loaded machine) while the others go on.
class SlowWakeStore final : public ForwardingStore {
 public:
  SlowWakeStore(std::shared_ptr<Store> base, std::shared_future<void> gate)
      : ForwardingStore(std::move(base)), gate_(std::move(gate)) {}
  using Store::wait;
  void wait(const std::vector<std::string>& k, Duration timeout) override {
    base().wait(k, timeout);
    gate_.wait();
  }

 private:
  std::shared_future<void> gate_;
};

}  // namespace

TEST_CASE("static: ranks follow node_rank, offsets are prefix sums of nproc", "[rdzv][static]") {
  auto store = std::make_shared<MemoryStore>();
  const std::vector<int> nproc{2, 3, 1};
  std::vector<std::unique_ptr<StaticRendezvous>> nodes;
  std::vector<std::future<RendezvousInfo>> futures;
  // Start in reverse order: ranks must not depend on who comes first.
  for (int r = 2; r >= 0; --r) {
    nodes.push_back(std::make_unique<StaticRendezvous>(options(3, r, nproc[r]), store));
    auto* node = nodes.back().get();
    futures.push_back(std::async(std::launch::async, [node] { return node->next_rendezvous(); }));
  }
  std::vector<RendezvousInfo> infos;
  for (auto& f : futures) infos.push_back(f.get());
  // infos[0] is node_rank 2, infos[2] is node_rank 0.
  CHECK(infos[2].group_rank == 0);
  CHECK(infos[2].rank_offset == 0);
  CHECK(infos[1].group_rank == 1);
  CHECK(infos[1].rank_offset == 2);
  CHECK(infos[0].group_rank == 2);
  CHECK(infos[0].rank_offset == 5);
  for (const auto& info : infos) {
    CHECK(info.world_size == 6);
    CHECK(info.group_world_size == 3);
    CHECK(info.master_addr == "10.1.2.3");
    CHECK(info.master_port == 29500);
  }
  // A restart returns the same ranks in the next round without waiting for anyone.
  const auto again = nodes[0]->next_rendezvous();
  CHECK(again.round == 1);
  CHECK(again.rank_offset == 5);
}

TEST_CASE("static: a missing node times out naming who is missing", "[rdzv][static]") {
  auto store = std::make_shared<MemoryStore>();
  auto o = options(3, 0, 1);
  o.join_timeout = 300ms;
  StaticRendezvous node0(o, store);
  StaticRendezvous node2(options(3, 2, 1), store);
  auto f = std::async(std::launch::async, [&] { return node2.next_rendezvous(); });
  REQUIRE_THROWS_WITH(node0.next_rendezvous(), Catch::Contains("2/3 nodes joined") &&
                                                   Catch::Contains("missing node_rank 1") &&
                                                   Catch::Contains("join_timeout 300 ms"));
  StaticRendezvous node1(options(3, 1, 1), store);
  node1.next_rendezvous();  // lets node2 finish
  CHECK(f.get().group_rank == 2);
}

TEST_CASE("static: two agents with the same node_rank are refused", "[rdzv][static]") {
  auto store = std::make_shared<MemoryStore>();
  auto o = options(2, 1, 1);
  o.join_timeout = 200ms;
  StaticRendezvous first(o, store);
  CHECK_THROWS_AS(first.next_rendezvous(), ddp::RendezvousError);  // node 0 never came
  StaticRendezvous second(o, store);
  CHECK_THROWS_WITH(second.next_rendezvous(), Catch::Contains("--node_rank 1 is already taken"));
}

TEST_CASE("static: closed after shutdown, bad node_rank rejected", "[rdzv][static]") {
  auto store = std::make_shared<MemoryStore>();
  StaticRendezvous node(options(1, 0, 4), store);
  CHECK(node.next_rendezvous().world_size == 4);
  node.shutdown();
  CHECK_THROWS_AS(node.next_rendezvous(), ddp::RendezvousClosed);
  CHECK_THROWS_WITH(StaticRendezvous(options(2, 2, 1), store),
                    Catch::Contains("--node_rank 2: expected 0..1"));
}

TEST_CASE("static: after a failed job the store host does not wait for dead nodes",
          "[rdzv][static]") {
  auto store = std::make_shared<MemoryStore>();
  auto o0 = options(2, 0, 1);
  o0.hosts_store = true;
  o0.exit_barrier_timeout = std::chrono::hours(1);  // a wait would outlast the test's timeout
  StaticRendezvous node0(o0, store);
  StaticRendezvous node1(options(2, 1, 1), store);
  auto f = std::async(std::launch::async, [&] { return node1.next_rendezvous(); });
  node0.next_rendezvous();
  f.get();
  // node1 "died": it never departs. A failed job must not hold node 0 at the barrier.
  auto done = std::async(std::launch::async, [&] { node0.shutdown_after_failure(); });
  REQUIRE(done.wait_for(60s) == std::future_status::ready);
  CHECK_THROWS_AS(node0.next_rendezvous(), ddp::RendezvousClosed);
}

TEST_CASE("static: after success the store host waits until every node departed",
          "[rdzv][static]") {
  auto store = std::make_shared<MemoryStore>();
  auto o0 = options(2, 0, 1);
  o0.hosts_store = true;
  o0.exit_barrier_timeout = std::chrono::hours(1);
  StaticRendezvous node0(o0, store);
  StaticRendezvous node1(options(2, 1, 1), store);
  auto f = std::async(std::launch::async, [&] { return node1.next_rendezvous(); });
  node0.next_rendezvous();
  f.get();
  auto done = std::async(std::launch::async, [&] { node0.shutdown(); });
  CHECK(done.wait_for(200ms) == std::future_status::timeout);  // node 1 is still running
  node1.shutdown();
  REQUIRE(done.wait_for(60s) == std::future_status::ready);
}

TEST_CASE("static: a node whose store connection drops leaves its loss as the failure record",
          "[rdzv][static][failure]") {
  auto store = std::make_shared<MemoryStore>(10s);
  std::vector<std::unique_ptr<StaticRendezvous>> nodes;
  std::vector<std::future<RendezvousInfo>> futures;
  for (int r = 0; r < 3; ++r) {
    auto o = options(3, r, 1);
    o.node_addr = "10.0.0." + std::to_string(r + 1);
    nodes.push_back(std::make_unique<StaticRendezvous>(o, store));
  }
  for (auto& n : nodes) {
    futures.push_back(std::async(std::launch::async, [&n] { return n->next_rendezvous(); }));
  }
  for (auto& f : futures) f.get();
  const std::string key = "/ddp_rdzv/static-job/static/failure/0";
  CHECK_FALSE(store->check({key}));
  CHECK(store->check({"/ddp_rdzv/static-job/static/alive/1"}));
  // Node 2's agent is killed: the store publishes the loss it left behind.
  REQUIRE(store->sever_presence_holding("/ddp_rdzv/static-job/static/alive/2"));
  const auto record = decode_failure(store->get(key));
  CHECK(record.kind == "node_lost");
  CHECK(record.group_rank == 2);
  CHECK(record.host == "10.0.0.3");
  CHECK_THAT(record.describe(), Catch::Contains("node 2 (10.0.0.3): lost: its agent's connection"));
  // A restart re-binds the presence to the next attempt's record.
  CHECK(nodes[0]->next_rendezvous().round == 1);
  REQUIRE(store->sever_presence_holding("/ddp_rdzv/static-job/static/alive/0"));
  // Node 2's record also covers the attempt after the one it died in (dying between two
  // attempts is a loss too), so node 0's death in attempt 1 shows as attempt 2's.
  CHECK(decode_failure(store->get("/ddp_rdzv/static-job/static/failure/1")).group_rank == 2);
  CHECK(decode_failure(store->get("/ddp_rdzv/static-job/static/failure/2")).group_rank == 0);
  // Node 1 leaves in order (its workers finished): nothing is published for it.
  nodes[1]->shutdown();
  CHECK_FALSE(store->check({"/ddp_rdzv/static-job/static/alive/1"}));
  CHECK(decode_failure(store->get(key)).group_rank == 2);
}

TEST_CASE("static: a node slow to wake still starts after a faster node already finished",
          "[rdzv][static]") {
  // Seen with 3 real hosts on a loaded machine: node 0 joined last, ran a short worker and
  // finished (closing the rendezvous) before node 1 had woken from its go key; node 1 took
  // that for "another node stopped the job" and exited 1.
  auto store = std::make_shared<MemoryStore>();
  std::promise<void> wake;
  StaticRendezvous node1(options(2, 1, 1),
                         std::make_shared<SlowWakeStore>(store, wake.get_future().share()));
  auto f = std::async(std::launch::async, [&] { return node1.next_rendezvous(); });
  StaticRendezvous node0(options(2, 0, 1), store);
  CHECK(node0.next_rendezvous().group_rank == 0);
  node0.shutdown();  // finished: closes the rendezvous and departs
  wake.set_value();
  CHECK(f.get().group_rank == 1);
}

TEST_CASE("static: a node stopped before everyone joined stops the nodes waiting",
          "[rdzv][static]") {
  auto store = std::make_shared<MemoryStore>();
  StaticRendezvous node1(options(3, 1, 1), store);
  auto f = std::async(std::launch::async, [&] { return node1.next_rendezvous(); });
  StaticRendezvous node0(options(3, 0, 1), store);
  auto f0 = std::async(std::launch::async, [&] { return node0.next_rendezvous(); });
  store->wait({"/ddp_rdzv/static-job/static/node/0", "/ddp_rdzv/static-job/static/node/1"}, 10s);
  node0.shutdown();  // a signal while node 0 waits for node 2 (from another thread)
  CHECK_THROWS_WITH(f.get(), Catch::Contains("another node stopped the job"));
  CHECK_THROWS_AS(f0.get(), ddp::RendezvousClosed);
}

TEST_CASE("static: a node that finished blocks the others' restarts, a failed one does not",
          "[rdzv][static]") {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::unique_ptr<StaticRendezvous>> nodes;
  for (int r = 0; r < 3; ++r)
    nodes.push_back(std::make_unique<StaticRendezvous>(options(3, r, 1), store));
  std::vector<std::future<RendezvousInfo>> futures;
  for (auto& n : nodes) {
    futures.push_back(std::async(std::launch::async, [&n] { return n->next_rendezvous(); }));
  }
  for (auto& f : futures) f.get();
  CHECK(nodes[1]->restart_blocker().empty());
  // Node 2 failed and left: the job may still restart (its failure record ends it anyway).
  nodes[2]->shutdown_after_failure();
  CHECK(nodes[1]->restart_blocker().empty());
  // Node 0 finished: its ranks never come back, which the others learn before a restart.
  nodes[0]->shutdown();
  CHECK(nodes[1]->restart_blocker() ==
        "node 0 already finished (its workers succeeded) and a static job cannot restart without "
        "it");
  CHECK(nodes[0]->restart_blocker().empty());  // about the others, not itself
  CHECK_THROWS_WITH(nodes[1]->next_rendezvous(), Catch::Contains("cannot restart: node 0 already"));
}
