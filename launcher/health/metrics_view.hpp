#pragma once
// What the health endpoint reports (docs/operations.md): a view of the agent built from the
// events it records (event_log.hpp), so it needs no hooks of its own in the state machine,
// and two renderings of it: /health's JSON and /metrics' Prometheus text format (0.0.4); the
// job page (job_page.hpp) renders its history. Pure: events in, text out; tested without
// sockets or an agent.
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddp::launcher {

// One worker of the current round as the endpoint shows it.
struct WorkerHealth {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  // RUNNING, SUCCEEDED (exit 0), FAILED (failed on its own), STOPPED (ended while the agent
  // stopped the group), UNKILLABLE (survived SIGKILL).
  std::string state = "RUNNING";
  int exit_code = 0;
  int signal = 0;
};

// When each phase of a restart happened (unix seconds, 0: not yet).
struct RestartPhases {
  double failure_detected = 0;  // a failure (or a membership change) stopped the group
  double workers_stopped = 0;   // the last worker of the old group is gone
  double rendezvous_done = 0;   // the next round is formed
  double workers_started = 0;   // the new group is spawned
};

// A finished restart, or a re-form after a membership change, with what caused it.
struct RestartRecord {
  RestartPhases phases;
  int64_t from_round = -1;
  int64_t round = -1;
  std::string cause;   // the failure's kind (exit, signal, hang, ...) or the change (node_lost...)
  int rank = -1;       // the failed rank, -1 when none
  bool spent = false;  // a restart of --max_restarts was spent on it (not a plain re-form)
};

// A completed in-place recovery (docs/recovery.md).
struct RecoveryEvent {
  double started = 0;  // unix seconds: the change noticed
  std::string reason;
  int64_t from_round = -1;
  int64_t round = -1;
  std::map<std::string, double> phases_ms;  // aborted, reformed, state_sent, first_step (-1: not)
  int kept = 0;
  int restarted = 0;
  int64_t step = -1;  // the step the group resumed from
};

// A hung rank as hang detection reported it (docs/hangs.md).
struct HangRecord {
  double time = 0;
  int64_t round = -1;
  int rank = -1;
  int local_rank = -1;
  bool culprit = false;
  std::string source;  // progress, proc, file_timer
  std::string scope;   // where it stopped: a collective, a step, a file-timer scope
  std::string report;  // the one-line report
};

// Records of each kind kept for the job page (the oldest go first).
inline constexpr size_t kHistoryRecords = 100;

// The kinds of failures counted, always exported (0 until one happens).
inline constexpr const char* kFailureKinds[] = {
    "exit", "signal", "hang", "node_lost", "unkillable", "spawn", "store_lost", "agent_signal"};
// The agent states (Agent::State, named by state_name()), always exported.
inline constexpr const char* kAgentStates[] = {"INIT",     "RENDEZVOUS", "HEALTHY",
                                               "STOPPING", "EXITING",    "DONE"};
// Worker states as WorkerHealth names them.
inline constexpr const char* kWorkerStates[] = {"RUNNING", "SUCCEEDED", "FAILED", "STOPPED",
                                                "UNKILLABLE"};

class AgentMetrics {
 public:
  AgentMetrics(std::string run_id, int max_restarts);

  // Feeds one event as EventLog writes it: {"event": name, "time": unix seconds, ...}.
  void observe(const nlohmann::json& event);

  [[nodiscard]] const std::string& run_id() const { return run_id_; }
  [[nodiscard]] int max_restarts() const { return max_restarts_; }
  [[nodiscard]] int restarts() const { return restarts_; }
  [[nodiscard]] int64_t round() const { return round_; }
  [[nodiscard]] int64_t rendezvous_rounds() const { return rendezvous_rounds_; }
  [[nodiscard]] const std::vector<WorkerHealth>& workers() const { return workers_; }
  // Failures counted per kind (kinds never seen are absent).
  [[nodiscard]] const std::map<std::string, int64_t>& failures() const { return failures_; }
  // The last restart whose new workers have started; nullopt-like (all 0) before one.
  [[nodiscard]] const RestartPhases& last_restart() const { return last_restart_; }
  // In-place recoveries completed (docs/recovery.md), and the last one's phase times in ms
  // since the change was noticed ("aborted", "reformed", "state_sent", "first_step").
  [[nodiscard]] int64_t in_place_recoveries() const { return in_place_recoveries_; }
  [[nodiscard]] const std::map<std::string, double>& last_in_place() const {
    return last_in_place_;
  }
  // The history, oldest first (at most kHistoryRecords each).
  [[nodiscard]] const std::deque<RestartRecord>& restart_history() const { return history_; }
  [[nodiscard]] const std::deque<RecoveryEvent>& recoveries() const { return recoveries_; }
  [[nodiscard]] const std::deque<HangRecord>& hangs() const { return hangs_; }
  // This node in the current round (-1 before the first) and the round's sizes.
  [[nodiscard]] int group_rank() const { return group_rank_; }
  [[nodiscard]] int group_world_size() const { return group_world_size_; }
  [[nodiscard]] int world_size() const { return world_size_; }
  // When the first round formed (0: not yet), and the agent's exit status once it finished.
  [[nodiscard]] double started() const { return started_; }
  [[nodiscard]] std::optional<int> exit_code() const { return exit_code_; }
  // This node stands by as a spare now (the group was full when it came); how often a spare
  // standing by here was admitted.
  [[nodiscard]] bool spare() const { return spare_; }
  [[nodiscard]] int64_t spare_admissions() const { return spare_admissions_; }
  // Standby workers (--standby_workers) that listen, parked, now; how many took a place.
  [[nodiscard]] int64_t standby_ready() const {
    return static_cast<int64_t>(standby_ready_.size());
  }
  [[nodiscard]] int64_t standby_promotions() const { return standby_promotions_; }

 private:
  WorkerHealth* worker_by_pid(int pid);

  std::string run_id_;
  int max_restarts_ = 0;
  int restarts_ = 0;
  int64_t round_ = -1;  // -1 until the first rendezvous
  int64_t rendezvous_rounds_ = 0;
  std::vector<WorkerHealth> workers_;
  std::map<std::string, int64_t> failures_;
  bool stopping_ = false;  // the group is being stopped: exits now are STOPPED
  RestartPhases pending_;  // the restart in progress (failure_detected != 0)
  RestartPhases last_restart_;
  int64_t in_place_recoveries_ = 0;
  std::map<std::string, double> last_in_place_;
  RestartRecord pending_record_;  // the cause and rounds of the restart in progress
  double recovery_started_ = 0;   // the in-place recovery in progress
  std::deque<RestartRecord> history_;
  std::deque<RecoveryEvent> recoveries_;
  std::deque<HangRecord> hangs_;
  int group_rank_ = -1;
  int group_world_size_ = 0;
  int world_size_ = 0;
  double started_ = 0;
  std::optional<int> exit_code_;
  bool spare_ = false;
  int64_t spare_admissions_ = 0;
  std::set<int> standby_ready_;  // pids
  int64_t standby_promotions_ = 0;
};

// True for the one state in which /health answers 200.
bool is_healthy_state(const std::string& agent_state);
// /health's body: {"state", "healthy", "run_id", "round", "restarts", "max_restarts",
// "spare", "workers": [{"rank", "local_rank", "pid", "state"[, "exit_code", "signal"]}]}.
std::string render_health_json(const std::string& agent_state, const AgentMetrics& metrics);
// /metrics' body in Prometheus' text exposition format 0.0.4 (names in docs/operations.md).
std::string render_prometheus(const std::string& agent_state, const AgentMetrics& metrics);

}  // namespace ddp::launcher
