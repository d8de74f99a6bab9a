#include "launcher/hang/hang_watch.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>

#include "common/env_names.hpp"
#include "common/progress_protocol.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;

namespace {

using Clock = HangDetector::Clock;

// A few checks per timeout, so a hang is found within about a fifth of it.
std::chrono::milliseconds check_interval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 5, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

}  // namespace

HangWatch::HangWatch(asio::io_context& io, HangWatchOptions options, HangWatchCallbacks callbacks,
                     ProcReader read_proc)
    : io_(io),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      read_proc_(std::move(read_proc)),
      detector_(options_.timeout),
      timer_(io) {
  if (options_.file_timer) {
    auto path = options_.timer_file.empty() ? options_.run_dir / "timer.fifo" : options_.timer_file;
    file_timer_ = std::make_unique<FileTimerServer>(io_, path, [this](const ExpiredTimer& t) {
      if (t.signal > 0 && t.kill_error == 0) detector_.forget(t.pid);  // it is dying
      if (callbacks_.on_timer_expired) callbacks_.on_timer_expired(t);
    });
    if (callbacks_.warn) file_timer_->set_warning_sink(callbacks_.warn);
    file_timer_->set_stack_dump_grace(options_.timer_dump_grace);
  }
  if (timeout_on()) {
    progress_ = std::make_unique<ProgressChannel>(
        io_, options_.run_dir / "progress.fifo",
        [this](const progress::Report& report) { detector_.on_progress(report, Clock::now()); });
    if (callbacks_.warn) progress_->set_warning_sink(callbacks_.warn);
  }
}

HangWatch::~HangWatch() {
  *alive_ = false;  // a collect still in flight must not call into a destroyed watch
}

std::vector<std::string> HangWatch::worker_env() const {
  std::vector<std::string> env;
  if (progress_)
    env.push_back(std::string(progress::kEnvProgressFile) + "=" + progress_->path().string());
  if (file_timer_) env.push_back(std::string(env::kTimerFile) + "=" + file_timer_->path().string());
  return env;
}

void HangWatch::begin_attempt(ProgressBoard::Connector connect_store, uint64_t round,
                              int group_rank, int group_world_size,
                              const std::vector<std::pair<int, int>>& rank_pids) {
  ++attempt_;
  reported_ = false;
  slow_reported_ = false;
  if (file_timer_) file_timer_->clear_all();
  if (!timeout_on()) return;
  detector_.reset(rank_pids, Clock::now());
  // One board (and store connection, made on its thread) for the whole job: replacing it
  // would join its thread on this loop.
  if (!board_) board_ = std::make_unique<ProgressBoard>(std::move(connect_store));
  board_->begin_round(round, group_rank, group_world_size);
  watching_ = true;
  arm();
}

void HangWatch::worker_exited(int pid) {
  if (file_timer_) file_timer_->clear(pid);
  detector_.forget(pid);
}

void HangWatch::end_attempt() {
  watching_ = false;
  timer_.cancel();
  if (file_timer_) file_timer_->clear_all();
}

void HangWatch::arm() {
  timer_.expires_after(check_interval(options_.timeout));
  timer_.async_wait([this, attempt = attempt_](boost::system::error_code ec) {
    if (ec || attempt != attempt_ || !watching_) return;
    check();
  });
}

void HangWatch::check() {
  const auto now = Clock::now();
  // The /proc state of every worker: the only sign of a stopped one without a progress
  // source, and part of the report for the others.
  for (int pid : detector_.pids()) {
    auto status = read_proc_(pid);
    detector_.on_state(pid, status ? status->state : char{0}, now);
  }
  auto local = detector_.snapshot(now);
  if (!detector_.any_hung(now) || reported_) {
    board_->publish(std::move(local));
    arm();
    return;
  }
  reported_ = true;
  std::weak_ptr<bool> alive = alive_;
  board_->collect(
      std::move(local), [this, alive, attempt = attempt_](std::vector<RankSnapshot> all) {
        asio::post(io_, [this, alive, attempt, all = std::move(all)]() mutable {
          if (auto flag = alive.lock(); !flag || !*flag) return;
          if (attempt != attempt_ || !watching_) return;
          const double timeout_s = std::chrono::duration<double>(options_.timeout).count();
          for (auto& r : all) r.hung = r.hung || (r.has_source && r.silent_s >= timeout_s);
          const auto report = analyze_hang(all);
          if (report.culprits.empty() && !report.slow.empty()) {
            // Waiting for a slow rank is not a hang: say so once, and keep watching.
            if (!slow_reported_ && callbacks_.warn) callbacks_.warn(report.text);
            slow_reported_ = true;
            reported_ = false;
            arm();
            return;
          }
          if (callbacks_.on_hang) callbacks_.on_hang(report, all);
        });
      });
}

}  // namespace ddp::launcher
