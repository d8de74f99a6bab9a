// The agent's reactions to a hang (docs/hangs.md): turning hang detection on, a file-timer
// scope that expired, and a hung rank found by HangWatch (dump its stack, let it die, stop
// the group, restart as after any failure).
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "common/env_names.hpp"
#include "common/log.hpp"
#include "launcher/agent/agent.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {

namespace {

// How long dumped ranks may take to print their stacks and die before the group is stopped.
constexpr std::chrono::milliseconds kDumpGrace{10000};
// How long a node with only victims waits for the culprit's node to dump and kill it before
// it stops its own workers (their collectives fail once the culprit is gone anyway).
constexpr std::chrono::milliseconds kVictimGrace{5000};

}  // namespace

void Agent::start_hang_watch() {
  HangWatchOptions o;
  o.timeout = options_.config.hang_timeout;
  o.file_timer = env_value(options_.env, env::kEnableFileTimer) == "1" || o.timeout.count() > 0;
  o.timer_file = env_value(options_.env, env::kTimerFile);
  o.run_dir = options_.run_dir;
  o.timer_dump_grace = std::min(options_.config.stop_timeout, kDumpGrace);
  if (o.timeout.count() == 0 && !o.file_timer) return;
  std::filesystem::create_directories(o.run_dir);
  HangWatchCallbacks callbacks;
  callbacks.on_timer_expired = [this](const ExpiredTimer& timer) { on_timer_expired(timer); };
  callbacks.on_hang = [this](const HangReport& report, const std::vector<RankSnapshot>& all) {
    on_hang(report, all);
  };
  callbacks.warn = [](const std::string& message) { DDP_LOG_WARN("warning: " + message); };
  hang_ = std::make_unique<HangWatch>(
      io_, o, std::move(callbacks),
      options_.read_proc ? options_.read_proc : HangWatch::ProcReader(read_proc_status));
}

void Agent::on_timer_expired(const ExpiredTimer& timer) {
  auto slot = std::find_if(workers_.begin(), workers_.end(), [&](const WorkerSlot& s) {
    return group_.running(s.local_rank) && group_.pid(s.local_rank) == timer.pid;
  });
  const double late = std::max(
      0.0,
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
          timer.expiration_time);
  const bool killed = timer.signal > 0 && timer.kill_error == 0;
  const std::string sent =
      timer.signal <= 0 ? "no signal was asked for"
      : timer.stack_requested
          ? "asked for its stack (SIGABRT); " + signal_name(timer.signal) + " follows in " +
                std::to_string(std::min(options_.config.stop_timeout, kDumpGrace).count()) +
                " ms if it is still running"
      : !killed ? "sending " + signal_name(timer.signal) + " failed"
                : "sent " + signal_name(timer.signal);
  const std::string what = "file timer scope '" + timer.scope + "' expired; " + sent +
                           " (TORCHELASTIC_ENABLE_FILE_TIMER)";
  if (slot == workers_.end()) {
    DDP_LOG_WARN("pid " + std::to_string(timer.pid) + ": " + what);
    return;
  }
  DDP_LOG_WARN("rank " + std::to_string(slot->rank) + " (pid " + std::to_string(timer.pid) +
               "): " + what);
  // Only a scope that killed its rank while the group was healthy caused what follows; a
  // report-only scope, or one expiring while the group already stops, is just reported.
  const bool cause = killed && state_ == State::kHealthy;
  if (cause) {
    slot->hang = what;
    slot->culprit = true;
    // Its exit (of SIGABRT, after the stack) stops the group, as after --hang_timeout's dump.
    slot->dumping = timer.stack_requested;
  }
  events_.record(event::kHang, {{"rank", slot->rank},
                                {"local_rank", slot->local_rank},
                                {"pid", timer.pid},
                                {"source", "file_timer"},
                                {"scope", timer.scope},
                                {"step", -1},
                                {"seconds_late", late},
                                {"culprit", cause}});
}

void Agent::on_hang(const HangReport& report, const std::vector<RankSnapshot>& all) {
  if (state_ != State::kHealthy) return;
  DDP_LOG_WARN("hang detected: " + report.text);
  const std::set<int> culprits(report.culprits.begin(), report.culprits.end());
  std::vector<WorkerSlot*> dump;
  for (auto& slot : workers_) {
    if (!group_.running(slot.local_rank)) continue;
    auto snap = std::find_if(all.begin(), all.end(),
                             [&](const RankSnapshot& s) { return s.rank == slot.rank; });
    const bool hung = snap != all.end() && snap->hung;
    // With nobody behind, every hung rank here is dumped: one of them is the cause.
    const bool culprit = culprits.count(slot.rank) != 0 || (culprits.empty() && hung);
    if (!hung && !culprit) continue;
    slot.hang = culprit ? report.text : "waiting on a hung rank: " + report.text;
    slot.culprit = culprit;
    nlohmann::json event = {{"rank", slot.rank},
                            {"local_rank", slot.local_rank},
                            {"pid", group_.pid(slot.local_rank)},
                            {"culprit", culprit},
                            {"report", report.text}};
    if (snap != all.end()) {
      event["source"] = snap->has_source ? "progress" : "proc";
      event["scope"] = describe_position(*snap);
      event["step"] = snap->last.step;
      event["seconds"] = std::round(snap->silent_s * 10) / 10;
      if (snap->state != 0) event["state"] = std::string(1, snap->state);
    }
    events_.record(event::kHang, event);
    if (culprit) dump.push_back(&slot);
  }
  if (dump.empty()) {
    // The culprit runs on another node, whose agent dumps and kills it; then ours fail in
    // their collectives. Give it that long before stopping them so the group restarts.
    DDP_LOG_WARN("the hung rank is on another node; stopping this node's workers (pids " +
                 running_pids() + ") if it is not gone first");
    hang_timer_.expires_after(std::min(options_.config.stop_timeout, kVictimGrace));
    hang_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || state_ != State::kHealthy) return;
      note_failure("hang", -1);
      begin_stop(SIGTERM, StopReason::kFailure, [this] { after_failure(); });
    });
    return;
  }
  note_failure("hang", dump.front()->rank);
  auto reader = options_.read_proc ? options_.read_proc : HangWatch::ProcReader(read_proc_status);
  for (auto* slot : dump) {
    const std::string who = "rank " + std::to_string(slot->rank) + " (pid " +
                            std::to_string(group_.pid(slot->local_rank)) + ")";
    if (auto status = reader(group_.pid(slot->local_rank))) {
      std::string lines = who + " threads:";
      std::istringstream text(describe(*status));
      for (std::string line; std::getline(text, line);) lines += "\n  " + line;
      DDP_LOG_WARN(lines);
    }
    DDP_LOG_WARN(who + ": asking for its stack (SIGABRT), then stopping the group");
    slot->dumping = true;
    group_.signal_process(slot->local_rank, SIGABRT);
    group_.signal_process(slot->local_rank,
                          SIGCONT);  // a stopped rank handles it only once resumed
  }
  // Normally the dumped ranks die of SIGABRT and the last exit stops the group; one that does
  // not (a handler that hangs too, an uninterruptible wait) is stopped with the rest.
  hang_timer_.expires_after(std::min(options_.config.stop_timeout, kDumpGrace));
  hang_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || state_ != State::kHealthy) return;
    DDP_LOG_WARN("a hung rank did not exit after SIGABRT; stopping the workers (pids " +
                 running_pids() + ")");
    begin_stop(SIGTERM, StopReason::kFailure, [this] { after_failure(); });
  });
}

}  // namespace ddp::launcher
