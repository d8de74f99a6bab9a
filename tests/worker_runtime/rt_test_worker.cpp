// A native worker for the multi-process tests: joins the job through init() and runs one
// scenario (argv[1]). Prints "RESULT <key> <value>" lines the tests compare across ranks.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

#include "worker_runtime/dist_context.hpp"
#include "worker_runtime/error_file.hpp"
#include "worker_runtime/metrics.hpp"

using namespace ddp::worker_runtime;
using namespace std::chrono_literals;

namespace {

void expect(bool ok, const std::string& what) {
  if (!ok) {
    throw std::runtime_error("check failed: " + what);
  }
}

int collectives(DistContext& ctx) {
  ProcessGroup& pg = ctx.process_group();
  const int w = ctx.world_size();
  const int r = ctx.rank();
  std::vector<float> f(4096, static_cast<float>(r + 1));
  pg.all_reduce(std::span<float>(f), ReduceOp::kSum);
  expect(f[4095] == static_cast<float>(w * (w + 1) / 2), "float sum");
  std::vector<double> d = {static_cast<double>(r)};
  pg.all_reduce(std::span<double>(d), ReduceOp::kAvg);
  expect(d[0] == (w - 1) / 2.0, "double avg");
  std::vector<int64_t> mx = {r * 7};
  pg.all_reduce(std::span<int64_t>(mx), ReduceOp::kMax);
  expect(mx[0] == (w - 1) * 7, "int64 max");
  std::vector<int64_t> mn = {r + 5};
  pg.all_reduce(std::span<int64_t>(mn), ReduceOp::kMin);
  expect(mn[0] == 5, "int64 min");
  // From rank 1, or rank 0 in a world of one (the GPU run's NCCL group: scripts/gpu/run.sh).
  const int root = std::min(1, w - 1);
  std::vector<int64_t> b = {r == root ? 99 : 0};
  pg.broadcast(std::span<int64_t>(b), root);
  expect(b[0] == 99, "broadcast from rank " + std::to_string(root));
  std::vector<int64_t> all(static_cast<size_t>(w));
  const int64_t mine = r * r;
  pg.all_gather(std::span<const int64_t>(&mine, 1), std::span<int64_t>(all));
  for (int i = 0; i < w; ++i) {
    expect(all[static_cast<size_t>(i)] == i * i, "all_gather slot " + std::to_string(i));
  }
  pg.barrier();
  std::cout << "RESULT sum " << f[0] << "\nRESULT gathered";
  for (auto v : all) {
    std::cout << ' ' << v;
  }
  std::cout << "\nRESULT backend " << ctx.backend() << std::endl;
  return 0;
}

int metrics(DistContext& ctx) {
  // Rank r saw r+1 samples with loss 0.5*(r+1) each and got r of them right.
  MetricAccumulator m;
  const double n = ctx.rank() + 1;
  m.add("loss", 0.5 * n * n, n);
  m.add("accuracy", ctx.rank(), n);
  const auto global = m.reduce(ctx.process_group());
  char line[128];
  std::snprintf(line, sizeof(line), "RESULT loss %.17g\nRESULT accuracy %.17g\n",
                global.at("loss").mean(), global.at("accuracy").mean());
  std::cout << line << std::flush;
  return 0;
}

// Rank 1 stays connected but skips the all-reduce; rank 0's must time out, not hang.
int hang(DistContext& ctx) {
  if (ctx.rank() == 1) {
    ctx.store().wait({"released"}, 60s);
    return 0;
  }
  std::vector<float> v(16, 1.0f);
  try {
    ctx.process_group().all_reduce(std::span<float>(v), ReduceOp::kSum, 1s);
  } catch (...) {
    ctx.store().set("released", "1");
    throw;
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) {
    throw std::invalid_argument("usage: rt_test_worker collectives|metrics|hang|throw|segv");
  }
  const std::string scenario = argv[1];
  if (scenario == "throw") {
    throw std::runtime_error("boom from rank " + std::string(std::getenv("RANK")));
  }
  if (scenario == "segv") {
    std::raise(SIGSEGV);
    return 0;
  }
  InitOptions options;
  options.store_timeout = std::chrono::milliseconds(
      argc > 2 ? std::stoll(argv[2]) : 30000);  // 3rd argument: store/connect timeout in ms
  auto ctx = init(options);
  if (scenario == "collectives") {
    return collectives(*ctx);
  }
  if (scenario == "metrics") {
    return metrics(*ctx);
  }
  if (scenario == "hang") {
    return hang(*ctx);
  }
  throw std::invalid_argument("unknown scenario '" + scenario + "'");
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, run);
}
