#include "allreduce_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "device_buffer.hpp"
#include "worker_runtime/gradient_bucketer.hpp"

namespace ddp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using worker_runtime::DataType;
using worker_runtime::ReduceOp;

// Keeps the synthetic compute observable so the optimizer cannot remove it.
volatile float g_sink = 0;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Busy work standing in for a layer's backward kernels (a dependent FMA chain the compiler
// cannot drop).
float burn(double ms, float seed, bool off_cpu) {
  const auto t0 = Clock::now();
  if (off_cpu) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    return seed;
  }
  float x = seed;
  while (ms_since(t0) < ms) {
    for (int i = 0; i < 4096; ++i) {
      x = x * 0.999999f + 1e-7f;
    }
  }
  return x;
}

}  // namespace

void run_sizes(worker_runtime::DistContext& ctx, const SizesOptions& options) {
  auto& pg = ctx.process_group();
  const bool device = ctx.backend() == "nccl";  // NCCL reduces device memory
  for (size_t bytes : options.sizes_bytes) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> host(device ? 0 : count, 1.0f);
    DeviceBuffer dev(device ? bytes : 0);
    void* data = device ? dev.get() : static_cast<void*>(host.data());
    auto reduce = [&] { pg.all_reduce(data, count, DataType::kFloat32, ReduceOp::kSum); };
    reduce();  // warm-up (allocations, connections)
    reduce();
    // Rank 0 decides the iteration count so both ranks run the same number of collectives.
    const auto t0 = Clock::now();
    reduce();
    const double one = ms_since(t0);
    std::vector<int64_t> iters = {std::max<int64_t>(
        options.min_iters, static_cast<int64_t>(options.budget_s * 1000.0 / std::max(one, 1e-3)))};
    iters[0] = std::min<int64_t>(iters[0], 2000);
    pg.broadcast(std::span<int64_t>(iters), 0);
    std::vector<double> times;
    for (int64_t i = 0; i < iters[0]; ++i) {
      const auto start = Clock::now();
      reduce();
      times.push_back(ms_since(start));
    }
    if (ctx.rank() == 0) {
      std::printf("allreduce\t%zu\t%.4f\t%.4f\t%lld\n", bytes, median(times),
                  *std::min_element(times.begin(), times.end()), static_cast<long long>(iters[0]));
      std::fflush(stdout);
    }
  }
}

void run_overlap(worker_runtime::DistContext& ctx, const OverlapOptions& options) {
  auto& pg = ctx.process_group();
  std::vector<std::vector<float>> grads(static_cast<size_t>(options.layers),
                                        std::vector<float>(options.grad_floats, 1.0f));
  worker_runtime::BucketerOptions bo;
  bo.bucket_cap_mb = options.bucket_cap_mb;
  worker_runtime::GradientBucketer bucketer(pg, bo);
  for (auto& g : grads) {
    bucketer.add_gradient(std::span<float>(g));
  }
  float sink = 0;
  std::vector<double> comm, compute, both;
  for (int it = 0; it < options.iters; ++it) {
    pg.barrier();
    auto t0 = Clock::now();  // communication alone
    for (size_t i = 0; i < grads.size(); ++i) {
      bucketer.mark_ready(i);
    }
    bucketer.wait();
    comm.push_back(ms_since(t0));

    pg.barrier();
    t0 = Clock::now();  // backward compute alone
    for (size_t i = 0; i < grads.size(); ++i) {
      sink += burn(options.compute_ms, sink, options.off_cpu);
    }
    compute.push_back(ms_since(t0));

    pg.barrier();
    t0 = Clock::now();  // backward with buckets reduced as their gradients become ready
    for (size_t i = 0; i < grads.size(); ++i) {
      sink += burn(options.compute_ms, sink, options.off_cpu);
      bucketer.mark_ready(i);
    }
    bucketer.wait();
    both.push_back(ms_since(t0));
  }
  g_sink = sink;
  if (ctx.rank() == 0) {
    const double c = median(comm);
    const double k = median(compute);
    const double b = median(both);
    const double hidden = std::clamp((c + k - b) / c, 0.0, 1.0);
    std::printf("overlap\t%.3f\t%.3f\t%.3f\t%.3f\t%zu\n", c, k, b, hidden, bucketer.num_buckets());
    std::fflush(stdout);
  }
}

}  // namespace ddp::bench
