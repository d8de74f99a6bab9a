#include "launcher/agent/in_place_recovery.hpp"

#include <algorithm>
#include <csignal>

#include "common/log.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace {

using Clock = std::chrono::steady_clock;

int64_t ms_between(Clock::time_point from, const std::optional<Clock::time_point>& to) {
  if (!to) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(*to - from).count();
}

}  // namespace

std::string describe_recovery(const RecoveryRecord& r) {
  if (r.from_round < 0) {  // an admission: its workers were parked, or started then
    return "admitted into round " + std::to_string(r.round) + " (" + r.reason +
           "): state received " + std::to_string(ms_between(r.noticed, r.state_sent)) +
           " ms, first step " + std::to_string(ms_between(r.noticed, r.first_step)) +
           " ms after admission; " + std::to_string(r.kept) + " worker(s) ready before, " +
           std::to_string(r.restarted) + " started then, resumed at step " + std::to_string(r.step);
  }
  return "round " + std::to_string(r.from_round) + " -> " + std::to_string(r.round) + " (" +
         r.reason + "): aborted " + std::to_string(ms_between(r.noticed, r.aborted)) +
         " ms, re-formed " + std::to_string(ms_between(r.noticed, r.reformed)) +
         " ms, state sent " + std::to_string(ms_between(r.noticed, r.state_sent)) +
         " ms, first step " + std::to_string(ms_between(r.noticed, r.first_step)) +
         " ms after it was noticed; " + std::to_string(r.kept) + " kept, " +
         std::to_string(r.restarted) + " restarted, resumed at step " + std::to_string(r.step);
}

InPlaceRecovery::InPlaceRecovery(boost::asio::io_context& io, bool enabled,
                                 std::chrono::milliseconds timeout, EventLog& events,
                                 WorkerGroup& group, Hooks hooks)
    : io_(io),
      enabled_(enabled),
      timeout_(timeout),
      events_(events),
      group_(group),
      hooks_(std::move(hooks)),
      timer_(io) {
  if (!hooks_.read_proc) hooks_.read_proc = read_proc_status;
}

void InPlaceRecovery::reset(size_t count) {
  timer_.cancel();
  under_way_ = parked_ = false;
  slots_.clear();
  slots_.resize(count);
}

int InPlaceRecovery::open_channel(size_t index, const RecoveryLink::MessageHandler& on_message) {
  auto& slot = slots_.at(index);
  slot.hello = false;
  slot.respawn_on_exit = false;
  slot.link.reset();
  if (!enabled_) return -1;
  slot.link = std::make_unique<RecoveryLink>(io_, on_message);
  return slot.link->child_fd();
}

void InPlaceRecovery::worker_started(size_t index) {
  if (auto& link = slots_.at(index).link) link->close_child_end();
}

void InPlaceRecovery::adopt(size_t index, std::unique_ptr<RecoveryLink> link, bool hello) {
  auto& slot = slots_.at(index);
  slot.link = std::move(link);
  slot.hello = hello;
  slot.respawn_on_exit = false;
  slot.notice_on_hello = !hello || under_way_;
  if (!slot.notice_on_hello) slot.link->send(hooks_.notice(index));
}

void InPlaceRecovery::park(const std::string& reason) {
  current_ = RecoveryRecord{};
  current_.reason = reason;
  current_.from_round = -1;
  under_way_ = parked_ = true;
  // Workers that do not listen within --recovery_timeout (a script without the module, one
  // stuck in its set-up) must not keep a joining node out: it asks to join anyway, and they
  // are dealt with at admission as any worker that never spoke (restarted).
  timer_.expires_after(timeout_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || !parked_) return;
    DDP_LOG_WARN(
        "not every parked worker spoke on its recovery channel within "
        "--recovery_timeout (" +
        std::to_string(timeout_.count()) + " ms); asking to be admitted anyway");
    if (hooks_.parked_ready) hooks_.parked_ready();
  });
}

void InPlaceRecovery::begin(const std::string& reason, int64_t from_round) {
  for (auto& slot : slots_) slot.notice_on_hello = false;
  current_ = RecoveryRecord{};
  current_.reason = reason;
  current_.from_round = from_round;
  current_.noticed = Clock::now();
  under_way_ = true;
  timer_.cancel();
  recovery::Message abort;
  abort.type = std::string(recovery::kAbort);
  abort.set("round", from_round).set("reason", reason);
  bool told = false;
  for (size_t index = 0; index < slots_.size(); ++index) {
    if (group_.running(index) && slots_[index].link) {
      slots_[index].link->send(abort);
      told = told || slots_[index].hello;
    }
  }
  // Nothing here listens to abort (this node's only worker failed): that phase is over at once.
  if (!told) current_.aborted = current_.noticed;
}

