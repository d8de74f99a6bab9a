#pragma once
// The all-reduce benchmark, one rank per process (started by scripts/bench/allreduce.sh
// with the torchrun env contract). Rank 0 prints one tab-separated line per measurement.
#include <cstddef>
#include <vector>

#include "worker_runtime/dist_context.hpp"

namespace ddp::bench {

struct SizesOptions {
  std::vector<size_t> sizes_bytes;  // float32 buffers of these sizes
  int min_iters = 5;                // at least this many timed runs per size
  double budget_s = 1.5;            // and about this much time per size
};

// Prints "allreduce <bytes> <median_ms> <min_ms> <iters>" per size (rank 0).
void run_sizes(worker_runtime::DistContext& ctx, const SizesOptions& options);

struct OverlapOptions {
  int layers = 8;                // synthetic layers, backward runs last to first
  size_t grad_floats = 1 << 20;  // gradient size per layer (4 MiB)
  double compute_ms = 6.0;       // synthetic backward compute per layer
  // false: busy CPU loop (CPU training: compute and communication share the cores);
  // true: sleep (models GPU kernels, which leave the CPU free for communication).
  bool off_cpu = false;
  double bucket_cap_mb = 25.0;
  int iters = 7;
};

// Prints "overlap comm_ms compute_ms both_ms hidden_share buckets" (medians, rank 0): the share of
// all-reduce time hidden behind a synthetic backward pass (busy compute per layer).
void run_overlap(worker_runtime::DistContext& ctx, const OverlapOptions& options);

}  // namespace ddp::bench
