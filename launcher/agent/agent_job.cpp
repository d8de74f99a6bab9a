// The agent's side of job-wide failure handling (docs/multinode.md, "When a node fails"):
// every attempt of a multi-node job has one failure record in the store; this node publishes
// its own failure there, and stops its workers as soon as any node's record appears.
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <csignal>

#include "common/log.hpp"
#include "common/peer_tolerance.hpp"
#include "launcher/agent/agent.hpp"
#include "launcher/agent/attempt_outcome.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;

namespace {

// How long a node that published its own failure waits for the record that holds (its own,
// or an earlier one from another node) before it decides alone: the publish returns it, so
// this is a store round trip normally; deciding alone risks disagreeing with the others.
constexpr std::chrono::milliseconds kRecordWait{10000};

}  // namespace

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

void Agent::start_job_watch(const rendezvous::RendezvousInfo& info) {
  info_ = info;
  awaiting_record_ = false;
  rendezvous::FailureWatchCallbacks callbacks;
  callbacks.on_failure = [this, generation = generation_](const rendezvous::FailureRecord& r) {
    asio::post(io_, [this, generation, r] { on_job_failure(generation, r); });
  };
  callbacks.on_store_lost = [this, generation = generation_](const std::string& message,
                                                             PeerLoss loss) {
    asio::post(io_, [this, generation, message, loss] {
      if (generation == generation_) on_store_lost(message, loss);
    });
  };
  if (info.members.empty()) {
    // Static: no heartbeats to name a silent peer, but a stalled WAIT slice shows the store was.
    callbacks.on_store_stall = [store = info.master_addr + ":" + std::to_string(info.master_port)](
                                   rendezvous::Duration late) {
      const rendezvous::Duration tenths((late.count() + 50) / 100 * 100);
      DDP_LOG_WARN("the store at " + store + " was silent for at least " + tolerance_text(tenths) +
                   " and came back (a network blip, or this node was paused); the workers ran on");
    };
  }
  try {
    job_link_.begin(
        info, [this] { return rendezvous_.connect_job_store(); }, std::move(callbacks));
  } catch (const StoreError& e) {
    on_store_lost(e.what(), e.loss());
  } catch (const std::exception& e) {
    on_store_lost(e.what(), PeerLoss::kUnknown);
  }
}

rendezvous::FailureRecord Agent::worker_record(const WorkerSlot& slot, ExitStatus status) const {
  rendezvous::FailureRecord record;
  record.kind = slot.hang.empty() ? "worker" : "hang";
  record.rank = slot.rank;
  record.local_rank = slot.local_rank;
  record.pid = group_.pid(slot.local_rank);
  record.exit_code = status.exit_code;
  record.signal = status.signal;
  if (!failures_.empty() && failures_.back().pid == record.pid) {
    const auto& failure = failures_.back();
    if (failure.error) {
      record.message = failure.error->message;
      record.traceback = failure.error->traceback;
    }
  }
  if (record.message.empty() && !slot.hang.empty()) record.message = "hang: " + slot.hang;
  return record;
}

void Agent::publish_failure(rendezvous::FailureRecord record) {
  const std::string kind = record.kind;
  const int rank = record.rank;
  if (!job_link_.publish(std::move(record))) return;
  events_.record(event::kFailurePublished, {{"kind", kind}, {"rank", rank}});
}