InPlaceRecovery::Resumed InPlaceRecovery::resume(int64_t round) {
  const bool parked = parked_;
  under_way_ = parked_ = false;
  round_ = round;
  current_.round = round;
  current_.reformed = Clock::now();
  if (parked) current_.noticed = *current_.reformed;  // the spare's admission
  for (size_t index = 0; index < slots_.size(); ++index) {
    auto& slot = slots_[index];
    if (!group_.running(index) && slot.finished) continue;
    if (!group_.running(index)) {
      slot.replaced_round = round;
      if (!hooks_.start_worker(index)) return Resumed::kStartFailed;
      continue;
    }
    if (parked && !slot.hello) {
      slot.notice_on_hello = true;  // still starting: --recovery_timeout bounds it
      continue;
    }
    // One that never opened its end of the channel cannot be told; a stopped one (SIGSTOP)
    // would not answer before --recovery_timeout, and its peers would wait for it: both are
    // restarted. (A traced one, 't', is left alone: a debugger or py-spy holds it briefly.)
    const auto status = hooks_.read_proc(group_.pid(index));
    const char* why = !slot.hello                      ? "never spoke on its recovery channel"
                      : status && status->state == 'T' ? "is stopped (SIGSTOP)"
                                                       : nullptr;
    if (why != nullptr) {
      DDP_LOG_WARN("rank " + std::to_string(hooks_.rank_of(index)) + " (pid " +
                   std::to_string(group_.pid(index)) + ") " + why +
                   "; restarting it for the new round");
      slot.respawn_on_exit = true;
      group_.signal(index, SIGKILL);
      continue;
    }
    slot.link->send(hooks_.notice(index));
  }
  if (group_.running_count() == 0) return Resumed::kAllFinished;
  const auto [kept, restarted] = kept_and_replaced(round);
  events_.record(
      event::kWorkersResumed,
      {{"round", round}, {"kept", kept}, {"restarted", restarted}, {"restart_count", round}});
  timer_.expires_after(timeout_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_timeout();
  });
  return Resumed::kRunning;
}

void InPlaceRecovery::on_message(size_t index, const recovery::Message& message) {
  auto& slot = slots_.at(index);
  try {
    if (message.type == recovery::kHello) {
      slot.hello = true;
      events_.record(event::kWorkerChannel,
                     {{"rank", hooks_.rank_of(index)}, {"pid", group_.pid(index)}});
      if (slot.notice_on_hello && !under_way_) slot.link->send(hooks_.notice(index));
      slot.notice_on_hello = false;
      if (parked_) {
        report_ready();
      } else if (hooks_.listening && all_listening()) {
        hooks_.listening();
      }
      return;
    }
    if (message.type == recovery::kAborted) {
      const int64_t from = message.integer("round");
      if (from != current_.from_round || current_.aborted) return;
      slot.aborted_round = from;
      bool all = true;
      for (size_t i = 0; i < slots_.size(); ++i) {
        all = all && (!group_.running(i) || !slots_[i].hello || slots_[i].aborted_round == from);
      }
      if (all) current_.aborted = Clock::now();
      return;
    }
    const int64_t round = message.integer("round");
    if (round != round_ || round != current_.round) return;
    if (message.type == recovery::kBuilt) {
      slot.built_round = round;
    } else if (message.type == recovery::kJoined) {
      slot.answered_round = round;
      current_.step = message.integer("step", -1);
      current_.source = static_cast<int>(message.integer("source", -1, INT32_MAX));
      current_.state_bytes = message.integer("state_bytes");
      if (all_reached(&Progress::answered_round, round)) {
        timer_.cancel();
        current_.state_sent = Clock::now();
      }
    } else if (message.type == recovery::kStepped) {
      slot.stepped_round = round;
      if (all_reached(&Progress::stepped_round, round)) {
        current_.first_step = Clock::now();
        report();
      }
    }
  } catch (const std::exception& e) {
    DDP_LOG_WARN("rank " + std::to_string(hooks_.rank_of(index)) +
                 " sent a bad recovery message: " + e.what());
  }
}

bool InPlaceRecovery::all_listening() const {
  for (size_t index = 0; index < slots_.size(); ++index) {
    if (group_.running(index) && !slots_[index].hello) return false;
  }
  return true;
}

bool InPlaceRecovery::all_reached(int64_t Progress::*field, int64_t round) const {
  return std::all_of(slots_.begin(), slots_.end(),
                     [&](const Progress& s) { return s.finished || s.*field == round; });
}

