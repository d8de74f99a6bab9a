#pragma once
// The names of the events the agent records (--events_file, one JSON object per line, field
// "event"; docs/operations.md) and the metrics view reads back (health/metrics_view.cpp): one
// spelling for both sides.
namespace ddp::launcher::event {

// processes the workers started outside their groups were killed
inline constexpr char kEscapedKilled[] = "escaped_killed";
// what stopped the group, once per attempt (kind: exit, signal, hang, node_lost, ...)
inline constexpr char kFailure[] = "failure";
// a worker failure taken for a lost node's doing (no restart spent)
inline constexpr char kFailureFromLoss[] = "failure_from_loss";
// this node published the attempt's failure record
inline constexpr char kFailurePublished[] = "failure_published";
// the agent ends (exit_code, restarts_spent)
inline constexpr char kFinish[] = "finish";
// hang detection named a culprit
inline constexpr char kHang[] = "hang";
// an in-place recovery completed, with its phase times
inline constexpr char kInPlaceRecovery[] = "in_place_recovery";
// the attempt's failure record arrived from another node
inline constexpr char kJobFailure[] = "job_failure";
// a node left, joined or was lost
inline constexpr char kMembershipChange[] = "membership_change";
// an in-place recovery began
inline constexpr char kRecoveryStarted[] = "recovery_started";
// kept workers did not re-form in time
inline constexpr char kRecoveryTimeout[] = "recovery_timeout";
// a round formed: this node's ranks, world size, round
inline constexpr char kRendezvous[] = "rendezvous";
// the rendezvous failed; the agent gives up
inline constexpr char kRendezvousFailed[] = "rendezvous_failed";
// the job ended while this node waited outside it (a spare): it exits 0
inline constexpr char kNotNeeded[] = "not_needed";
// a restart spent (restarts_spent)
inline constexpr char kRestart[] = "restart";
// the agent received a signal
inline constexpr char kSignal[] = "signal";
// this node found the group full and stands by as a spare (run_id, round, group_full_at)
inline constexpr char kSpare[] = "spare";
// this spare was admitted into a round (round, group_rank)
inline constexpr char kSpareAdmitted[] = "spare_admitted";
// a standby worker started (pid), listens on its channel (pid, ms), died standing by (pid,
// exit_code, signal, listening), took a dead worker's place (pid, rank, local_rank,
// waited_ms), or the node's standbys were turned off (reason)
inline constexpr char kStandbyStart[] = "standby_start";
inline constexpr char kStandbyReady[] = "standby_ready";
inline constexpr char kStandbyExit[] = "standby_exit";
inline constexpr char kStandbyPromoted[] = "standby_promoted";
inline constexpr char kStandbyOff[] = "standby_off";
// a worker could not be started
inline constexpr char kSpawnFailed[] = "spawn_failed";
// the group is being stopped (signal sent)
inline constexpr char kStopping[] = "stopping";
// the store host announced it leaves
inline constexpr char kStoreLeaving[] = "store_leaving";
// the rendezvous store is gone
inline constexpr char kStoreLost[] = "store_lost";
// the store was silent past the peer tolerance; joining again
inline constexpr char kStoreSilent[] = "store_silent";
// a worker still there after SIGKILL, given up on
inline constexpr char kUnkillable[] = "unkillable";
// a worker opened its recovery channel
inline constexpr char kWorkerChannel[] = "worker_channel";
// a worker process ended (exit_code, signal)
inline constexpr char kWorkerExit[] = "worker_exit";
// a worker process started (rank, local_rank, pid)
inline constexpr char kWorkerStart[] = "worker_start";
// every worker of this node is parked before its admission into a round (count)
inline constexpr char kWorkersParked[] = "workers_parked";
// kept workers re-formed in place (no restart)
inline constexpr char kWorkersResumed[] = "workers_resumed";
// every worker of the round started
inline constexpr char kWorkersStarted[] = "workers_started";
// the worker group is stopped
inline constexpr char kWorkersStopped[] = "workers_stopped";

}  // namespace ddp::launcher::event