void Agent::on_job_failure(uint64_t generation, const rendezvous::FailureRecord& record) {
  if (generation != generation_ || job_link_.failure()) return;
  // Kept workers keep the generation through an in-place re-form; the round tells a record
  // of the round left behind (posted just before its watch stopped) from a current one.
  if (options_.config.in_place_recovery && record.attempt != info_.round) return;
  if (state_ == State::kExiting) {
    if (exit_status_ == 0 && record.is_failure()) job_failed_after_finish(record);
    return;
  }
  if (!record.is_failure()) {
    // The store host finished and leaves: this node's workers run on, on their own.
    store_leaving_ = true;
    store_lost_ = true;  // its exit barrier is over: there is nothing left to leave
    events_.record(event::kStoreLeaving, {{"node", record.group_rank}});
    DDP_LOG_WARN("node " + std::to_string(record.group_rank) + " (" + record.host +
                 "), which hosts the store, finished and is leaving; this node's workers run "
                 "on, but failures are no longer shared between nodes");
    if (awaiting_record_) {
      awaiting_record_ = false;
      record_timer_.cancel();
      decide_after_failure();
    }
    return;
  }
  job_link_.hold(record);
  events_.record(event::kJobFailure, {{"kind", record.kind},
                                      {"node", record.group_rank},
                                      {"rank", record.rank},
                                      {"exit_code", record.exit_code},
                                      {"signal", record.signal},
                                      {"mine", job_link_.is_mine(record)}});
  if (awaiting_record_) {
    awaiting_record_ = false;
    record_timer_.cancel();
    decide_after_failure();
    return;
  }
  if (job_link_.is_mine(record)) return;  // this node is stopping for it already
  if (record.kind == "node_lost" && record.group_rank == info_.group_rank) {
    DDP_LOG_ERROR(
        "the store lost this node's own connection (a network outage longer than the "
        "peer tolerance, --peer_tolerance " +
        tolerance_text(options_.config.peer_tolerance) + "): to the other nodes this node is gone");
  }
  if (state_ == State::kHealthy ||
      (state_ == State::kStopping &&
       (stop_reason_ == StopReason::kMembership || stop_reason_ == StopReason::kStoreSilent))) {
    note_failure(record.kind == "worker" ? (record.signal != 0 ? "signal" : "exit") : record.kind,
                 record.rank);
  }
  switch (state_) {
    case State::kHealthy:
      if (const auto outcome =
              decide_attempt(record.restartable() ? AttemptEnd::kJobFailure : AttemptEnd::kNodeGone,
                             restart_count_, options_.config.max_restarts);
          can_recover_in_place() && outcome.action == AttemptOutcome::Action::kRestart) {
        // The same count every node keeps (decide_after_failure), without stopping anything.
        restart_count_ = outcome.restarts_spent;
        events_.record(event::kRestart, {{"restarts_spent", restart_count_},
                                         {"failed_rank", record.rank},
                                         {"failed_node", record.group_rank},
                                         {"in_place", true}});
        DDP_LOG_WARN("the job failed on another node (" + record.describe() +
                     "); re-forming in place, restart " + std::to_string(restart_count_) + " of " +
                     std::to_string(options_.config.max_restarts));
        recover_in_place("job_failure");
        break;
      }
      DDP_LOG_ERROR("the job failed on another node: " + record.describe() +
                    "; stopping this node's workers (pids " + running_pids() + ")");
      begin_stop(SIGTERM, StopReason::kFailure, [this] { after_failure(); });
      break;
    case State::kStopping:
      // A re-form in progress is a failed attempt now; a signal or a failure stays as it is.
      if (stop_reason_ == StopReason::kMembership || stop_reason_ == StopReason::kStoreSilent) {
        stop_reason_ = StopReason::kFailure;
        after_stop_ = [this] { after_failure(); };
      }
      break;
    default:
      break;
  }
}

void Agent::job_failed_after_finish(const rendezvous::FailureRecord& record) {
  // An elastic job with a restart left goes on without this node: not a failure of the job.
  const bool final = info_.members.empty() || !record.restartable() ||
                     restart_count_ >= options_.config.max_restarts;
  if (!final) return;
  job_link_.hold(record);
  exit_status_ = record.shell_status();
  events_.record(event::kJobFailure, {{"kind", record.kind},
                                      {"node", record.group_rank},
                                      {"rank", record.rank},
                                      {"exit_code", record.exit_code},
                                      {"signal", record.signal},
                                      {"mine", false}});
  DDP_LOG_ERROR(
      "the job failed on another node after this node's workers finished: " + record.describe() +
      "; this node exits " + std::to_string(exit_status_) + " once the other nodes are out");
}

namespace {

// How the store was lost, from what its connection's failure says of its host: silence (no
// answer for the peer tolerance) or a death (closed, reset, refused).
std::string store_loss_cause(PeerLoss loss, std::chrono::milliseconds tolerance) {
  switch (loss) {
    case PeerLoss::kSilence:
      return "silent for longer than the peer tolerance (" + tolerance_text(tolerance) + ")";
    case PeerLoss::kDeath:
      return "its host closed, reset or refused the connection";
    case PeerLoss::kUnknown:
      break;
  }
  return "its connection failed";
}

}  // namespace

