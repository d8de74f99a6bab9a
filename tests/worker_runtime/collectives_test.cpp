// Gloo collectives with 2-4 ranks in threads over one MemoryStore (real TCP on loopback).
#include <catch2/catch.hpp>
#include <chrono>
#include <numeric>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "test_support.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/tcp_sockets.hpp"
#include "worker_runtime/direct_mesh.hpp"
#include "worker_runtime/dist_context.hpp"
#include "worker_runtime/gloo_process_group.hpp"

using namespace ddp::worker_runtime;
using Catch::Matchers::Contains;
using ddp::worker_runtime::test::make_group;
using ddp::worker_runtime::test::run_ranks;
using namespace std::chrono_literals;

TEST_CASE("gloo all_reduce: sum, avg, min, max over float, double, int64", "[gloo]") {
  const int world = GENERATE(2, 3, 4);
  // Both paths: Gloo's ring only (0), the direct mesh for everything (64 MiB).
  const size_t direct = GENERATE(size_t{0}, size_t{64} << 20);
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(world, [&](int rank) {
    auto pg = make_group(store, rank, world, 20s, direct);
    // Rank r holds r+1 (+i): sum = W(W+1)/2, min = 1, max = W.
    std::vector<float> f(1000);
    std::iota(f.begin(), f.end(), static_cast<float>(rank + 1));
    pg->all_reduce(std::span<float>(f), ReduceOp::kSum);
    const float base_sum = static_cast<float>(world * (world + 1) / 2);
    RT_LOCKED(CHECK(f[0] == base_sum));
    RT_LOCKED(CHECK(f[999] == base_sum + 999.0f * static_cast<float>(world)));

    std::vector<double> d = {static_cast<double>(rank + 1), 10.0 * rank};
    pg->all_reduce(std::span<double>(d), ReduceOp::kAvg);
    RT_LOCKED(CHECK(d[0] == Approx((world + 1) / 2.0)));
    RT_LOCKED(CHECK(d[1] == Approx(10.0 * (world - 1) / 2.0)));

    std::vector<int64_t> i = {rank + 1, -(rank + 1), int64_t{1} << 40};
    std::vector<int64_t> i_min = i;
    pg->all_reduce(std::span<int64_t>(i), ReduceOp::kMax);
    RT_LOCKED(CHECK(i == std::vector<int64_t>{world, -1, int64_t{1} << 40}));
    pg->all_reduce(std::span<int64_t>(i_min), ReduceOp::kMin);
    RT_LOCKED(CHECK(i_min == std::vector<int64_t>{1, -world, int64_t{1} << 40}));

    std::vector<int64_t> avg = {10 * (rank + 1)};
    pg->all_reduce(std::span<int64_t>(avg), ReduceOp::kAvg);
    RT_LOCKED(CHECK(avg[0] == 10 * (world + 1) / 2));
  });
}

TEST_CASE("gloo broadcast, all_gather and barrier", "[gloo]") {
  const int world = GENERATE(2, 4);
  const size_t direct = GENERATE(size_t{0}, size_t{64} << 20);
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(world, [&](int rank) {
    auto pg = make_group(store, rank, world, 20s, direct);
    const int root = world - 1;
    std::vector<double> b(300, rank == root ? 42.5 : -1.0);
    pg->broadcast(std::span<double>(b), root);
    RT_LOCKED(CHECK(std::all_of(b.begin(), b.end(), [](double x) { return x == 42.5; })));

    std::vector<int64_t> mine = {rank, rank * 100};
    std::vector<int64_t> all(2 * static_cast<size_t>(world));
    pg->all_gather(std::span<const int64_t>(mine), std::span<int64_t>(all));
    for (int r = 0; r < world; ++r) {
      RT_LOCKED(CHECK(all[2 * static_cast<size_t>(r)] == r));
      RT_LOCKED(CHECK(all[2 * static_cast<size_t>(r) + 1] == r * 100));
    }
    for (int k = 0; k < 5; ++k) {
      pg->barrier();
    }
    std::vector<int64_t> wrong(3);
    RT_LOCKED(
        CHECK_THROWS_WITH(pg->all_gather(std::span<const int64_t>(mine), std::span<int64_t>(wrong)),
                          Contains("holds 3 elements, expected 2 x")));
    RT_LOCKED(CHECK_THROWS_WITH(pg->broadcast(std::span<double>(b), world),
                                Contains("root " + std::to_string(world) + " is not a rank")));
  });
}

