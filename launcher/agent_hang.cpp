// The agent's reactions to a hang (docs/hangs.md): turning hang detection on, a file-timer
// scope that expired, and a hung rank found by HangWatch (dump its stack, let it die, stop
// the group, restart as after any failure).
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "common/env_names.hpp"
#include "launcher/agent.hpp"

namespace ddp::launcher {

namespace {

std::string env_value(const Environment& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

// How long a dumped rank may take to print its stack and die before the group is stopped.
constexpr auto kDumpGrace = std::chrono::seconds(10);

}  // namespace

void Agent::start_hang_watch() {
  HangWatchOptions o;
  o.timeout = options_.config.hang_timeout;
  o.file_timer = env_value(options_.env, env::kEnableFileTimer) == "1";
  o.timer_file = env_value(options_.env, env::kTimerFile);
  o.run_dir = options_.run_dir;
  if (o.timeout.count() == 0 && !o.file_timer) return;
  std::filesystem::create_directories(o.run_dir);
  HangWatchCallbacks callbacks;
  callbacks.on_timer_expired = [this](const ExpiredTimer& timer) { on_timer_expired(timer); };
  callbacks.on_hang = [this](const HangReport& report, const std::vector<RankSnapshot>& all) {
    on_hang(report, all);
  };
  callbacks.warn = [this](const std::string& message) { notice("warning: " + message); };
  hang_ = std::make_unique<HangWatch>(
      io_, o, std::move(callbacks),
      options_.read_proc ? options_.read_proc : HangWatch::ProcReader(read_proc_status));
}

void Agent::on_timer_expired(const ExpiredTimer& timer) {
  auto slot = std::find_if(workers_.begin(), workers_.end(),
                           [&](const WorkerSlot& s) { return s.running && s.pid == timer.pid; });
  const double late = std::max(
      0.0,
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
          timer.expiration_time);
  const std::string sent = timer.signal == 0 ? "no signal was asked for"
                           : timer.kill_error != 0
                               ? "sending " + signal_name(timer.signal) + " failed"
                               : "sent " + signal_name(timer.signal);
  const std::string what = "file timer scope '" + timer.scope + "' expired; " + sent +
                           " (TORCHELASTIC_ENABLE_FILE_TIMER)";
  if (slot == workers_.end()) {
    notice("pid " + std::to_string(timer.pid) + ": " + what);
    return;
  }
  slot->hang = what;
  slot->culprit = true;
  notice("rank " + std::to_string(slot->rank) + " (pid " + std::to_string(slot->pid) +
         "): " + what);
  events_.record("hang", {{"rank", slot->rank},
                          {"local_rank", slot->local_rank},
                          {"pid", slot->pid},
                          {"source", "file_timer"},
                          {"scope", timer.scope},
                          {"step", -1},
                          {"seconds_late", late},
                          {"culprit", true}});
}

void Agent::on_hang(const HangReport& report, const std::vector<RankSnapshot>& all) {
  if (state_ != State::kHealthy) return;
  notice("hang detected: " + report.text);
  const std::set<int> culprits(report.culprits.begin(), report.culprits.end());
  std::vector<WorkerSlot*> dump;
  for (auto& slot : workers_) {
    if (!slot.running) continue;
    auto snap = std::find_if(all.begin(), all.end(),
                             [&](const RankSnapshot& s) { return s.rank == slot.rank; });
    const bool hung = snap != all.end() && snap->hung;
    // With nobody behind, every hung rank here is dumped: one of them is the cause.
    const bool culprit = culprits.count(slot.rank) != 0 || (culprits.empty() && hung);
    if (!hung && !culprit) continue;
    slot.hang = report.text;
    slot.culprit = culprit;
    nlohmann::json event = {{"rank", slot.rank},
                            {"local_rank", slot.local_rank},
                            {"pid", slot.pid},
                            {"culprit", culprit},
                            {"report", report.text}};
    if (snap != all.end()) {
      event["source"] = snap->has_source ? "progress" : "proc";
      event["scope"] = describe_position(*snap);
      event["step"] = snap->last.step;
      event["seconds"] = std::round(snap->silent_s * 10) / 10;
      if (snap->state != 0) event["state"] = std::string(1, snap->state);
    }
    events_.record("hang", event);
    if (culprit) dump.push_back(&slot);
  }
  if (dump.empty()) {
    // The culprit runs on another node; its agent dumps and kills it. Ours only wait for
    // it: stop them now so that the whole group restarts.
    notice("the hung rank is on another node; stopping this node's workers (pids " +
           running_pids() + ") so the group restarts");
    begin_stop(SIGTERM, [this] { after_failure(); });
    return;
  }
  for (auto* slot : dump) {
    const std::string who =
        "rank " + std::to_string(slot->rank) + " (pid " + std::to_string(slot->pid) + ")";
    auto reader = options_.read_proc ? options_.read_proc : HangWatch::ProcReader(read_proc_status);
    if (auto status = reader(slot->pid)) {
      std::string lines = who + " threads:";
      std::istringstream text(describe(*status));
      for (std::string line; std::getline(text, line);) lines += "\n  " + line;
      notice(lines);
    }
    notice(who + ": asking for its stack (SIGABRT), then stopping the group");
    spawner_.signal_process(slot->pid, SIGABRT);
    spawner_.signal_process(slot->pid, SIGCONT);  // a stopped rank handles it only once resumed
  }
  // Normally the dumped rank dies of SIGABRT and its exit stops the group; one that does not
  // (a handler that hangs too, an uninterruptible wait) is stopped with the rest.
  hang_timer_.expires_after(
      std::min<std::chrono::milliseconds>(options_.config.stop_timeout, kDumpGrace));
  hang_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || state_ != State::kHealthy) return;
    notice("the hung rank did not exit after SIGABRT; stopping the workers (pids " +
           running_pids() + ")");
    begin_stop(SIGTERM, [this] { after_failure(); });
  });
}

}  // namespace ddp::launcher