void Agent::on_store_lost(const std::string& message, PeerLoss loss) {
  if (job_link_.failure() || state_ == State::kExiting || state_ == State::kDone) return;
  if (store_leaving_) return;  // announced: not a failure
  // Already joining again after the store's silence: the other watches' errors say the same.
  if (state_ == State::kStopping && stop_reason_ == StopReason::kStoreSilent) return;
  store_cause_timer_.cancel();
  const std::string store =
      "the rendezvous store, " + store_loss_cause(loss, options_.config.peer_tolerance);
  // Silence is not a death: in an elastic job the store host may well be alive and this node
  // the one cut off. It comes back as a joining node (the others re-formed without it), and
  // only a store that stays unreachable for the join timeout ends it.
  const bool silent = loss == PeerLoss::kSilence;
  const bool elastic = options_.config.rdzv_backend.value_or("") == "c10d";
  const bool reforming = state_ == State::kStopping && stop_reason_ == StopReason::kMembership;
  if (silent && elastic && !awaiting_record_ && (state_ == State::kHealthy || reforming)) {
    DDP_LOG_WARN("lost " + store + " (" + message +
                 "): this node was cut off, or the store host was; stopping this node's "
                 "workers (pids " +
                 running_pids() + ") and joining the job again as a new node");
    events_.record(event::kStoreSilent, {{"message", message}});
    // The others found this node lost and re-formed without it: its return is a real change,
    // never a re-form with the same nodes, so no restart is spent for it (by any node).
    auto rejoin = [this] {
      reform_ = Reform::kLoss;
      start_rendezvous();
    };
    if (reforming) {
      stop_reason_ = StopReason::kStoreSilent;
      after_stop_ = rejoin;
    } else {
      begin_stop(SIGTERM, StopReason::kStoreSilent, rejoin);
    }
    return;
  }
  // Static and silent: the store dropped this node's connections too, so to the other nodes
  // this node is gone, and a static job cannot replace a node: the job failed everywhere.
  const std::string advice =
      silent ? "the job cannot go on: this node or the store host was cut off, the store has "
               "dropped this node (to the other nodes it is gone) and a static job cannot "
               "replace a node, so the job has failed on the other nodes too"
             : "the store lived in the agent of the node that hosts it, so that node is gone; to "
               "let a job outlive any one node, run a standalone store (ddpstore) and start "
               "every agent with --rdzv_conf is_host=false";
  if (awaiting_record_) {
    store_lost_ = true;
    awaiting_record_ = false;
    record_timer_.cancel();
    decide_after_failure();
    return;
  }
  switch (state_) {
    case State::kHealthy:
      store_lost_ = true;
      note_failure("store_lost", -1);
      DDP_LOG_ERROR("lost " + store + " (" + message + "): " + advice +
                    "; stopping this node's workers (pids " + running_pids() + ")");
      events_.record(event::kStoreLost, {{"message", message}});
      begin_stop(SIGTERM, StopReason::kStoreLost, [this] { finish(1); });
      break;
    case State::kStopping:
      if (stop_reason_ == StopReason::kMembership) {
        store_lost_ = true;
        DDP_LOG_ERROR("lost " + store + " (" + message + "): " + advice);
        events_.record(event::kStoreLost, {{"message", message}});
        stop_reason_ = StopReason::kStoreLost;
        after_stop_ = [this] { finish(1); };
      }
      break;
    default:
      break;
  }
}

void Agent::after_failure() {
  if (job_link_.watching() && job_link_.published() && !job_link_.failure()) {
    // The record that holds (ours, or another node's a moment earlier) is a round trip away:
    // every node must decide from the same one.
    awaiting_record_ = true;
    record_timer_.expires_after(kRecordWait);
    record_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || !awaiting_record_) return;
      awaiting_record_ = false;
      DDP_LOG_WARN("the job-wide failure record did not arrive; deciding from this node alone");
      decide_after_failure();
    });
    return;
  }
  decide_after_failure();
}

}  // namespace ddp::launcher