TEST_CASE("gloo async all_reduce overlaps and keeps issue order with blocking calls", "[gloo]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2);
    std::vector<std::vector<float>> bufs(8, std::vector<float>(100000, static_cast<float>(rank)));
    std::vector<std::unique_ptr<Work>> works;
    for (auto& b : bufs) {
      works.push_back(pg->all_reduce_async(std::span<float>(b), ReduceOp::kSum));
    }
    std::vector<int64_t> x = {rank + 1};
    pg->all_reduce(std::span<int64_t>(x), ReduceOp::kSum);  // runs after the queued ones
    RT_LOCKED(CHECK(x[0] == 3));
    for (auto& w : works) {
      w->wait();
      RT_LOCKED(CHECK(w->is_completed()));
    }
    for (auto& b : bufs) {
      RT_LOCKED(CHECK(b.front() == 1.0f));
      RT_LOCKED(CHECK(b.back() == 1.0f));
    }
    std::vector<float> a(10, 1.0f + static_cast<float>(rank));
    std::vector<float> c(3, 2.0f * static_cast<float>(rank));
    pg->all_reduce_coalesced_async({std::span<float>(a), std::span<float>(c)}, ReduceOp::kAvg)
        ->wait();
    RT_LOCKED(CHECK(a[9] == 1.5f));
    RT_LOCKED(CHECK(c[2] == 1.0f));
  });
}

TEST_CASE("gloo connect times out naming the store when a rank never joins", "[gloo][timeout]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(500ms);
  // World of 3, only ranks 0 and 1 exist.
  run_ranks(2, [&](int rank) {
    const std::string error =
        ddp::worker_runtime::test::error_of([&] { make_group(store, rank, 3, 500ms); });
    RT_LOCKED(CHECK_THAT(error, Contains("gloo connect of rank " + std::to_string(rank) + "/3")));
  });
  try {
    make_group(store, 0, 3, 300ms);
    FAIL("expected a connect timeout");
  } catch (const ddp::CollectiveError& e) {
    CHECK_THAT(e.what(),
               Contains("rank 0/3") && Contains("store memory") && Contains("timeout 300 ms"));
  }
}

TEST_CASE("gloo collective times out when a rank does not join it", "[gloo][timeout]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2);
    if (rank == 0) {
      std::vector<float> v(10, 1.0f);
      try {
        pg->all_reduce(std::span<float>(v), ReduceOp::kSum, 300ms);
        RT_LOCKED(FAIL("expected a timeout"));
      } catch (const ddp::CollectiveError& e) {
        RT_LOCKED(CHECK_THAT(e.what(), Contains("all_reduce(sum, float32 x 10)") &&
                                           Contains("rank 0/2") && Contains("timeout 300 ms")));
      }
      // The group is unusable afterwards, and says why.
      RT_LOCKED(CHECK_THROWS_WITH(pg->barrier(100ms), Contains("failed earlier")));
      store->set("released", "1");
    } else {
      store->wait({"released"}, 20s);  // stays connected but never joins the all_reduce
    }
  });
}

TEST_CASE("init() on a world of one needs no store or peers", "[gloo]") {
  InitOptions o;
  o.backend = "gloo";
  o.env = {{"RANK", "0"}, {"WORLD_SIZE", "1"}};
  auto ctx = init(o);
  CHECK(ctx->world_size() == 1);
  CHECK(ctx->backend() == "gloo");
  std::vector<double> v = {3.0};
  ctx->process_group().all_reduce(std::span<double>(v), ReduceOp::kAvg);
  CHECK(v[0] == 3.0);
  ctx->store().set("k", "v");
  CHECK(ctx->store().get("k") == "v");
}

