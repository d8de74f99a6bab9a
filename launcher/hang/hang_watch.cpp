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
// How often this node's view is written even when unchanged: what tells the other nodes
// that this agent runs and reaches the store (HangWatchOptions::unheard_after).
constexpr std::chrono::milliseconds kBoardRefresh{1000};
// A check this much later than its interval: the agent did not run meanwhile (its node was
// paused, or it was starved), and its ranks' silence includes that time.
constexpr std::chrono::milliseconds kFrozenAfter{1000};

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
  hang_reported_ = false;
  slow_reported_ = false;
  unheard_reported_ = false;
  store_silent_since_.reset();
  last_check_.reset();
  if (file_timer_) file_timer_->clear_all();
  if (!timeout_on()) return;
  detector_.reset(rank_pids, Clock::now());
  // One board (and store connection, made on its thread) for the whole job: replacing it
  // would join its thread on this loop.
  if (!board_) board_ = std::make_unique<ProgressBoard>(std::move(connect_store), kBoardRefresh);
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
  // A check far later than its interval: this agent did not run meanwhile (its node was
  // paused with its workers), so its ranks' silence is partly its own. They report as soon
  // as they run again: judge, and publish, at the next check, not this one.
  const auto since_last = last_check_ ? now - *last_check_ : Clock::duration::zero();
  const bool frozen = since_last > check_interval(options_.timeout) + kFrozenAfter;
  last_check_ = now;
  // The /proc state of every worker: the only sign of a stopped one without a progress
  // source, and part of the report for the others.
  for (int pid : detector_.pids()) {
    auto status = read_proc_(pid);
    detector_.on_state(pid, status ? status->state : char{0}, now);
  }
  auto local = detector_.snapshot(now);
  if (frozen && detector_.any_hung(now) && !reported_ && callbacks_.warn) {
    callbacks_.warn(
        "this agent did not run for " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(since_last).count()) +
        " ms (paused, or starved of CPU), so its ranks' silence is partly its own: judged at the "
        "next check");
  }
  if (frozen) {
    // Not even published: the view is as stale as the silence, and a fresh time on it would
    // tell the other nodes that these ranks are hung now (they are about to report).
    arm();
    return;
  }
  if (hang_reported_ && !detector_.any_hung(now)) {
    // What was reported is over here: every rank moved on (or ended). A later hang is a new one.
    hang_reported_ = false;
    reported_ = false;
    if (callbacks_.on_resumed) callbacks_.on_resumed();
  }
  if (!detector_.any_hung(now) || reported_) {
    board_->publish(std::move(local));
    arm();
    return;
  }
  reported_ = true;
  std::weak_ptr<bool> alive = alive_;
  board_->collect(std::move(local), [this, alive, attempt = attempt_](BoardView view) {
    asio::post(io_, [this, alive, attempt, view = std::move(view)]() mutable {
      if (auto flag = alive.lock(); !flag || !*flag) return;
      if (attempt != attempt_ || !watching_) return;
      analyse(std::move(view));
    });
  });
}

void HangWatch::analyse(BoardView view) {
  const double timeout_s = std::chrono::duration<double>(options_.timeout).count();
  const double unheard_s = std::chrono::duration<double>(options_.unheard_after).count();
  for (auto& r : view.ranks) {
    r.hung = r.hung || (r.has_source && r.silent_s >= timeout_s);
    r.unheard = r.unheard_s >= unheard_s;
  }
  const auto report = analyze_hang(view.ranks);
  if (report.culprits.empty() && !report.slow.empty()) {
    // Waiting for a slow rank is not a hang: say so once, and keep watching.
    if (!slow_reported_ && callbacks_.warn) callbacks_.warn(report.text);
    slow_reported_ = true;
    reported_ = false;
    arm();
    return;
  }
  if (wait_on_unheard(report, view)) {
    reported_ = false;
    arm();
    return;
  }
  hang_reported_ = true;
  if (callbacks_.on_hang) callbacks_.on_hang(report, view.ranks);
  arm();  // on, to tell when this node's ranks resume
}

bool HangWatch::wait_on_unheard(const HangReport& report, const BoardView& view) {
  const auto now = Clock::now();
  const double limit_s = std::chrono::duration<double>(options_.unheard_limit).count();
  std::string what;
  if (!view.store_answered) {
    if (!store_silent_since_) store_silent_since_ = now;
    const double silent_s = std::chrono::duration<double>(now - *store_silent_since_).count();
    if (silent_s >= limit_s) return false;
    what = "the job's store does not answer this node (it may be the one cut off)";
  } else {
    store_silent_since_.reset();
    if (report.unheard.empty() || report.unheard.size() != report.culprits.size()) return false;
    double longest = 0;
    for (const auto& r : view.ranks) {
      if (std::count(report.unheard.begin(), report.unheard.end(), r.rank) != 0) {
        longest = std::max(longest, r.unheard_s);
      }
    }
    if (longest >= limit_s) return false;
    what = report.text;
  }
  if (!unheard_reported_ && callbacks_.warn) {
    callbacks_.warn("no progress, waiting on a node that is not heard from: " + what +
                    "; whether it is lost is the peer tolerance's to decide (--peer_tolerance), "
                    "and a hang only after " +
                    std::to_string(options_.unheard_limit.count() / 1000) + " s unheard");
  }
  unheard_reported_ = true;
  return true;
}

}  // namespace ddp::launcher
