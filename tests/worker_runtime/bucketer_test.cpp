// Bucketed gradient all-reduce equals a plain all-reduce, launched during "backward".
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>

#include "common/error.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "test_support.hpp"
#include "worker_runtime/gloo_process_group.hpp"
#include "worker_runtime/gradient_bucketer.hpp"

using namespace ddp::worker_runtime;
using Catch::Matchers::Contains;
using ddp::worker_runtime::test::make_group;
using ddp::worker_runtime::test::run_ranks;
using namespace std::chrono_literals;

namespace {

// Gradient sizes of a small MLP, in backward order (last layer first).
const std::vector<size_t> kSizes = {10, 10 * 64, 64, 64 * 256, 256, 256 * 784};

std::vector<std::vector<float>> random_grads(int rank, int step) {
  std::mt19937 rng(static_cast<unsigned>(rank * 1000 + step));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> out;
  for (size_t n : kSizes) {
    std::vector<float> g(n);
    for (auto& x : g) {
      x = dist(rng);
    }
    out.push_back(std::move(g));
  }
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return std::numeric_limits<float>::infinity();
  }
  float out = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    out = std::max(out, std::abs(a[i] - b[i]));
  }
  return out;
}

}  // namespace

TEST_CASE("bucketed all-reduce equals a plain all-reduce of each gradient", "[bucketer]") {
  const double cap_mb = GENERATE(0.01, 0.3, 25.0);
  const int world = GENERATE(2, 3);
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(world, [&](int rank) {
    auto pg = make_group(store, rank, world);
    auto grads = random_grads(rank, 0);
    BucketerOptions bo;
    bo.bucket_cap_mb = cap_mb;
    GradientBucketer bucketer(*pg, bo);
    for (auto& g : grads) {
      bucketer.add_gradient(std::span<float>(g));
    }
    const size_t planned = bucketer.num_buckets();  // before the first step
    for (int step = 0; step < 3; ++step) {
      const auto fresh = random_grads(rank, step);
      for (size_t i = 0; i < grads.size(); ++i) {
        std::copy(fresh[i].begin(), fresh[i].end(), grads[i].begin());  // same buffers
      }
      auto expected = fresh;
      for (auto& e : expected) {
        pg->all_reduce(std::span<float>(e), ReduceOp::kAvg);
      }
      for (size_t i = 0; i < grads.size(); ++i) {
        bucketer.mark_ready(i);  // "backward" finishes gradient i
      }
      bucketer.wait();
      for (size_t i = 0; i < grads.size(); ++i) {
        // Ring all-reduce sums in an order that depends on where an element sits in the
        // message, so with 3 ranks the last bit may differ; with 2 it is exact.
        const float diff = max_abs_diff(grads[i], expected[i]);
        RT_LOCKED(INFO("gradient " << i << " step " << step << " cap " << cap_mb);
                  CHECK(diff <= (world == 2 ? 0.0f : 1e-6f)));
      }
      // Every bucket filled during backward, so all were launched before wait().
      RT_LOCKED(CHECK(bucketer.buckets_launched_early() == bucketer.num_buckets()));
    }
    RT_LOCKED(CHECK(bucketer.num_buckets() == planned));
    if (cap_mb == 25.0) {
      RT_LOCKED(CHECK(bucketer.num_buckets() == 1));
    } else if (cap_mb == 0.01) {
      RT_LOCKED(CHECK(bucketer.num_buckets() >= 3));
    }
  });
}

TEST_CASE("wait() launches buckets whose gradients were never marked", "[bucketer]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  run_ranks(2, [&](int rank) {
    auto pg = make_group(store, rank, 2);
    std::vector<float> a(1000, static_cast<float>(rank));
    std::vector<float> b(1000, 2.0f * static_cast<float>(rank));
    BucketerOptions bo;
    bo.bucket_cap_mb = 0.001;  // one gradient per bucket
    bo.average = false;
    GradientBucketer bucketer(*pg, bo);
    bucketer.add_gradient(std::span<float>(a));
    bucketer.add_gradient(std::span<float>(b));
    bucketer.mark_ready(0);
    bucketer.wait();  // b was never marked (e.g. an unused parameter)
    RT_LOCKED(CHECK(a[0] == 1.0f));
    RT_LOCKED(CHECK(b[999] == 2.0f));
    RT_LOCKED(CHECK(bucketer.buckets_launched_early() == 1));
    RT_LOCKED(CHECK_THROWS_WITH(bucketer.mark_ready(7), Contains("only 2 gradients")));
    bucketer.mark_ready(1);
    RT_LOCKED(CHECK_THROWS_WITH(bucketer.mark_ready(1), Contains("called twice")));
    bucketer.wait();
    RT_LOCKED(CHECK_THROWS_WITH(bucketer.add_gradient(std::span<float>(a)),
                                Contains("before the first step")));
  });
}

TEST_CASE("bucket_cap_mb must be positive", "[bucketer]") {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  auto pg = make_group(store, 0, 1);
  BucketerOptions bo;
  bo.bucket_cap_mb = 0;
  CHECK_THROWS_WITH(GradientBucketer(*pg, bo), Contains("bucket_cap_mb=0"));
}
