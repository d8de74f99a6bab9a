#include "worker_runtime/gradient_bucketer.hpp"

#include <string>

#include "common/error.hpp"

namespace ddp::worker_runtime {

struct GradientBucketer::Bucket {
  std::vector<size_t> members;  // gradient indices, in registration order
  size_t pending = 0;           // members not yet ready this step
  std::unique_ptr<Work> work;   // in flight once launched
};

GradientBucketer::GradientBucketer(ProcessGroup& group, BucketerOptions options)
    : group_(group), options_(options) {
  if (!(options.bucket_cap_mb > 0)) {
    throw ConfigError("bucket_cap_mb=" + std::to_string(options.bucket_cap_mb) +
                      " is invalid (expected > 0)");
  }
}

GradientBucketer::~GradientBucketer() {
  for (auto& bucket : buckets_) {
    if (bucket->work) {
      try {
        bucket->work->wait();
      } catch (const std::exception&) {
        // Reported by wait() when the caller asks; a destructor must not throw.
      }
    }
  }
}

size_t GradientBucketer::add_gradient(std::span<float> grad) {
  if (!buckets_.empty()) {
    throw ConfigError("add_gradient after the first mark_ready/wait: register all " +
                      std::to_string(grads_.size()) + " gradients before the first step");
  }
  grads_.push_back(grad);
  return grads_.size() - 1;
}

size_t GradientBucketer::num_buckets() const {
  if (!buckets_.empty()) {
    return buckets_.size();
  }
  // Not built yet: count what build_buckets() would make.
  const auto cap = static_cast<size_t>(options_.bucket_cap_mb * 1024 * 1024);
  size_t count = 0;
  size_t bytes = 0;
  for (const auto& g : grads_) {
    if (count == 0 || (bytes + g.size_bytes() > cap && bytes > 0)) {
      ++count;
      bytes = 0;
    }
    bytes += g.size_bytes();
  }
  return count;
}

void GradientBucketer::build_buckets() {
  // Consecutive gradients fill a bucket up to the cap; a gradient larger than the cap gets a
  // bucket of its own (as DDP's Reducer).
  const auto cap = static_cast<size_t>(options_.bucket_cap_mb * 1024 * 1024);
  size_t bytes = 0;
  bucket_of_.resize(grads_.size());
  for (size_t i = 0; i < grads_.size(); ++i) {
    const size_t size = grads_[i].size_bytes();
    if (buckets_.empty() || (bytes + size > cap && bytes > 0)) {
      buckets_.push_back(std::make_unique<Bucket>());
      bytes = 0;
    }
    buckets_.back()->members.push_back(i);
    bytes += size;
    bucket_of_[i] = buckets_.size() - 1;
  }
  for (auto& bucket : buckets_) {
    bucket->pending = bucket->members.size();
  }
  ready_.assign(grads_.size(), false);
}

void GradientBucketer::launch(Bucket& bucket) {
  std::vector<std::span<float>> buffers;
  buffers.reserve(bucket.members.size());
  for (size_t i : bucket.members) {
    buffers.push_back(grads_[i]);
  }
  bucket.work = group_.all_reduce_coalesced_async(
      std::move(buffers), options_.average ? ReduceOp::kAvg : ReduceOp::kSum, options_.timeout);
}

void GradientBucketer::mark_ready(size_t index) {
  if (buckets_.empty()) {
    build_buckets();
  }
  if (index >= grads_.size()) {
    throw ConfigError("mark_ready(" + std::to_string(index) + "): only " +
                      std::to_string(grads_.size()) + " gradients are registered");
  }
  if (ready_[index]) {
    throw ConfigError("mark_ready(" + std::to_string(index) +
                      ") called twice in one step (call wait() before the next step)");
  }
  ready_[index] = true;
  Bucket& bucket = *buckets_[bucket_of_[index]];
  if (--bucket.pending == 0) {
    launch(bucket);
    ++launched_early_;
  }
}

void GradientBucketer::wait() {
  if (buckets_.empty()) {
    build_buckets();
  }
  // Launch in bucket order so every rank issues the same sequence of collectives, even when
  // ranks skipped different mark_ready() calls.
  for (auto& bucket : buckets_) {
    if (!bucket->work) {
      launch(*bucket);
    }
  }
  std::exception_ptr first_error;
  for (auto& bucket : buckets_) {
    try {
      bucket->work->wait();
    } catch (...) {
      if (!first_error) {
        first_error = std::current_exception();
      }
    }
    bucket->work.reset();
    bucket->pending = bucket->members.size();
  }
  ready_.assign(grads_.size(), false);
  launched_early_last_ = launched_early_;
  launched_early_ = 0;
  if (first_error) {
    std::rethrow_exception(first_error);
  }
}

}  // namespace ddp::worker_runtime
