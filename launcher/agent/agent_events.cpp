#include "launcher/agent/agent_events.hpp"

#include "common/log.hpp"
#include "common/peer_tolerance.hpp"
#include "launcher/agent/attempt_report.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {

void report_round(EventLog& events, const rendezvous::RendezvousInfo& info, int attempt,
                  int restarts_spent) {
  events.record(event::kRendezvous, {{"round", info.round},
                                     {"group_rank", info.group_rank},
                                     {"group_world_size", info.group_world_size},
                                     {"world_size", info.world_size},
                                     {"master_addr", info.master_addr},
                                     {"master_port", info.master_port},
                                     {"restart_count", attempt},
                                     {"restarts_spent", restarts_spent}});
  DDP_LOG_DEBUG("rendezvous round " + std::to_string(info.round) + ": group rank " +
                std::to_string(info.group_rank) + " of " + std::to_string(info.group_world_size) +
                ", world size " + std::to_string(info.world_size) + ", master " + info.master_addr +
                ":" + std::to_string(info.master_port));
}

void report_worker_start(EventLog& events, const WorkerSlot& slot, int pid, int attempt) {
  events.record(event::kWorkerStart, {{"rank", slot.rank},
                                      {"local_rank", slot.local_rank},
                                      {"pid", pid},
                                      {"restart_count", attempt}});
  DDP_LOG_DEBUG("started rank " + std::to_string(slot.rank) + " (local_rank " +
                std::to_string(slot.local_rank) + ") as pid " + std::to_string(pid));
}

void report_worker_exit(EventLog& events, const WorkerSlot& slot, int pid, ExitStatus status,
                        int attempt) {
  events.record(event::kWorkerExit, {{"rank", slot.rank},
                                     {"local_rank", slot.local_rank},
                                     {"pid", pid},
                                     {"exit_code", status.exit_code},
                                     {"signal", status.signal},
                                     {"restart_count", attempt}});
  DDP_LOG_DEBUG("rank " + std::to_string(slot.rank) + " (pid " + std::to_string(pid) +
                ") exited: " + status.describe());
}

void report_standby_promoted(EventLog& events, const WorkerSlot& slot, int pid, bool hello,
                             int64_t waited_ms) {
  events.record(event::kStandbyPromoted, {{"rank", slot.rank},
                                          {"local_rank", slot.local_rank},
                                          {"pid", pid},
                                          {"listening", hello},
                                          {"waited_ms", waited_ms}});
  DDP_LOG_INFO("rank " + std::to_string(slot.rank) + " (local_rank " +
               std::to_string(slot.local_rank) + ") is now standby worker pid " +
               std::to_string(pid) + (hello ? ", parked " : ", still starting, started ") +
               std::to_string(waited_ms) + " ms ago");
}

void report_spawn_failed(EventLog& events, const WorkerSlot& slot, const std::string& what) {
  DDP_LOG_ERROR(what);
  events.record(event::kSpawnFailed, {{"local_rank", slot.local_rank}, {"message", what}});
}

void report_unkillable(EventLog& events, const WorkerSlot& slot, const UnkillableWorker& worker) {
  const auto& status = worker.status;
  DDP_LOG_ERROR("rank " + std::to_string(slot.rank) + " (pid " + std::to_string(worker.pid) +
                ") is unkillable: still there after SIGKILL" +
                (status ? " (state " + std::string(1, status->state) + ")" : "") +
                "; no longer waiting for it" +
                (status ? "\n  " + describe(*status) : std::string()));
  events.record(event::kUnkillable, {{"rank", slot.rank},
                                     {"local_rank", slot.local_rank},
                                     {"pid", worker.pid},
                                     {"state", status ? std::string(1, status->state) : ""}});
}

void report_escaped(EventLog& events, const std::vector<std::string>& escaped, int attempt) {
  if (escaped.empty()) return;
  std::string list;
  for (const auto& process : escaped) list += (list.empty() ? "" : ", ") + process;
  DDP_LOG_WARN("killed " + std::to_string(escaped.size()) +
               " process(es) the workers had started outside their process groups (setsid, "
               "daemons), which would have outlived the job: " +
               list);
  events.record(event::kEscapedKilled, {{"processes", escaped}, {"restart_count", attempt}});
}

void report_in_place_restart(EventLog& events, const std::optional<rendezvous::FailureRecord>& root,
                             int restarts_spent, int max_restarts) {
  events.record(event::kRestart, {{"restarts_spent", restarts_spent},
                                  {"failed_rank", root ? root->rank : -1},
                                  {"failed_node", root ? root->group_rank : -1},
                                  {"in_place", true}});
  DDP_LOG_WARN("the job failed on another node (" + (root ? root->describe() : "") +
               "); re-forming in place, restart " + std::to_string(restarts_spent) + " of " +
               std::to_string(max_restarts));
}

