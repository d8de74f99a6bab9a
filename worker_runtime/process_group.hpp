#pragma once
// One interface over the collective backends (Gloo on CPU, NCCL on GPU).
// Data pointers are HOST memory for Gloo and DEVICE memory for NCCL (NCCL also accepts host
// pointers, staged through a device buffer: a slow path meant for small metric buffers). Every
// collective has a deadline: an explicit timeout, or the group's default
// (kDefaultCollectiveTimeout). Collectives are issued in the same order on every rank, as with any
// MPI-style library.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "worker_runtime/progress_reporter.hpp"

namespace ddp::worker_runtime {

using Duration = std::chrono::milliseconds;

// PyTorch's default process-group timeout (30 min) is too long to notice a hang; ours is 5 min.
inline constexpr Duration kDefaultCollectiveTimeout = std::chrono::minutes(5);
// Passed as a timeout: use the group's default.
inline constexpr Duration kUseDefaultTimeout = Duration::zero();

enum class ReduceOp { kSum, kAvg, kMin, kMax };
enum class DataType { kFloat32, kFloat64, kInt64 };

// "sum", "float32", ... for messages.
const char* to_string(ReduceOp op);
const char* to_string(DataType type);
// Bytes per element.
size_t element_size(DataType type);

template <class T>
constexpr DataType data_type_of() {
  if constexpr (std::is_same_v<T, float>) {
    return DataType::kFloat32;
  } else if constexpr (std::is_same_v<T, double>) {
    return DataType::kFloat64;
  } else {
    static_assert(std::is_same_v<T, int64_t>, "supported element types: float, double, int64_t");
    return DataType::kInt64;
  }
}

// Handle of an asynchronous collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished; throws CollectiveError if it failed or timed out.
  virtual void wait() = 0;
  // True once finished (successfully or not). Never blocks.
  [[nodiscard]] virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  explicit ProcessGroup(int rank, int size, Duration timeout = kDefaultCollectiveTimeout);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] Duration timeout() const { return timeout_; }
  // "gloo" or "nccl".
  [[nodiscard]] virtual std::string backend() const = 0;
  // Makes every collective in flight, and every later one, throw CollectiveError naming why,
  // promptly (well under a second), without touching the callers' buffers beyond what the
  // collective already wrote. Thread-safe (meant to be called from another thread while a
  // collective blocks), idempotent; the group is unusable afterwards but destroys cleanly.
  // In-place recovery (docs/worker_runtime.md) calls it when the membership changes.
  virtual void abort(const std::string& why) = 0;
  // Every collective called through this interface reports entering and leaving to it (an
  // async one leaves when its Work was waited for); null: nothing is reported.
  void set_progress(std::shared_ptr<ProgressReporter> progress) { progress_ = std::move(progress); }
  [[nodiscard]] ProgressReporter* progress() const { return progress_.get(); }
  [[nodiscard]] std::shared_ptr<ProgressReporter> progress_shared() const { return progress_; }

  // In place: data[0..count) becomes the reduction over ranks. kAvg divides by size()
  // (integer division for int64). Throws CollectiveError (names op, rank, timeout) on failure.
  void all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                  Duration timeout = kUseDefaultTimeout);
  // all_reduce started in the background; the buffer must stay alive and untouched until
  // wait(). Async and blocking calls run in issue order.
  std::unique_ptr<Work> all_reduce_async(void* data, size_t count, DataType type, ReduceOp op,
                                         Duration timeout = kUseDefaultTimeout);
  // Several float buffers reduced as one message (a gradient bucket); same contract as
  // all_reduce_async. Every buffer must stay alive and untouched until wait().
  std::unique_ptr<Work> all_reduce_coalesced_async(std::vector<std::span<float>> buffers,
                                                   ReduceOp op,
                                                   Duration timeout = kUseDefaultTimeout);
  // In place: every rank's data[0..count) becomes root's.
  void broadcast(void* data, size_t count, DataType type, int root,
                 Duration timeout = kUseDefaultTimeout);
  // recv[r*count .. (r+1)*count) = rank r's send[0..count); recv holds size()*count elements.
  void all_gather(const void* send, void* recv, size_t count, DataType type,
                  Duration timeout = kUseDefaultTimeout);
  // Returns once every rank has entered the barrier.
  void barrier(Duration timeout = kUseDefaultTimeout);

  // Typed conveniences over the calls above.
  template <class T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::kSum,
                  Duration timeout = kUseDefaultTimeout) {
    all_reduce(data.data(), data.size(), data_type_of<T>(), op, timeout);
  }
  template <class T>
  std::unique_ptr<Work> all_reduce_async(std::span<T> data, ReduceOp op = ReduceOp::kSum,
                                         Duration timeout = kUseDefaultTimeout) {
    return all_reduce_async(data.data(), data.size(), data_type_of<T>(), op, timeout);
  }
  template <class T>
  void broadcast(std::span<T> data, int root = 0, Duration timeout = kUseDefaultTimeout) {
    broadcast(data.data(), data.size(), data_type_of<T>(), root, timeout);
  }
  template <class T>
  void all_gather(std::span<const T> send, std::span<T> recv,
                  Duration timeout = kUseDefaultTimeout) {
    check_gather_sizes(send.size(), recv.size());
    all_gather(send.data(), recv.data(), send.size(), data_type_of<T>(), timeout);
  }

 protected:
  // Backend hooks: arguments are already checked and timeout is resolved (never zero).
  virtual std::unique_ptr<Work> do_all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                                              Duration timeout) = 0;
  // Blocking all_reduce; backends override it when they can skip the Work machinery.
  virtual void do_all_reduce_blocking(void* data, size_t count, DataType type, ReduceOp op,
                                      Duration timeout) {
    do_all_reduce(data, count, type, op, timeout)->wait();
  }
  virtual std::unique_ptr<Work> do_all_reduce_coalesced(std::vector<std::span<float>> buffers,
                                                        ReduceOp op, Duration timeout) = 0;
  virtual void do_broadcast(void* data, size_t count, DataType type, int root,
                            Duration timeout) = 0;
  virtual void do_all_gather(const void* send, void* recv, size_t count, DataType type,
                             Duration timeout) = 0;
  virtual void do_barrier(Duration timeout) = 0;

 private:
  [[nodiscard]] Duration resolve(Duration timeout) const;
  void check_gather_sizes(size_t send_count, size_t recv_count) const;

  // Wraps an async collective's Work so that waiting for it reports the exit.
  std::unique_ptr<Work> tracked(std::unique_ptr<Work> work, const char* op, int64_t seq) const;

  int rank_;
  int size_;
  Duration timeout_;
  std::shared_ptr<ProgressReporter> progress_;
};

}  // namespace ddp::worker_runtime
