#include "launcher/agent/attempt_report.hpp"

#include <csignal>

#include "common/peer_tolerance.hpp"

namespace ddp::launcher {

JobRootCause root_cause_of(const rendezvous::FailureRecord& r) {
  JobRootCause root;
  root.attempt = r.attempt;
  root.node = r.group_rank;
  root.host = r.host;
  root.what = r.describe();
  root.rank = r.rank;
  root.local_rank = r.local_rank;
  root.pid = r.pid;
  root.exit_status = r.shell_status();
  root.time = r.time;
  root.message = r.message;
  root.traceback = r.traceback;
  return root;
}

rendezvous::FailureRecord record_of(const WorkerFailure& failure) {
  rendezvous::FailureRecord record;
  record.kind = failure.hang.empty() ? "worker" : "hang";
  record.rank = failure.rank;
  record.local_rank = failure.local_rank;
  record.pid = failure.pid;
  record.exit_code = failure.status.exit_code;
  record.signal = failure.status.signal;
  if (failure.error) {
    record.message = failure.error->message;
    record.traceback = failure.error->traceback;
  }
  if (record.message.empty() && !failure.hang.empty()) record.message = "hang: " + failure.hang;
  return record;
}

rendezvous::FailureRecord spawn_failure_record(const WorkerSlot& slot, const std::string& what) {
  rendezvous::FailureRecord record;
  record.rank = slot.rank;
  record.local_rank = slot.local_rank;
  record.exit_code = 127;
  record.message = what;
  record.final = true;
  return record;
}

rendezvous::FailureRecord unkillable_record(const WorkerSlot& slot, int pid) {
  rendezvous::FailureRecord record;
  record.kind = "unkillable";
  record.rank = slot.rank;
  record.local_rank = slot.local_rank;
  record.pid = pid;
  record.signal = SIGKILL;
  record.message = slot.hang;
  return record;
}

rendezvous::FailureRecord signal_record(int sig, int pid, const std::string& name) {
  rendezvous::FailureRecord record;
  record.kind = "agent_signal";
  record.signal = sig;
  record.pid = pid;
  record.message = name;
  return record;
}

std::string failure_kind(const rendezvous::FailureRecord& record) {
  if (record.kind != "worker") return record.kind;
  return record.signal != 0 ? "signal" : "exit";
}

std::string describe_local(const WorkerFailure& failure) {
  return "rank " + std::to_string(failure.rank) + ": " + (failure.hang.empty() ? "" : "hung, ") +
         failure.status.describe();
}

std::string store_loss_text(PeerLoss loss, std::chrono::milliseconds tolerance) {
  switch (loss) {
    case PeerLoss::kSilence:
      return "the rendezvous store, silent for longer than the peer tolerance (" +
             tolerance_text(tolerance) + ")";
    case PeerLoss::kDeath:
      return "the rendezvous store, its host closed, reset or refused the connection";
    case PeerLoss::kUnknown:
      break;
  }
  return "the rendezvous store, its connection failed";
}

std::string store_loss_advice(bool silent, bool elastic) {
  if (silent) {
    return "the job cannot go on: this node or the store host was cut off, the store has "
           "dropped this node (to the other nodes it is gone) and a static job cannot replace "
           "a node, so the job has failed on the other nodes too";
  }
  if (!elastic) {
    return "the store lived in the agent of the node that hosts it, so that node is gone, and "
           "a static job cannot replace a node; an elastic job (--nnodes MIN:MAX) outlives any "
           "one node, its store's host included: the store moves to a survivor "
           "(docs/multinode.md)";
  }
  return "the store lived in the agent of the node that hosts it, so that node is gone, and it "
         "could not move (--rdzv_conf store_succession=false, or no survivor keeps a standby "
         "store); leave store_succession on (the default) for the store to move to a survivor, "
         "or run a standalone store (ddpstore) and start every agent with --rdzv_conf "
         "is_host=false";
}

std::string cannot_restart_line(const std::string& what, int restarts_left,
                                const std::string& blocker) {
  return what + " and cannot restart (" + std::to_string(restarts_left) + " restart" +
         (restarts_left == 1 ? "" : "s") + " left, none spent): " + blocker;
}

RestartNotice restart_notice(const std::optional<rendezvous::FailureRecord>& root,
                             const std::vector<WorkerFailure>& failures, int restarts_spent,
                             int max_restarts) {
  const std::string attempt =
      std::to_string(restarts_spent) + " of " + std::to_string(max_restarts);
  RestartNotice notice;
  notice.event = {{"restarts_spent", restarts_spent}};
  if (root) {
    notice.line =
        "the job failed (" + root->describe() + "); restarting every node, attempt " + attempt;
    notice.event.update({{"failed_rank", root->rank},
                         {"failed_node", root->group_rank},
                         {"exit_code", root->exit_code},
                         {"signal", root->signal}});
  } else if (failures.empty()) {
    notice.line = "worker group stopped after a hang; restarting, attempt " + attempt;
    notice.event["reason"] = "hang";
  } else {
    const auto& failure = failures.at(root_cause_index(failures));
    notice.line =
        "worker group failed (" + describe_local(failure) + "); restarting, attempt " + attempt;
    notice.event.update({{"failed_rank", failure.rank},
                         {"exit_code", failure.status.exit_code},
                         {"signal", failure.status.signal}});
  }
  return notice;
}

GiveUpReport give_up_report(const GiveUpFacts& f) {
  GiveUpReport report;
  const auto cannot = [&](const std::string& what) {
    if (f.restart_impossible) {
      report.errors.push_back(cannot_restart_line(what, f.restarts_left, f.blocker));
    }
  };
  if (f.root) {
    const auto& root = *f.root;
    if (root.kind == "node_lost") {
      report.errors.push_back("the job cannot go on: node " + std::to_string(root.group_rank) +
                              " is gone and a static job cannot replace it (" + root.describe() +
                              ")");
    }
    cannot("the job failed (" + root.describe() + ")");
    report.summary = format_job_failure_summary(f.program, f.host, f.failures, root_cause_of(root));
    report.exit_status = root.shell_status();
    return report;
  }
  if (f.failures.empty()) {
    cannot("the worker group stopped after a hang");
    return report;
  }
  const auto& root = f.failures.at(root_cause_index(f.failures));
  cannot("worker group failed (rank " + std::to_string(root.rank) + ": " + root.status.describe() +
         ")");
  report.summary = format_failure_summary(f.program, f.host, f.failures);
  report.exit_status = root.status.shell_status();
  return report;
}

}  // namespace ddp::launcher
