#include "worker_runtime/process_group.hpp"

#include "common/error.hpp"

namespace ddp::worker_runtime {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

const char* to_string(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt64:
      return "int64";
  }
  return "?";
}

size_t element_size(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
  }
  return 0;
}

ProcessGroup::ProcessGroup(int rank, int size, Duration timeout)
    : rank_(rank), size_(size), timeout_(timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw ConfigError("process group rank " + std::to_string(rank) + " of size " +
                      std::to_string(size) + " is invalid (expected 0 <= rank < size)");
  }
  if (timeout <= Duration::zero()) {
    throw ConfigError("process group timeout " + std::to_string(timeout.count()) +
                      " ms is invalid (expected > 0)");
  }
}

Duration ProcessGroup::resolve(Duration timeout) const {
  return timeout == kUseDefaultTimeout ? timeout_ : timeout;
}

void ProcessGroup::check_gather_sizes(size_t send_count, size_t recv_count) const {
  if (recv_count != send_count * static_cast<size_t>(size_)) {
    throw ConfigError("all_gather receive buffer holds " + std::to_string(recv_count) +
                      " elements, expected " + std::to_string(send_count) + " x " +
                      std::to_string(size_) + " ranks");
  }
}

namespace {

// An async collective's Work that reports the exit once waited for (one dropped unwaited may
// still be in flight: it reports nothing).
class TrackedWork final : public Work {
 public:
  TrackedWork(std::unique_ptr<Work> inner, std::shared_ptr<ProgressReporter> progress,
              const char* op, int64_t seq)
      : inner_(std::move(inner)), progress_(std::move(progress)), op_(op), seq_(seq) {}
  ~TrackedWork() override = default;
  TrackedWork(const TrackedWork&) = delete;
  TrackedWork& operator=(const TrackedWork&) = delete;
  void wait() override {
    inner_->wait();
    report();
  }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  void report() {
    if (!reported_) progress_->exit(op_, seq_);
    reported_ = true;
  }
  std::unique_ptr<Work> inner_;
  std::shared_ptr<ProgressReporter> progress_;  // outlives the group if need be
  const char* op_;
  int64_t seq_;
  bool reported_ = false;
};

}  // namespace

std::unique_ptr<Work> ProcessGroup::tracked(std::unique_ptr<Work> work, const char* op,
                                            int64_t seq) const {
  return std::make_unique<TrackedWork>(std::move(work), progress_, op, seq);
}

void ProcessGroup::all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                              Duration timeout) {
  CollectiveScope scope(progress_.get(), "all_reduce");
  do_all_reduce_blocking(data, count, type, op, resolve(timeout));
}

std::unique_ptr<Work> ProcessGroup::all_reduce_async(void* data, size_t count, DataType type,
                                                     ReduceOp op, Duration timeout) {
  if (progress_ == nullptr || !progress_->enabled()) {
    return do_all_reduce(data, count, type, op, resolve(timeout));
  }
  const int64_t seq = progress_->enter("all_reduce");
  return tracked(do_all_reduce(data, count, type, op, resolve(timeout)), "all_reduce", seq);
}

std::unique_ptr<Work> ProcessGroup::all_reduce_coalesced_async(
    std::vector<std::span<float>> buffers, ReduceOp op, Duration timeout) {
  if (progress_ == nullptr || !progress_->enabled()) {
    return do_all_reduce_coalesced(std::move(buffers), op, resolve(timeout));
  }
  const int64_t seq = progress_->enter("all_reduce");
  return tracked(do_all_reduce_coalesced(std::move(buffers), op, resolve(timeout)), "all_reduce",
                 seq);
}

void ProcessGroup::broadcast(void* data, size_t count, DataType type, int root, Duration timeout) {
  if (root < 0 || root >= size_) {
    throw ConfigError("broadcast root " + std::to_string(root) + " is not a rank (expected 0.." +
                      std::to_string(size_ - 1) + ")");
  }
  CollectiveScope scope(progress_.get(), "broadcast");
  do_broadcast(data, count, type, root, resolve(timeout));
}

void ProcessGroup::all_gather(const void* send, void* recv, size_t count, DataType type,
                              Duration timeout) {
  CollectiveScope scope(progress_.get(), "all_gather");
  do_all_gather(send, recv, count, type, resolve(timeout));
}

void ProcessGroup::barrier(Duration timeout) {
  CollectiveScope scope(progress_.get(), "barrier");
  do_barrier(resolve(timeout));
}

}  // namespace ddp::worker_runtime
