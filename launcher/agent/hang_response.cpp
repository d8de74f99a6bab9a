#include "launcher/agent/hang_response.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <set>
#include <sstream>

#include "common/log.hpp"
#include "launcher/output/event_names.hpp"
#include "launcher/process/exit_status.hpp"

namespace ddp::launcher {
namespace {

// How long dumped ranks may take to print their stacks and die before the group is stopped.
constexpr std::chrono::milliseconds kDumpGrace{10000};
// How long a node with only victims waits for the culprit's node to dump and kill it before
// it stops its own workers (their collectives fail once the culprit is gone anyway).
constexpr std::chrono::milliseconds kVictimGrace{5000};
// How much longer than the peer tolerance ranks wait on a node unheard before it is a hang:
// a node silent for the tolerance is counted out within a heartbeat and a few seconds more
// (the rendezvous' lease, the store's TCP timeout), which ends the attempt first.
constexpr std::chrono::milliseconds kUnheardMargin{10000};

}  // namespace

HangResponse::HangResponse(boost::asio::io_context& io, HangResponseOptions options,
                           EventLog& events, WorkerGroup& group, std::vector<WorkerSlot>& slots,
                           Hooks hooks)
    : options_(std::move(options)),
      events_(events),
      group_(group),
      slots_(slots),
      hooks_(std::move(hooks)),
      timer_(io) {
  if (options_.hang_timeout.count() == 0 && !options_.file_timer) return;
  if (!options_.read_proc) options_.read_proc = read_proc_status;
  HangWatchOptions o;
  o.timeout = options_.hang_timeout;
  // --hang_timeout serves the file timer too (TORCHELASTIC_ENABLE_FILE_TIMER=1 turns it on alone).
  o.file_timer = options_.file_timer || o.timeout.count() > 0;
  o.timer_file = options_.timer_file;
  o.run_dir = options_.run_dir;
  o.timer_dump_grace = std::min(options_.stop_timeout, kDumpGrace);
  o.unheard_limit = options_.peer_tolerance + kUnheardMargin;
  std::filesystem::create_directories(o.run_dir);
  HangWatchCallbacks callbacks;
  callbacks.on_timer_expired = [this](const ExpiredTimer& timer) { on_timer_expired(timer); };
  callbacks.on_hang = [this](const HangReport& report, const std::vector<RankSnapshot>& all) {
    on_hang(report, all);
  };
  callbacks.on_resumed = [this] { on_resumed(); };
  callbacks.warn = [](const std::string& message) { DDP_LOG_WARN("warning: " + message); };
  watch_ = std::make_unique<HangWatch>(io, o, std::move(callbacks), options_.read_proc);
}

std::vector<std::string> HangResponse::worker_env() const {
  return watch_ ? watch_->worker_env() : std::vector<std::string>{};
}

void HangResponse::begin(ProgressBoard::Connector connect, uint64_t round, int group_rank,
                         int group_world_size) {
  // A worker kept through an in-place re-form starts the round with nothing said of it.
  forget_hang_reports();
  if (!watch_) return;
  std::vector<std::pair<int, int>> rank_pids;
  for (const auto& slot : slots_) rank_pids.emplace_back(slot.rank, group_.pid(slot.local_rank));
  watch_->begin_attempt(std::move(connect), round, group_rank, group_world_size, rank_pids);
}

void HangResponse::worker_exited(int pid) {
  if (watch_) watch_->worker_exited(pid);
}

void HangResponse::end() {
  if (watch_) watch_->end_attempt();
  timer_.cancel();
  victims_waiting_ = false;
}

bool HangResponse::dumps_pending() const {
  return std::any_of(slots_.begin(), slots_.end(), [this](const WorkerSlot& s) {
    return group_.running(static_cast<size_t>(s.local_rank)) && s.dumping;
  });
}

void HangResponse::stop_after(std::chrono::milliseconds grace, std::function<std::string()> line) {
  timer_.expires_after(grace);
  timer_.async_wait([this, line = std::move(line)](boost::system::error_code ec) {
    if (ec || !hooks_.healthy()) return;
    if (const std::string said = line(); !said.empty()) DDP_LOG_WARN(said);
    hooks_.stop_group();
  });
}

void HangResponse::forget_hang_reports() {
  // A victim's "waiting on a hung rank" is over once its ranks moved on or the group
  // re-formed, and would otherwise describe a later, unrelated exit (a crash reported as a
  // hang). One still dumping its stack keeps what it was named for its exit's report.
  for (auto& slot : slots_) {
    if (slot.dumping) continue;
    slot.hang.clear();
    slot.culprit = false;
  }
}

void HangResponse::on_resumed() {
  if (!victims_waiting_ || !hooks_.healthy()) return;
  victims_waiting_ = false;
  timer_.cancel();
  forget_hang_reports();
  DDP_LOG_WARN(
      "this node's ranks made progress again before the hung rank's node acted: "
      "keeping the workers (pids " +
      group_.running_pids() + ")");
}

void HangResponse::on_timer_expired(const ExpiredTimer& timer) {
  auto slot = std::find_if(slots_.begin(), slots_.end(), [&](const WorkerSlot& s) {
    return group_.running(static_cast<size_t>(s.local_rank)) &&
           group_.pid(static_cast<size_t>(s.local_rank)) == timer.pid;
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
                std::to_string(std::min(options_.stop_timeout, kDumpGrace).count()) +
                " ms if it is still running"
      : !killed ? "sending " + signal_name(timer.signal) + " failed"
                : "sent " + signal_name(timer.signal);
  const std::string what = "file timer scope '" + timer.scope + "' expired; " + sent +
                           " (TORCHELASTIC_ENABLE_FILE_TIMER)";
  if (slot == slots_.end()) {
    DDP_LOG_WARN("pid " + std::to_string(timer.pid) + ": " + what);
    return;
  }
  DDP_LOG_WARN("rank " + std::to_string(slot->rank) + " (pid " + std::to_string(timer.pid) +
               "): " + what);
  // Only a scope that killed its rank while the group was healthy caused what follows; a
  // report-only scope, or one expiring while the group already stops, is just reported.
  const bool cause = killed && hooks_.healthy();
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

void HangResponse::on_hang(const HangReport& report, const std::vector<RankSnapshot>& all) {
  if (!hooks_.healthy()) return;
  DDP_LOG_WARN("hang detected: " + report.text);
  const std::set<int> culprits(report.culprits.begin(), report.culprits.end());
  std::vector<WorkerSlot*> dump;
  for (auto& slot : slots_) {
    const auto index = static_cast<size_t>(slot.local_rank);
    if (!group_.running(index)) continue;
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
                            {"pid", group_.pid(index)},
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
                 group_.running_pids() + ") if it is not gone first");
    victims_waiting_ = true;
    stop_after(std::min(options_.stop_timeout, kVictimGrace), [this] {
      victims_waiting_ = false;
      hooks_.note_hang(-1);
      return std::string();
    });
    return;
  }
  hooks_.note_hang(dump.front()->rank);
  for (auto* slot : dump) {
    const auto index = static_cast<size_t>(slot->local_rank);
    const std::string who =
        "rank " + std::to_string(slot->rank) + " (pid " + std::to_string(group_.pid(index)) + ")";
    if (auto status = options_.read_proc(group_.pid(index))) {
      std::string lines = who + " threads:";
      std::istringstream text(describe(*status));
      for (std::string line; std::getline(text, line);) lines += "\n  " + line;
      DDP_LOG_WARN(lines);
    }
    DDP_LOG_WARN(who + ": asking for its stack (SIGABRT), then stopping the group");
    slot->dumping = true;
    group_.signal_process(index, SIGABRT);
    group_.signal_process(index, SIGCONT);  // a stopped rank handles it only once resumed
  }
  // Normally the dumped ranks die of SIGABRT and the last exit stops the group; one that does
  // not (a handler that hangs too, an uninterruptible wait) is stopped with the rest.
  stop_after(std::min(options_.stop_timeout, kDumpGrace), [this] {
    return "a hung rank did not exit after SIGABRT; stopping the workers (pids " +
           group_.running_pids() + ")";
  });
}

}  // namespace ddp::launcher