void report_own_failure_in_place(EventLog& events, const std::vector<WorkerFailure>& failures,
                                 int restarts_spent, int max_restarts, bool standby) {
  nlohmann::json event = {{"restarts_spent", restarts_spent}, {"in_place", true}};
  std::string what = "a worker failed";
  if (!failures.empty()) {
    const auto& failure = failures.at(root_cause_index(failures));
    what = describe_local(failure);
    event.update({{"failed_rank", failure.rank},
                  {"exit_code", failure.status.exit_code},
                  {"signal", failure.status.signal}});
  }
  events.record(event::kRestart, event);
  DDP_LOG_WARN("a worker failed on this node (" + what + "); re-forming in place with " +
               (standby ? "a standby worker" : "a fresh worker") + " in its place, restart " +
               std::to_string(restarts_spent) + " of " + std::to_string(max_restarts));
}

void report_recovery_started(EventLog& events, const std::string& reason, int attempt,
                             const std::string& pids) {
  events.record(event::kRecoveryStarted, {{"reason", reason}, {"round", attempt}, {"pids", pids}});
  if (reason == "worker_failed") {  // this node's failure, said just before
    std::string line = "re-forming the group in place";
    if (pids != "none running") line += "; keeping pids " + pids;
    DDP_LOG_INFO(line);
    return;
  }
  DDP_LOG_INFO("membership changed (" + reason + "); keeping the workers (pids " + pids +
               ") and re-forming the group in place");
}

std::string signal_notice(AgentState state, bool again, const std::string& name,
                          const std::string& pids) {
  if (again) return "received " + name + " again; killing the workers now (pids " + pids + ")";
  switch (state) {
    case AgentState::kInit:
    case AgentState::kRendezvous:
      return "received " + name + " during rendezvous; shutting down";
    case AgentState::kHealthy:
      return "received " + name + "; forwarding it to the workers (pids " + pids + ")";
    case AgentState::kStopping:
      return "received " + name + " while stopping the workers; forwarding it (pids " + pids + ")";
    case AgentState::kExiting:
      return "received " + name + " while leaving the rendezvous; exiting now";
    case AgentState::kDone:
      break;
  }
  return "";
}

void report_signal(EventLog& events, AgentState state, bool again, int sig,
                   const std::string& pids) {
  const std::string name = signal_name(sig);
  events.record(event::kSignal, {{"signal", sig}, {"name", name}});
  const std::string line = signal_notice(state, again, name, pids);
  if (!line.empty()) DDP_LOG_INFO(line);
}

void report_default_omp_threads() {
  DDP_LOG_INFO(
      "setting OMP_NUM_THREADS=1 for each worker (it was unset and nproc_per_node > 1); "
      "set it yourself to tune performance");
}

void report_stepped_down(EventLog& events, const std::string& why) {
  DDP_LOG_WARN(why + "; joining the job again through the store's successor once it is heard");
  events.record(event::kStoreSilent, {{"message", why}});
}

void report_own_connection_lost(std::chrono::milliseconds tolerance) {
  DDP_LOG_ERROR(
      "the store lost this node's own connection (a network outage longer than the peer "
      "tolerance, --peer_tolerance " +
      tolerance_text(tolerance) + "): to the other nodes this node is gone");
}

void report_failed_elsewhere(const rendezvous::FailureRecord& record, const std::string& pids) {
  DDP_LOG_ERROR("the job failed on another node: " + record.describe() +
                "; stopping this node's workers (pids " + pids + ")");
}

void report_failed_after_finish(const rendezvous::FailureRecord& record, int exit_status) {
  DDP_LOG_ERROR(
      "the job failed on another node after this node's workers finished: " + record.describe() +
      "; this node exits " + std::to_string(exit_status) + " once the other nodes are out");
}

void report_spare(EventLog& events, const std::string& run_id,
                  const rendezvous::SpareNotice& notice) {
  if (notice.kind == rendezvous::SpareNotice::Kind::kJoining) return;  // said by the round
  if (notice.kind == rendezvous::SpareNotice::Kind::kStandingBy) {
    events.record(
        event::kSpare,
        {{"run_id", run_id}, {"round", notice.round}, {"group_full_at", notice.group_full_at}});
  } else {
    events.record(event::kSpareAdmitted,
                  {{"round", notice.round}, {"group_rank", notice.group_rank}});
  }
}

int report_round_error(EventLog& events, const std::string& message, bool not_needed) {
  if (not_needed) {
    // A spare (or a node that waited for room) the job ended without: nothing failed.
    DDP_LOG_INFO(message + "; exiting 0");
    events.record(event::kNotNeeded, {{"message", message}});
    return 0;
  }
  DDP_LOG_ERROR("rendezvous failed: " + message);
  events.record(event::kRendezvousFailed, {{"message", message}});
  return 1;
}

}  // namespace ddp::launcher
