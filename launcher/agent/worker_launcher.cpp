#include "launcher/agent/worker_launcher.hpp"

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/recovery_protocol.hpp"
#include "launcher/agent/agent_events.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {

WorkerLauncher::WorkerLauncher(const AgentOptions& options, const RoundHistory& round,
                               WorkerGroup& group, InPlaceRecovery& recovery, StandbyPool& standbys,
                               LogRouter& logs, EventLog& events, Hooks hooks)
    : options_(options),
      round_(round),
      group_(group),
      recovery_(recovery),
      standbys_(standbys),
      logs_(logs),
      events_(events),
      hooks_(std::move(hooks)) {}

void WorkerLauncher::declare_namespace() {
  if (!options_.set_worker_namespace) return;
  try {
    options_.set_worker_namespace(env::kWorkerPrefixBase + std::to_string(round_.attempt) + "/");
  } catch (const Error& e) {
    DDP_LOG_WARN(std::string("could not declare the workers' store namespace: ") + e.what());
  }
}

void WorkerLauncher::reset(size_t count) {
  slots_.assign(count, WorkerSlot{});
  for (size_t index = 0; index < count; ++index) slots_[index].local_rank = static_cast<int>(index);
  group_.reset(count);
  recovery_.reset(count);
}

void WorkerLauncher::renumber(int rank_offset) {
  for (auto& slot : slots_) slot.rank = rank_offset + slot.local_rank;
}

bool WorkerLauncher::start(size_t index) {
  auto& slot = slots_.at(index);
  slot.begin(round_.info.rank_offset + slot.local_rank,
             round_.attempt_dir(options_.run_dir) / std::to_string(slot.local_rank));
  WorkerProcessSpec spec =
      worker_spec(options_.config, options_.env, hooks_.attempt(), slot.local_rank, slot.error_file,
                  hooks_.extra_env(),
                  index < options_.bindings.size() ? options_.bindings[index] : CpuBinding{});
  // A message from an earlier group's worker (a late one, after a restart) is dropped.
  spec.channel_fd = recovery_.open_channel(
      index, [this, index, generation = round_.generation](const recovery::Message& message) {
        if (generation == round_.generation && index < slots_.size()) {
          recovery_.on_message(index, message);
        }
      });
  if (spec.channel_fd >= 0) {
    spec.env.push_back(std::string(recovery::kEnvFd) + "=" + std::to_string(recovery::kChildFd));
  }
  int pid = 0;
  try {
    pid = group_.start(index, spec,
                       routed_to(logs_, slot.local_rank, [this, index](ExitStatus status) {
                         hooks_.exited(index, status);
                       }));
  } catch (const Error& e) {
    report_spawn_failed(events_, slot, e.what());
    hooks_.start_failed(slot, e.what());
    return false;
  }
  recovery_.worker_started(index);
  report_worker_start(events_, slot, pid, round_.attempt);
  return true;
}

bool WorkerLauncher::replace(size_t index) {
  auto standby = standbys_.take();
  if (!standby) return start(index);
  auto& slot = slots_.at(index);
  slot.begin(round_.info.rank_offset + slot.local_rank,
             round_.attempt_dir(options_.run_dir) / std::to_string(slot.local_rank));
  slot.error_file = standby->error_file;  // what its environment names
  auto callbacks = group_.adopt(index, standby->pid,
                                routed_to(logs_, slot.local_rank, [this, index](ExitStatus status) {
                                  hooks_.exited(index, status);
                                }));
  standby->connect(std::move(callbacks),
                   [this, index, generation = round_.generation](const recovery::Message& message) {
                     if (generation == round_.generation && index < slots_.size()) {
                       recovery_.on_message(index, message);
                     }
                   });
  recovery_.adopt(index, std::move(standby->link), standby->hello);
  const auto waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - standby->started)
                             .count();
  report_standby_promoted(events_, slot, standby->pid, standby->hello, waited_ms);
  report_worker_start(events_, slot, standby->pid, round_.attempt);
  standbys_.fill();
  return true;
}

WorkerProcessSpec WorkerLauncher::standby_spec(const std::string& error_file) const {
  AttemptInfo attempt = hooks_.attempt();
  attempt.spare = true;
  WorkerProcessSpec spec = worker_spec(options_.config, options_.env, attempt, 0, error_file,
                                       hooks_.extra_env(), CpuBinding{});
  const std::string local_rank = std::string(env::kLocalRank) + "=";
  std::erase_if(spec.env, [&](const std::string& entry) { return entry.starts_with(local_rank); });
  spec.env.push_back(std::string(recovery::kEnvStandby) + "=1");
  return spec;
}

bool WorkerLauncher::start_all() {
  for (size_t index = 0; index < slots_.size(); ++index) {
    if (!start(index)) return false;
  }
  events_.record(
      event::kWorkersStarted,
      {{"count", slots_.size()}, {"restart_count", round_.attempt}, {"round", round_.info.round}});
  return true;
}

void WorkerLauncher::park(size_t count, const std::string& reason) {
  reset(count);
  recovery_.park(reason);
  // Their lines carry the local ranks until the node is admitted (the rank offset is 0).
  logs_.begin_attempt(static_cast<int>(count), 0, std::nullopt);
  start_all();
}

}  // namespace ddp::launcher
