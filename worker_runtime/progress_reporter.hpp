#pragma once
// Tells the local agent where this rank is: the training step and the collective it is in
// (kind and sequence number, entered or left), as lines of the progress protocol
// (common/progress_protocol.hpp) written to the FIFO in $DDPLAUNCH_PROGRESS_FILE. The agent
// uses them to detect a hung rank and to name the one that is behind (docs/hangs.md).
// Cost: one non-blocking write(2) per collective entered and left and per step; nothing at
// all when the agent did not ask (no env var). Never blocks, never throws: a full or
// vanished FIFO drops the line. Thread-safe (collectives may run on a comm thread).
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace ddp::worker_runtime {

class ProgressReporter {
 public:
  // Disabled: every call is a no-op.
  ProgressReporter() = default;
  // Reports as rank to the FIFO at path (opened now, non-blocking; disabled when it cannot be).
  ProgressReporter(const std::string& path, int rank);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  [[nodiscard]] bool enabled() const { return fd_ >= 0; }
  // The training loop reached step.
  void step(int64_t step);
  // A collective of kind op starts; returns its sequence number (1, 2, ... per process).
  int64_t enter(const char* op);
  // It ended; reported only when it is the newest one entered (see the .cpp).
  void exit(const char* op, int64_t seq);

 private:
  void send(const char* op, int64_t seq, int phase);

  int fd_ = -1;
  int rank_ = -1;
  int pid_ = 0;
  std::atomic<int64_t> step_{0};  // 0 until the first step (the protocol needs one)
  std::atomic<int64_t> seq_{0};   // collectives entered
  // The last collective reported (a step line repeats it, so the agent always knows it).
  std::atomic<const char*> last_op_{nullptr};
  std::atomic<int64_t> last_seq_{-1};
  std::atomic<int> last_phase_{0};
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
