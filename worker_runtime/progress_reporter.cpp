#include "worker_runtime/progress_reporter.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "common/progress_protocol.hpp"

namespace ddp::worker_runtime {

ProgressReporter::ProgressReporter(const std::string& path, int rank)
    : fd_(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)), rank_(rank), pid_(::getpid()) {
  if (fd_ >= 0) writer_ = std::thread([this] { run(); });
}

ProgressReporter::~ProgressReporter() {
  if (writer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    writer_.join();
  }
  if (fd_ >= 0) {
    flush();
    ::close(fd_);
  }
}

void ProgressReporter::step(int64_t step) {
  if (fd_ < 0) return;
  step_.store(step, std::memory_order_relaxed);
  version_.fetch_add(1, std::memory_order_release);
}

int64_t ProgressReporter::enter(const char* op) {
  if (fd_ < 0) return 0;
  const int64_t seq = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  last_op_.store(op, std::memory_order_relaxed);
  last_seq_phase_.store(seq * 4 + 1, std::memory_order_relaxed);
  version_.fetch_add(1, std::memory_order_release);
  return seq;
}

void ProgressReporter::exit(const char* op, int64_t seq) {
  if (fd_ < 0) return;
  // Only leaving the newest collective is news: waiting for an older async one (gradient
  // buckets are waited for in order after later ones started) would make this rank look
  // behind ranks that entered fewer collectives. The position's seq is so always the count
  // of collectives entered, which is what the agent compares.
  if (seq != seq_.load(std::memory_order_relaxed)) return;
  last_op_.store(op, std::memory_order_relaxed);
  last_seq_phase_.store(seq * 4 + 2, std::memory_order_relaxed);
  version_.fetch_add(1, std::memory_order_release);
}

void ProgressReporter::flush() {
  if (fd_ < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t version = version_.load(std::memory_order_acquire);
  if (version == written_) return;
  written_ = version;
  progress::Report report;
  report.rank = rank_;
  report.pid = pid_;
  report.step = step_.load(std::memory_order_relaxed);
  const int64_t seq_phase = last_seq_phase_.load(std::memory_order_relaxed);
  const char* op = last_op_.load(std::memory_order_relaxed);
  if (op != nullptr && seq_phase > 0) {
    report.op = op;
    report.seq = seq_phase / 4;
    report.phase = seq_phase % 4 == 1 ? progress::Phase::kEnter : progress::Phase::kExit;
  }
  const std::string line = progress::format(report);
  // One write of at most PIPE_BUF bytes is atomic; EAGAIN (the agent is behind) drops it.
  const ssize_t ignored = ::write(fd_, line.data(), line.size());
  (void)ignored;
}

void ProgressReporter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, kFlushInterval, [this] { return stop_; });
    lock.unlock();
    flush();
    lock.lock();
  }
}

}  // namespace ddp::worker_runtime
