// DistributedSampler::set_global_start: after a world-size change mid-epoch the rest of the
// permutation is split over the new world, so steps before (W=3) and after (W=2) together
// train every index of the epoch exactly once (plus only the padding of the last split, which
// wraps to the permutation's beginning like PyTorch's).
#include <catch2/catch.hpp>
#include <map>

#include "common/error.hpp"
#include "worker_runtime/distributed_sampler.hpp"

using namespace ddp::worker_runtime;

namespace {

DistributedSampler sampler(int64_t n, int rank, int world, bool drop_last = false) {
  SamplerOptions o;
  o.dataset_size = n;
  o.rank = rank;
  o.world_size = world;
  o.seed = 7;
  o.drop_last = drop_last;
  DistributedSampler s(o);
  s.set_epoch(3);
  return s;
}

// Index -> times trained: `steps` steps of `batch` per rank at world `world` from `start`.
void train(std::map<int64_t, int>& seen, int64_t n, int world, int64_t start, int64_t steps,
           int64_t batch) {
  for (int r = 0; r < world; ++r) {
    auto s = sampler(n, r, world);
    s.set_global_start(start);
    const auto idx = s.indices();
    for (int64_t i = 0; i < std::min<int64_t>(steps * batch, std::ssize(idx)); ++i) {
      ++seen[idx[static_cast<size_t>(i)]];
    }
  }
}

}  // namespace

TEST_CASE("global start: steps at W=3 then at W=2 cover the epoch exactly once", "[sampler]") {
  const int64_t n = 24;
  const int64_t batch = 2;
  std::map<int64_t, int> seen;
  train(seen, n, 3, 0, 2, batch);  // 2 steps x 2 samples x 3 ranks = positions 0..11
  const int64_t p = sampler(n, 0, 3).global_position(2 * batch);
  CHECK(p == 12);
  train(seen, n, 2, p, 100, batch);  // the rest: 12 samples over 2 ranks, 6 each
  CHECK(std::ssize(seen) == n);
  for (const auto& [index, count] : seen) {
    INFO("index " << index);
    CHECK(count == 1);
  }
}

TEST_CASE("global start: an uneven rest pads from the permutation's beginning", "[sampler]") {
  const int64_t n = 23;
  std::map<int64_t, int> seen;
  train(seen, n, 3, 0, 1, 3);  // positions 0..8
  const int64_t p = 9;
  auto s0 = sampler(n, 0, 2);
  s0.set_global_start(p);
  CHECK(s0.num_samples() == 7);  // ceil(14 / 2)
  train(seen, n, 2, p, 100, 1);
  CHECK(std::ssize(seen) == n);  // nothing skipped
  int extra = 0;
  for (const auto& [index, count] : seen) extra += count - 1;
  CHECK(extra == 0);  // 14 over 2 ranks: no padding needed
  // 13 left over 2 ranks: one padding index, taken from the epoch's beginning (as PyTorch
  // pads), nothing of the rest is skipped.
  std::map<int64_t, int> rest;
  train(rest, n, 2, 10, 100, 1);
  CHECK(std::ssize(rest) == 14);
  auto whole = sampler(n, 0, 1).indices();
  for (int64_t i = 10; i < n; ++i) CHECK(rest.count(whole[static_cast<size_t>(i)]) == 1);
  CHECK(rest.count(whole[0]) == 1);
}

TEST_CASE("global start: bounds, reset by set_epoch, drop_last", "[sampler]") {
  auto s = sampler(10, 1, 2);
  CHECK_THROWS_AS(s.set_global_start(11), ddp::ConfigError);
  CHECK_THROWS_AS(s.set_global_start(-1), ddp::ConfigError);
  s.set_global_start(10);
  CHECK(s.indices().empty());
  CHECK(s.global_position(5) == 10);
  s.set_epoch(4);
  CHECK(s.global_start() == 0);
  CHECK(s.num_samples() == 5);
  auto d = sampler(10, 0, 3, true);
  d.set_global_start(5);  // 5 left over 3 ranks, drop_last: 1 each
  CHECK(d.indices().size() == 1);
  // Without a global start, a full epoch is unchanged (start 0 = no global start).
  auto a = sampler(10, 1, 2);
  auto b = sampler(10, 1, 2);
  b.set_global_start(0);
  CHECK(a.indices() == b.indices());
}
