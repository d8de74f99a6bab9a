#pragma once
// Bucketed gradient all-reduce overlapping the backward pass (as DDP's Reducer).
// Register each parameter's gradient buffer once, in the order backward produces them
// (usually reverse layer order). Buckets are consecutive registrations up to bucket_cap_mb.
// During backward call mark_ready(i) when gradient i is final: as soon as every gradient of
// a bucket is ready, that bucket's async all-reduce starts. Before the optimizer step call
// wait(): it launches whatever is left, waits only for what is still in flight, and leaves
// every gradient averaged over ranks.
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

struct BucketerOptions {
  double bucket_cap_mb = 25.0;  // PyTorch DDP's default
  bool average = true;          // divide by world size (DDP semantics)
  Duration timeout = kUseDefaultTimeout;
};

class GradientBucketer {
 public:
  GradientBucketer(ProcessGroup& group, BucketerOptions options = {});
  ~GradientBucketer();  // waits for in-flight work (errors swallowed: wait() reports them)
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  // Registers one gradient buffer (host memory for Gloo, device for NCCL); returns its index.
  // Must be called before the first mark_ready(); the buffer must outlive the bucketer.
  size_t add_gradient(std::span<float> grad);
  // Gradient `index` is final for this step; launches its bucket when the bucket is full.
  // ConfigError on an unknown index or a gradient marked twice in one step.
  void mark_ready(size_t index);
  // Launches unlaunched buckets, waits for all, and resets for the next step.
  void wait();

  [[nodiscard]] size_t num_buckets() const;
  [[nodiscard]] size_t num_gradients() const { return grads_.size(); }
  // Buckets launched from mark_ready() (before wait()) in the last completed step.
  [[nodiscard]] size_t buckets_launched_early() const { return launched_early_last_; }

 private:
  struct Bucket;
  void build_buckets();
  void launch(Bucket& bucket);

  ProcessGroup& group_;
  BucketerOptions options_;
  std::vector<std::span<float>> grads_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_;  // gradient index -> bucket index
  std::vector<bool> ready_;
  size_t launched_early_ = 0;
  size_t launched_early_last_ = 0;
};

}  // namespace ddp::worker_runtime
