#include "launcher/agent/attempt_failures.hpp"

#include <algorithm>
#include <utility>

#include "common/log.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {

AttemptFailures::AttemptFailures(boost::asio::io_context& io, EventLog& events,
                                 std::chrono::milliseconds window)
    : events_(events), window_(window), timer_(io) {}

void AttemptFailures::reset() {
  close_window();
  failures_.clear();
  root_ = 0;
  noted_ = false;
}

void AttemptFailures::note(const std::string& kind, int rank, int attempt) {
  if (noted_) return;
  noted_ = true;
  events_.record(event::kFailure, {{"kind", kind}, {"rank", rank}, {"restart_count", attempt}});
}

void AttemptFailures::add(WorkerFailure failure) {
  failures_.push_back(std::move(failure));
}

void AttemptFailures::mark_root() {
  root_ = failures_.empty() ? 0 : failures_.size() - 1;
}

const WorkerFailure& AttemptFailures::root() const {
  return failures_.at(std::min(root_, failures_.size() - 1));
}

void AttemptFailures::wait_for_loss(std::function<void()> on_expired) {
  waiting_ = true;
  timer_.expires_after(window_);
  timer_.async_wait([this, on_expired = std::move(on_expired)](boost::system::error_code ec) {
    if (ec || !waiting_) return;
    waiting_ = false;
    on_expired();
  });
}

bool AttemptFailures::absorb_loss() {
  if (!waiting_) return false;
  close_window();
  const auto first = std::min(root_, failures_.size());
  if (first < failures_.size()) {
    DDP_LOG_WARN("rank " + std::to_string(failures_[first].rank) + " failed (" +
                 failures_[first].status.describe() +
                 ") just before another node was found lost: taken for the loss's doing, no "
                 "restart spent");
    events_.record(event::kFailureFromLoss, {{"rank", failures_[first].rank}});
  }
  failures_.erase(failures_.begin() + static_cast<std::ptrdiff_t>(first), failures_.end());
  return true;
}

void AttemptFailures::close_window() {
  waiting_ = false;
  timer_.cancel();
}

}  // namespace ddp::launcher
