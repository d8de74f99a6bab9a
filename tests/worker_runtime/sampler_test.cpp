#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "tests/support/python.hpp"
#include "worker_runtime/distributed_sampler.hpp"

using namespace ddp::worker_runtime;
using Catch::Matchers::Contains;

namespace {

std::vector<int64_t> indices_of(int64_t n, int rank, int world, bool shuffle, bool drop_last,
                                uint64_t seed = 0, int64_t epoch = 0) {
  SamplerOptions o;
  o.dataset_size = n;
  o.rank = rank;
  o.world_size = world;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = seed;
  DistributedSampler s(o);
  s.set_epoch(epoch);
  return s.indices();
}

std::string join(const std::vector<int64_t>& v) {
  std::string out;
  for (auto x : v) {
    out += (out.empty() ? "" : ",") + std::to_string(x);
  }
  return out;
}

}  // namespace

TEST_CASE("shuffle=false index lists equal torch.utils.data.DistributedSampler's",
          "[sampler][pytorch]") {
  if (!ddp::test::python_can_import("torch")) {
    // Real PyTorch is part of the suite (scripts/setup.sh installs it): never a silent skip.
    FAIL("/usr/bin/python3 cannot import torch: run scripts/setup.sh (python3-torch)");
  }
  struct Case {
    int64_t n;
    int world;
    bool drop_last;
  };
  const std::vector<Case> cases = {{10, 3, false}, {10, 3, true}, {10, 4, false}, {2, 5, false},
                                   {12, 4, true},  {7, 2, true},  {1, 3, false},  {100, 7, false},
                                   {100, 7, true}, {5, 5, false}};
  // One python run for every case and rank (startup of torch costs a second).
  std::ostringstream script;
  script << "import torch.utils.data as d\n"
         << "for n, w, dl in [";
  for (const auto& c : cases) {
    script << "(" << c.n << "," << c.world << "," << (c.drop_last ? "True" : "False") << "),";
  }
  script << "]:\n"
         << "  for r in range(w):\n"
         << "    s = d.DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=False, "
            "drop_last=dl)\n"
         << "    print(n, w, dl, r, len(s), ','.join(map(str, list(iter(s)))))\n";
  const auto run = ddp::test::run_python({"-c", script.str()}, std::chrono::seconds(120));
  REQUIRE(run.exit_code == 0);
  const std::string& out = run.output;
  std::istringstream lines(out);
  std::string n, w, dl, r, len, list;
  int checked = 0;
  while (lines >> n >> w >> dl >> r >> len) {
    std::getline(lines, list);
    list.erase(0, list.find_first_not_of(' '));
    const auto mine = indices_of(std::stoll(n), std::stoi(r), std::stoi(w), false, dl == "True");
    INFO("N=" << n << " world=" << w << " drop_last=" << dl << " rank=" << r);
    CHECK(join(mine) == list);
    CHECK(static_cast<int64_t>(mine.size()) == std::stoll(len));
    ++checked;
  }
  int expected = 0;
  for (const auto& c : cases) {
    expected += c.world;
  }
  CHECK(checked == expected);
}

TEST_CASE("shuffled epochs partition the (padded) dataset and every rank agrees", "[sampler]") {
  const int64_t n = GENERATE(10, 97, 1000);
  const int world = GENERATE(1, 3, 4);
  for (int64_t epoch : {0, 1, 2}) {
    std::map<int64_t, int> seen;
    std::vector<std::vector<int64_t>> per_rank;
    for (int r = 0; r < world; ++r) {
      per_rank.push_back(indices_of(n, r, world, true, false, 1234, epoch));
      for (auto i : per_rank.back()) {
        REQUIRE(i >= 0);
        REQUIRE(i < n);
        ++seen[i];
      }
      CHECK(per_rank.back().size() == per_rank[0].size());
    }
    // Every sample appears; only the padding (total - n) appears twice.
    CHECK(static_cast<int64_t>(seen.size()) == n);
    int64_t extra = 0;
    for (const auto& [i, count] : seen) {
      extra += count - 1;
    }
    const int64_t total = (n + world - 1) / world * world;
    CHECK(extra == total - n);
    // Agreement: recomputing gives the same list (no hidden per-process state).
    CHECK(indices_of(n, world - 1, world, true, false, 1234, epoch) == per_rank.back());
  }
  // Different epochs give different orders (for more than a handful of samples).
  if (n >= 97) {
    CHECK(indices_of(n, 0, world, true, false, 1234, 0) !=
          indices_of(n, 0, world, true, false, 1234, 1));
    CHECK(indices_of(n, 0, world, true, false, 1234, 0) !=
          indices_of(n, 0, world, true, false, 99, 0));
  }
}

TEST_CASE("drop_last with shuffle keeps disjoint, equal shares", "[sampler]") {
  std::set<int64_t> all;
  for (int r = 0; r < 4; ++r) {
    auto v = indices_of(10, r, 4, true, true, 7, 3);
    CHECK(v.size() == 2);
    all.insert(v.begin(), v.end());
  }
  CHECK(all.size() == 8);
}

TEST_CASE("a resumed epoch continues where it stopped", "[sampler]") {
  SamplerOptions o;
  o.dataset_size = 50;
  o.rank = 1;
  o.world_size = 3;
  o.seed = 5;
  DistributedSampler s(o);
  s.set_epoch(2);
  const auto full = s.indices();
  s.set_start(7);
  const auto rest = s.indices();
  REQUIRE(rest.size() == full.size() - 7);
  CHECK(std::equal(rest.begin(), rest.end(), full.begin() + 7));
  s.set_start(s.num_samples());
  CHECK(s.indices().empty());
  s.set_epoch(3);  // a new epoch starts from its beginning
  CHECK(s.start() == 0);
  CHECK_THROWS_WITH(s.set_start(18), Contains("start position 18") && Contains("0..17"));
}

TEST_CASE("sampler options are checked", "[sampler]") {
  SamplerOptions o;
  o.dataset_size = 10;
  o.world_size = 2;
  o.rank = 2;
  CHECK_THROWS_WITH(DistributedSampler(o), Contains("rank 2 of world size 2"));
  o.rank = 0;
  o.dataset_size = -1;
  CHECK_THROWS_AS(DistributedSampler(o), ddp::ConfigError);
  o.dataset_size = 1;
  o.drop_last = true;
  CHECK_THROWS_WITH(DistributedSampler(o), Contains("smaller than world size 2"));
}
