#include "worker_runtime/progress_reporter.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "common/progress_protocol.hpp"

namespace ddp::worker_runtime {

ProgressReporter::ProgressReporter(const std::string& path, int rank)
    : fd_(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)), rank_(rank), pid_(::getpid()) {}

ProgressReporter::~ProgressReporter() {
  if (fd_ >= 0) ::close(fd_);
}

void ProgressReporter::step(int64_t step) {
  if (fd_ < 0) return;
  step_.store(step, std::memory_order_relaxed);
  send(last_op_.load(std::memory_order_relaxed), last_seq_.load(std::memory_order_relaxed),
       last_phase_.load(std::memory_order_relaxed));
}

int64_t ProgressReporter::enter(const char* op) {
  if (fd_ < 0) return 0;
  const int64_t seq = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  send(op, seq, 1);
  return seq;
}

void ProgressReporter::exit(const char* op, int64_t seq) {
  if (fd_ < 0) return;
  // Only leaving the newest collective is news: waiting for an older async one (gradient
  // buckets are waited for in order after later ones started) would make this rank look
  // behind ranks that entered fewer collectives. The line's seq is so always the count of
  // collectives entered, which is what the agent compares.
  if (seq != seq_.load(std::memory_order_relaxed)) return;
  send(op, seq, 2);
}

void ProgressReporter::send(const char* op, int64_t seq, int phase) {
  if (op != nullptr && phase != 0) {
    last_op_.store(op, std::memory_order_relaxed);
    last_seq_.store(seq, std::memory_order_relaxed);
    last_phase_.store(phase, std::memory_order_relaxed);
  }
  progress::Report report;
  report.rank = rank_;
  report.pid = pid_;
  report.step = step_.load(std::memory_order_relaxed);
  if (op != nullptr && phase != 0) {
    report.op = op;
    report.seq = seq;
    report.phase = phase == 1 ? progress::Phase::kEnter : progress::Phase::kExit;
  }
  const std::string line = progress::format(report);
  // One write of at most PIPE_BUF bytes is atomic; EAGAIN (the agent is behind) drops it.
  const ssize_t ignored = ::write(fd_, line.data(), line.size());
  (void)ignored;
}

}  // namespace ddp::worker_runtime
