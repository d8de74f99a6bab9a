#pragma once
// Starts the workers of a round, one per local rank, and keeps what the agent knows of each
// (its WorkerSlot): the slot's rank and error file, the process spec (the env contract, hang
// detection's variables, the CPU binding, the recovery channel), the start, and its report.
// A worker that cannot start is reported here and handed to the agent, whose attempt ends.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "launcher/agent/agent_options.hpp"
#include "launcher/agent/in_place_recovery.hpp"
#include "launcher/agent/round_history.hpp"
#include "launcher/agent/standby_pool.hpp"
#include "launcher/agent/worker_slots.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/output/log_router.hpp"
#include "launcher/process/worker_group.hpp"

namespace ddp::launcher {

class WorkerLauncher {
 public:
  struct Hooks {
    // The current round as the workers' env contract sees it.
    std::function<AttemptInfo()> attempt;
    // Variables hang detection adds to each worker's environment.
    std::function<std::vector<std::string>()> extra_env;
    // Slot index's worker exited (on the loop).
    std::function<void(size_t index, ExitStatus status)> exited;
    // Slot's worker could not be started, for the reason given (already reported).
    std::function<void(const WorkerSlot& slot, const std::string& error)> start_failed;
  };

  // round: the agent's, read at each start (attempt, generation, rank offset).
  WorkerLauncher(const AgentOptions& options, const RoundHistory& round, WorkerGroup& group,
                 InPlaceRecovery& recovery, StandbyPool& standbys, LogRouter& logs,
                 EventLog& events, Hooks hooks);

  // Declares the store namespace of the round's workers' PyTorch clients
  // (AgentOptions::set_worker_namespace), by the round: every node of a round agrees on it, so
  // two different groups never share /worker/attempt_<n> keys. A failure is warned about
  // (those clients are refused: they fail and the job restarts).
  void declare_namespace();
  // A fresh group of count workers: slots (slot index == local rank), processes and
  // recovery channels forgotten.
  void reset(size_t count);
  // The kept workers' ranks in a round re-formed in place (its first rank is rank_offset).
  void renumber(int rank_offset);
  // Starts slot index's worker for the current round; false when it could not
  // (Hooks::start_failed has been called).
  bool start(size_t index);
  // A worker for slot index in place of one that died, in a group re-formed in place: a
  // standby worker when one stands by (it gets its round notice; the pool starts another),
  // else start(index). False when none could be had (Hooks::start_failed has been called).
  bool replace(size_t index);
  // The process a standby worker is started as: the worker's program with the spare's
  // environment (no round variables), no LOCAL_RANK, DDPLAUNCH_STANDBY=1, no CPU binding.
  [[nodiscard]] WorkerProcessSpec standby_spec(const std::string& error_file) const;
  // Starts every slot's worker and records workers_started; false at the first that could not.
  bool start_all();
  // count workers started before this node is admitted into a round (a spare, or a node
  // joining: reason as InPlaceRecovery::park's): reset(), parked until the round that admits
  // the node; a slot that could not start is started then.
  void park(size_t count, const std::string& reason);

  [[nodiscard]] WorkerSlot& slot(size_t index) { return slots_.at(index); }
  [[nodiscard]] std::vector<WorkerSlot>& slots() { return slots_; }

 private:
  const AgentOptions& options_;
  const RoundHistory& round_;
  WorkerGroup& group_;
  InPlaceRecovery& recovery_;
  StandbyPool& standbys_;
  LogRouter& logs_;
  EventLog& events_;
  Hooks hooks_;
  std::vector<WorkerSlot> slots_;  // per local rank: what is known beyond the process
};

}  // namespace ddp::launcher
