#pragma once
// One node's worker processes as a group, over a WorkerSpawner (real or fake): the slots (one
// per local rank: pid, running), starting a slot's worker, signalling them, and stopping them
// all with a grace period: the signal, SIGKILL after --stop_timeout, and then giving up on the
// ones that survive even that (unkillable: a process in state D) so the agent goes on. Exits
// come back per slot, once, and only for the current group: what torch's PContext keeps. What
// an exit means (a failure, a restart, the summary) is the agent's.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/process/proc_status.hpp"
#include "launcher/process/worker_spawner.hpp"

namespace ddp::launcher {

struct WorkerGroupOptions {
  std::chrono::milliseconds stop_timeout{30000};  // from the stop signal to SIGKILL
  // After SIGKILL, how long (at least; stop_timeout when longer) before survivors are given up.
  std::chrono::milliseconds unkillable_grace{2000};
  // How a survivor's /proc state is read for the report (null: read_proc_status).
  std::function<std::optional<ProcStatus>(int pid)> read_proc;
};

// A worker still there after SIGKILL, given up on (no longer running, never reported exited).
struct UnkillableWorker {
  size_t index = 0;
  int pid = 0;
  std::optional<ProcStatus> status;  // its /proc state, when it could be read
};

class WorkerGroup {
 public:
  WorkerGroup(boost::asio::io_context& io, WorkerSpawner& spawner, WorkerGroupOptions options);
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // A new group of count empty slots: exits and timers of the previous one are ignored.
  void reset(size_t count);
  [[nodiscard]] size_t size() const { return slots_.size(); }

  // Starts slot index's worker (a fresh one where one ran before); returns its pid. callbacks'
  // on_exit is called once, when this worker ends while the group is current, after the slot
  // is marked not running. Throws as WorkerSpawner::spawn; the slot is then not running.
  int start(size_t index, const WorkerProcessSpec& spec, WorkerCallbacks callbacks);
  // Makes pid, a process the spawner started earlier (a standby worker), slot index's
  // worker, as start() would have; returns the callbacks its output and exit must go to from
  // now on (the exit counted for this slot, once, as a started worker's).
  WorkerCallbacks adopt(size_t index, int pid, WorkerCallbacks callbacks);

  [[nodiscard]] bool running(size_t index) const { return slots_.at(index).running; }
  [[nodiscard]] int pid(size_t index) const { return slots_.at(index).pid; }  // 0: never started
  [[nodiscard]] int running_count() const { return running_; }
  // "123, 456", or "none running" (for messages).
  [[nodiscard]] std::string running_pids() const;

  // sig to slot index's process group (its wrappers' children too), when it runs.
  void signal(size_t index, int sig);
  // sig to slot index's process alone (a stack dump request), when it runs.
  void signal_process(size_t index, int sig);
  // sig to every running worker's process group.
  void signal_all(int sig);

  // Stops the running workers: sig now; SIGKILL to those still running stop_timeout later
  // (said in one warning); max(stop_timeout, unkillable_grace) after that, those still there
  // are given up (marked not running) and handed to on_unkillable together. Exits keep coming
  // back through each worker's on_exit meanwhile. Nothing to stop: no timer at all.
  void stop(int sig, std::function<void(const std::vector<UnkillableWorker>&)> on_unkillable);
  // Ends a stop's timers (every worker is gone, or the agent moved on): no SIGKILL, no report.
  void cancel_stop();

  // After slot index's worker exited: kills what is left of its process group and forgets it.
  void release(size_t index);
  // release() for every slot that was started.
  void release_all();
  // Once the group is released: kills what the workers started outside their process groups
  // (setsid daemons) and names them, "pid 123 (sleep)" each.
  std::vector<std::string> stop_escaped() { return spawner_.stop_escaped(); }

 private:
  struct Slot {
    int pid = 0;
    bool running = false;
  };
  // callbacks whose on_exit marks slot index not running first (only for this group).
  WorkerCallbacks tracked(size_t index, WorkerCallbacks callbacks);
  void mark_running(size_t index, int pid);
  void kill_after_grace(uint64_t stop,
                        std::function<void(const std::vector<UnkillableWorker>&)> on_unkillable);
  void give_up_later(uint64_t stop,
                     std::function<void(const std::vector<UnkillableWorker>&)> on_unkillable);

  boost::asio::io_context& io_;
  WorkerSpawner& spawner_;
  WorkerGroupOptions options_;
  std::vector<Slot> slots_;
  int running_ = 0;
  uint64_t generation_ = 0;  // bumps per reset(): late exits of an old group are ignored
  uint64_t stop_ = 0;        // bumps per stop() and cancel_stop(): stale timers do nothing
  int stop_signal_ = 0;
  boost::asio::steady_timer kill_timer_;
};

}  // namespace ddp::launcher