InPlaceRecovery::ExitMeaning InPlaceRecovery::on_exit(size_t index, ExitStatus status,
                                                      bool group_running, int64_t round) {
  if (!enabled_) return ExitMeaning::kNone;
  auto& slot = slots_.at(index);
  if (parked_) {
    group_.release(index);
    const bool again = slot.parked_restarts++ == 0;
    DDP_LOG_WARN("local rank " + std::to_string(index) + " exited (" + status.describe() +
                 ") while parked, before this node was admitted; " +
                 (again ? "starting it again" : "it starts again when this node is admitted"));
    // Given up on until admission: a joining node waits for it no longer.
    if (!again && hooks_.parked_ready) hooks_.parked_ready();
    return again ? ExitMeaning::kReplacedNow : ExitMeaning::kReplacedLater;
  }
  if (under_way_) {
    if (status.success()) {
      // It finished its training while the group re-formed: done, not to be started again.
      slot.finished = true;
    } else {
      // Died while the group re-forms (its collectives failed it): started afresh in the round.
      events_.record("recovery_worker_lost", {{"rank", hooks_.rank_of(index)},
                                              {"exit_code", status.exit_code},
                                              {"signal", status.signal}});
    }
    group_.release(index);
    return status.success() ? ExitMeaning::kFinished : ExitMeaning::kReplacedLater;
  }
  // A worker that had its round notice and then died (before or after it re-formed) is a
  // failure: the group forms a new round. Not replaced in this one: it may have published its
  // address for this round, and its peers dial that (docs/chaos.md, finding 4: 60 s lost).
  if (!group_running || !slot.respawn_on_exit) return ExitMeaning::kNone;
  // Killed for not speaking the protocol, or for not building its group in time: a fresh
  // worker takes its rank in this round, once (one that fails again fails the group).
  slot.replaced_round = round;
  group_.release(index);
  return ExitMeaning::kReplacedNow;
}

void InPlaceRecovery::on_timeout() {
  if (hooks_.healthy && !hooks_.healthy()) return;
  for (size_t index = 0; index < slots_.size(); ++index) {
    auto& slot = slots_[index];
    // Built its group, so it waits in the state agreement for a slower peer: left alone.
    if (!group_.running(index) || slot.built_round == round_) continue;
    const int rank = hooks_.rank_of(index);
    DDP_LOG_WARN("rank " + std::to_string(rank) + " (pid " + std::to_string(group_.pid(index)) +
                 ") did not build its group of the new round within --recovery_timeout (" +
                 std::to_string(timeout_.count()) + " ms); restarting it");
    events_.record(event::kRecoveryTimeout, {{"rank", rank}, {"pid", group_.pid(index)}});
    slot.respawn_on_exit = true;
    group_.signal(index, SIGKILL);
  }
}

void InPlaceRecovery::report_ready() {
  for (size_t index = 0; index < slots_.size(); ++index) {
    if (!group_.running(index) || !slots_[index].hello) return;
  }
  DDP_LOG_INFO("this node's " + std::to_string(slots_.size()) +
               " worker(s) are ready, parked before their first collective");
  events_.record(event::kWorkersParked, {{"count", slots_.size()}});
  if (hooks_.parked_ready) hooks_.parked_ready();
}

void InPlaceRecovery::report() {
  if (current_.reported) return;
  current_.reported = true;
  std::tie(current_.kept, current_.restarted) = kept_and_replaced(current_.round);
  const auto t0 = current_.noticed;
  events_.record(event::kInPlaceRecovery, {{"reason", current_.reason},
                                           {"from_round", current_.from_round},
                                           {"round", current_.round},
                                           {"kept", current_.kept},
                                           {"restarted", current_.restarted},
                                           {"step", current_.step},
                                           {"source", current_.source},
                                           {"state_bytes", current_.state_bytes},
                                           {"aborted_ms", ms_between(t0, current_.aborted)},
                                           {"reformed_ms", ms_between(t0, current_.reformed)},
                                           {"state_sent_ms", ms_between(t0, current_.state_sent)},
                                           {"first_step_ms", ms_between(t0, current_.first_step)}});
  DDP_LOG_INFO("in-place recovery " + describe_recovery(current_));
  completed_.push_back(current_);
}

std::pair<int, int> InPlaceRecovery::kept_and_replaced(int64_t round) const {
  int kept = 0;
  int replaced = 0;
  for (const auto& slot : slots_) {
    if (slot.finished) continue;
    const bool fresh = slot.replaced_round == round || slot.respawn_on_exit;
    ++(fresh ? replaced : kept);
  }
  return {kept, replaced};
}

std::string InPlaceRecovery::summary() const {
  if (completed_.empty()) return {};
  std::string text = std::to_string(completed_.size()) + " in-place recover" +
                     (completed_.size() == 1 ? "y" : "ies") + " (phase times since noticed):\n";
  for (const auto& r : completed_) text += "  " + describe_recovery(r) + "\n";
  return text;
}

}  // namespace ddp::launcher
