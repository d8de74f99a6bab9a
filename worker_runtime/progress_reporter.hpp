#pragma once
// Tells the local agent where this rank is: the training step and the collective it is in
// (kind and sequence number, entered or left), as lines of the progress protocol
// (common/progress_protocol.hpp) written to the FIFO in $DDPLAUNCH_PROGRESS_FILE. The agent
// uses them to detect a hung rank and to name the one that is behind (docs/hangs.md).
// Cost: the training loop and the collectives only store a few atomics; a thread of the
// reporter writes one line when the position changed, every kFlushInterval, so the agent
// is woken ten times a second per rank at most, never per collective (a line per collective
// cost 30% of a small model's throughput on 2 cores: docs/benchmarks.md). A rank that stops
// has its last position on the agent's side within one interval. Nothing at all when the
// agent did not ask (no env var). Never blocks, never throws: a full or vanished FIFO drops
// the line. Thread-safe (collectives may run on a comm thread).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace ddp::worker_runtime {

class ProgressReporter {
 public:
  static constexpr std::chrono::milliseconds kFlushInterval{100};

  // Disabled: every call is a no-op.
  ProgressReporter() = default;
  // Reports as rank to the FIFO at path (opened now, non-blocking; disabled when it cannot be).
  ProgressReporter(const std::string& path, int rank);
  // Writes the last position, then stops the writer thread.
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  [[nodiscard]] bool enabled() const { return fd_ >= 0; }
  // The training loop reached step.
  void step(int64_t step);
  // A collective of kind op (a string literal) starts; returns its sequence number (1, 2, ...
  // per process).
  int64_t enter(const char* op);
  // It ended; counts only when it is the newest one entered (see the .cpp).
  void exit(const char* op, int64_t seq);
  // Writes the current position now if it changed since the last line (the thread does this
  // every kFlushInterval); for tests and shutdown.
  void flush();

 private:
  void run();

  int fd_ = -1;
  int rank_ = -1;
  int pid_ = 0;
  std::atomic<int64_t> step_{0};  // 0 until the first step (the protocol needs one)
  std::atomic<int64_t> seq_{0};   // collectives entered
  // The newest collective: op, and seq * 4 + phase (1 enter, 2 exit) in one word.
  std::atomic<const char*> last_op_{nullptr};
  std::atomic<int64_t> last_seq_phase_{0};
  std::atomic<uint64_t> version_{0};  // bumps on every change
  uint64_t written_ = 0;              // version_ of the last line (flush() under mu_)
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread writer_;
};

// Reports one collective: enter now, exit when destroyed (also when it throws).
class CollectiveScope {
 public:
  CollectiveScope(ProgressReporter* reporter, const char* op)
      : reporter_(reporter != nullptr && reporter->enabled() ? reporter : nullptr),
        op_(op),
        seq_(reporter_ != nullptr ? reporter_->enter(op) : 0) {}
  ~CollectiveScope() {
    if (reporter_ != nullptr) reporter_->exit(op_, seq_);
  }
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  ProgressReporter* reporter_;
  const char* op_;
  int64_t seq_;
};

}  // namespace ddp::worker_runtime