TEST_CASE("init() with a shared store joins ranks under /worker/attempt_<restart>", "[gloo]") {
  auto base = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(3, [&](int rank) {
    InitOptions o;
    o.backend = "auto";
    o.store = base;
    o.env = {{"RANK", std::to_string(rank)},      {"WORLD_SIZE", "3"},
             {"MASTER_ADDR", "127.0.0.1"},        {"MASTER_PORT", "1"},
             {"TORCHELASTIC_RESTART_COUNT", "4"}, {"DDPLAUNCH_BACKEND", "gloo"}};
    auto ctx = init(o);
    RT_LOCKED(CHECK(ctx->rank() == rank));
    RT_LOCKED(CHECK(ctx->restart_count() == 4));
    std::vector<int64_t> v = {1};
    ctx->process_group().all_reduce(std::span<int64_t>(v));
    RT_LOCKED(CHECK(v[0] == 3));
    ctx->store().set("hello/" + std::to_string(rank), "x");
  });
  CHECK(base->check({"/worker/attempt_4/hello/0", "/worker/attempt_4/hello/2"}));
}

TEST_CASE("ranks issuing different collectives get a clear error", "[gloo][direct]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2);
    std::vector<float> v(rank == 0 ? 10 : 20, 1.0f);  // rank 1 reduces a longer buffer
    const std::string error = ddp::worker_runtime::test::error_of(
        [&] { pg->all_reduce(std::span<float>(v), ReduceOp::kSum, 5s); });
    RT_LOCKED(CHECK_THAT(error, Contains("ranks issued different collectives") &&
                                    Contains("peer rank " + std::to_string(1 - rank))));
  });
}

TEST_CASE("a peer that exits mid-job fails the survivor at once", "[gloo][direct]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2);
    pg->barrier();
    if (rank == 1) {
      pg.reset();  // "exits": its sockets close
      store->set("gone", "1");
      return;
    }
    store->wait({"gone"}, 20s);
    std::vector<float> v(10, 1.0f);
    const std::string error = ddp::worker_runtime::test::error_of(
        [&] { pg->all_reduce(std::span<float>(v), ReduceOp::kSum, 20s); });
    RT_LOCKED(CHECK_THAT(error, Contains("peer rank 1") && Contains("closed the connection")));
  });
}

TEST_CASE("direct mesh links have keepalive but no TCP_USER_TIMEOUT", "[direct]") {
  // A rank some seconds behind holds our payload in its closed window: TCP_USER_TIMEOUT would
  // drop that live peer (common/tcp_liveness.hpp), keepalive does not. Keepalive follows the
  // peer tolerance: 3 s gives probes from 1 s idle (the default 15 s, from 4-5 s, jittered).
  const ddp::test::ScopedEnv tolerance(ddp::env::kPeerTolerance, "3");
  ddp::rendezvous::MemoryStore store;
  std::vector<std::unique_ptr<DirectMesh>> meshes(2);
  run_ranks(2, [&](int rank) {
    DirectMeshOptions options;
    options.rank = rank;
    options.size = 2;
    meshes[static_cast<size_t>(rank)] = std::make_unique<DirectMesh>(store, options);
  });
  const std::string address = store.get("direct/0");  // "127.0.0.1 <port>"
  const auto port = static_cast<uint16_t>(std::stoi(address.substr(address.find(' ') + 1)));
  auto ends = ddp::test::accepted_on(port);  // rank 0's end
  const auto rank1_end = ddp::test::connected_to(port);
  ends.insert(ends.end(), rank1_end.begin(), rank1_end.end());
  REQUIRE(ends.size() == 2);
  for (const auto& end : ends) {
    CHECK(end.keepalive);
    CHECK(end.keepidle_s == 1);
    CHECK(end.user_timeout_ms == 0);
  }
}
