// Metric reduction and the parameter consistency check, ranks in threads.
#include "worker_runtime/metrics.hpp"

#include <catch2/catch.hpp>

#include "rendezvous/store/memory_store.hpp"
#include "test_support.hpp"
#include "worker_runtime/consistency.hpp"
#include "worker_runtime/gloo_process_group.hpp"

using namespace ddp::worker_runtime;
using Catch::Matchers::Contains;
using ddp::worker_runtime::test::make_group;
using ddp::worker_runtime::test::run_ranks;
using namespace std::chrono_literals;

TEST_CASE("every rank reports the same global mean", "[metrics]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  std::vector<std::map<std::string, MetricValue>> seen(4);
  run_ranks(4, [&](int rank) {
    auto pg = make_group(store, rank, 4);
    MetricAccumulator m;
    // Uneven shards: rank r evaluated 10 * (r + 1) samples, r + 1 of them wrong.
    const double n = 10.0 * (rank + 1);
    m.add("accuracy", n - (rank + 1), n);
    m.add("loss", 0.1 * (rank + 1) * n, n);
    RT_LOCKED(CHECK(m.local().at("accuracy").mean() == Approx(0.9)));
    seen[static_cast<size_t>(rank)] = m.reduce(*pg);
  });
  for (const auto& s : seen) {
    CHECK(s.at("accuracy").sum == seen[0].at("accuracy").sum);
    CHECK(s.at("loss").mean() == seen[0].at("loss").mean());
  }
  CHECK(seen[0].at("accuracy").count == 100.0);
  CHECK(seen[0].at("accuracy").mean() == Approx(0.9));
  CHECK(seen[0].at("loss").mean() == Approx((0.1 * 10 + 0.2 * 20 + 0.3 * 30 + 0.4 * 40) / 100));
}

TEST_CASE("ranks with different metric names fail instead of mixing numbers", "[metrics]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2);
    MetricAccumulator m;
    m.add(rank == 0 ? "loss" : "los", 1.0);
    const std::string error = ddp::worker_runtime::test::error_of([&] { m.reduce(*pg); });
    RT_LOCKED(CHECK_THAT(
        error, Contains("different metric names") && Contains("rank " + std::to_string(rank))));
  });
}

TEST_CASE("consistency check passes on equal parameters and names step and ranks otherwise",
          "[consistency]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(3, [&](int rank) {
    auto pg = make_group(store, rank, 3);
    ConsistencyChecker checker(*pg, 10);
    std::vector<float> w(100, 0.25f);
    std::vector<float> b(10, -1.0f);
    checker.maybe_check(10, {w, b});
    checker.check(11, {w, b});
    if (rank == 2) {
      b[3] = std::nextafter(-1.0f, 0.0f);  // one ulp is enough to differ
    }
    checker.maybe_check(15, {w, b});  // not a multiple of 10: no collective, no error
    try {
      checker.maybe_check(20, {w, b});
      RT_LOCKED(FAIL("expected a ConsistencyError"));
    } catch (const ConsistencyError& e) {
      RT_LOCKED(CHECK_THAT(
          e.what(), Contains("at step 20") && Contains("on ranks 0 1") && Contains("on ranks 2")));
    }
  });
}

TEST_CASE("parameter_checksum is order- and bit-sensitive", "[consistency]") {
  std::vector<float> a = {1.0f, 2.0f};
  std::vector<float> b = {2.0f, 1.0f};
  CHECK(parameter_checksum({a}) == parameter_checksum({a}));
  CHECK(parameter_checksum({a}) != parameter_checksum({b}));
  std::vector<float> z = {0.0f};
  std::vector<float> nz = {-0.0f};
  CHECK(parameter_checksum({z}) != parameter_checksum({nz}));
}
