#include "launcher/health/metrics_view.hpp"

#include <charconv>
#include <utility>

#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace {

template <typename T>
T field(const nlohmann::json& event, const char* name, T fallback) {
  auto it = event.find(name);
  if (it == event.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    return fallback;
  }
}

// A sample value: integers as integers, others in the shortest form that reads back exactly.
std::string number(double value) {
  char text[32];
  auto result = std::to_chars(std::begin(text), std::end(text), value);
  return {text, result.ptr};
}

// A label value escaped as the text format wants (backslash, quote, newline).
std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Builds the exposition text: one HELP and TYPE per family, then its samples.
class Exposition {
 public:
  void family(const std::string& name, const char* type, const char* help) {
    text_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, double value) { text_ += name + " " + number(value) + "\n"; }
  void sample(const std::string& name, const char* label, const std::string& label_value,
              double value) {
    text_ += name + "{" + label + "=\"" + escape_label(label_value) + "\"} " + number(value) + "\n";
  }
  [[nodiscard]] std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

// Appends record to history, dropping the oldest past kHistoryRecords.
template <typename T>
void remember(std::deque<T>& history, T record) {
  history.push_back(std::move(record));
  if (history.size() > kHistoryRecords) history.pop_front();
}

}  // namespace

AgentMetrics::AgentMetrics(std::string run_id, int max_restarts)
    : run_id_(std::move(run_id)), max_restarts_(max_restarts) {}

WorkerHealth* AgentMetrics::worker_by_pid(int pid) {
  for (auto& worker : workers_) {
    if (worker.pid == pid) return &worker;
  }
  return nullptr;
}

void AgentMetrics::observe(const nlohmann::json& event) {
  const auto name = field<std::string>(event, "event", "");
  const auto time = field<double>(event, "time", 0);
  if (name == event::kSpare) {
    spare_ = true;
  } else if (name == event::kSpareAdmitted) {
    spare_ = false;
    ++spare_admissions_;
  } else if (name == event::kNotNeeded) {
    spare_ = false;
  } else if (name == event::kStandbyReady) {
    standby_ready_.insert(field<int>(event, "pid", 0));
  } else if (name == event::kStandbyExit) {
    standby_ready_.erase(field<int>(event, "pid", 0));
  } else if (name == event::kStandbyPromoted) {
    standby_ready_.erase(field<int>(event, "pid", 0));
    ++standby_promotions_;
  } else if (name == event::kStandbyOff) {
    standby_ready_.clear();
  } else if (name == event::kRendezvous) {
    spare_ = false;
    round_ = field<int64_t>(event, "round", round_);
    ++rendezvous_rounds_;
    group_rank_ = field<int>(event, "group_rank", group_rank_);
    group_world_size_ = field<int>(event, "group_world_size", group_world_size_);
    world_size_ = field<int>(event, "world_size", world_size_);
    if (started_ == 0) started_ = time;
    // Workers kept running through an in-place re-form stay; ended ones belong to the past.
    std::erase_if(workers_, [](const WorkerHealth& w) { return w.state != "RUNNING"; });
    stopping_ = false;
    if (pending_.failure_detected != 0) pending_.rendezvous_done = time;
  } else if (name == event::kWorkerStart) {
    WorkerHealth worker;
    worker.rank = field<int>(event, "rank", 0);
    worker.local_rank = field<int>(event, "local_rank", 0);
    worker.pid = field<int>(event, "pid", 0);
    std::erase_if(workers_,
                  [&](const WorkerHealth& w) { return w.local_rank == worker.local_rank; });
    workers_.push_back(worker);
  } else if (name == event::kWorkerExit) {
    if (auto* worker = worker_by_pid(field<int>(event, "pid", 0))) {
      worker->exit_code = field<int>(event, "exit_code", 0);
      worker->signal = field<int>(event, "signal", 0);
      const bool success = worker->exit_code == 0 && worker->signal == 0;
      worker->state = success ? "SUCCEEDED" : stopping_ ? "STOPPED" : "FAILED";
    }
  } else if (name == event::kUnkillable) {
    if (auto* worker = worker_by_pid(field<int>(event, "pid", 0))) worker->state = "UNKILLABLE";
  } else if (name == event::kFailure) {
    ++failures_[field<std::string>(event, "kind", "exit")];
    if (pending_.failure_detected == 0) {
      pending_ = RestartPhases{time, 0, 0, 0};
      pending_record_ = {};
      pending_record_.from_round = round_;
      pending_record_.cause = field<std::string>(event, "kind", "exit");
      pending_record_.rank = field<int>(event, "rank", -1);
    }
  } else if (name == event::kMembershipChange) {
    // A re-form without a failure (a node joining) is timed like a restart too.
    if (pending_.failure_detected == 0) {
      pending_ = RestartPhases{time, 0, 0, 0};
      pending_record_ = {};
      pending_record_.from_round = round_;
      pending_record_.cause = field<std::string>(event, "change", "membership_change");
    }
  } else if (name == event::kStopping) {
    stopping_ = true;
  } else if (name == event::kWorkersStopped) {
    if (pending_.failure_detected != 0) pending_.workers_stopped = time;
  } else if (name == event::kWorkersStarted) {
    if (pending_.failure_detected != 0 && pending_.rendezvous_done != 0) {
      pending_.workers_started = time;
      last_restart_ = pending_;
      pending_record_.phases = pending_;
      pending_record_.round = round_;
      remember(history_, pending_record_);
    }
    pending_ = RestartPhases{};
  } else if (name == event::kRestart) {
    restarts_ = field<int>(event, "restarts_spent", restarts_);
    pending_record_.spent = true;
  } else if (name == event::kWorkersResumed) {
    pending_ = RestartPhases{};  // re-formed in place: no restart to time
    stopping_ = false;
  } else if (name == event::kRecoveryStarted) {
    recovery_started_ = time;
  } else if (name == event::kInPlaceRecovery) {
    ++in_place_recoveries_;
    for (const char* phase : {"aborted", "reformed", "state_sent", "first_step"}) {
      const std::string key = std::string(phase) + "_ms";
      last_in_place_[phase] = field<double>(event, key.c_str(), -1);
    }
    RecoveryEvent record;
    record.started = recovery_started_ != 0 ? recovery_started_ : time;
    record.reason = field<std::string>(event, "reason", "");
    record.from_round = field<int64_t>(event, "from_round", -1);
    record.round = field<int64_t>(event, "round", -1);
    record.phases_ms = last_in_place_;
    record.kept = field<int>(event, "kept", 0);
    record.restarted = field<int>(event, "restarted", 0);
    record.step = field<int64_t>(event, "step", -1);
    remember(recoveries_, std::move(record));
    recovery_started_ = 0;
  } else if (name == event::kHang) {
    HangRecord record;
    record.time = time;
    record.round = round_;
    record.rank = field<int>(event, "rank", -1);
    record.local_rank = field<int>(event, "local_rank", -1);
    record.culprit = field<bool>(event, "culprit", false);
    record.source = field<std::string>(event, "source", "");
    record.scope = field<std::string>(event, "scope", "");
    record.report = field<std::string>(event, "report", "");
    remember(hangs_, std::move(record));
  } else if (name == event::kFinish) {
    spare_ = false;
    standby_ready_.clear();
    exit_code_ = field<int>(event, "exit_code", 0);
  }
}

bool is_healthy_state(const std::string& agent_state) {
  return agent_state == "HEALTHY";
}

std::string render_health_json(const std::string& agent_state, const AgentMetrics& metrics) {
  nlohmann::ordered_json workers = nlohmann::ordered_json::array();
  for (const auto& worker : metrics.workers()) {
    nlohmann::ordered_json entry = {{"rank", worker.rank},
                                    {"local_rank", worker.local_rank},
                                    {"pid", worker.pid},
                                    {"state", worker.state}};
    if (worker.state != "RUNNING") {
      entry["exit_code"] = worker.exit_code;
      entry["signal"] = worker.signal;
    }
    workers.push_back(std::move(entry));
  }
  nlohmann::ordered_json body = {
      {"state", agent_state},           {"healthy", is_healthy_state(agent_state)},
      {"run_id", metrics.run_id()},     {"round", metrics.round()},
      {"restarts", metrics.restarts()}, {"max_restarts", metrics.max_restarts()},
      {"spare", metrics.spare()},       {"workers", std::move(workers)}};
  return body.dump() + "\n";
}

std::string render_prometheus(const std::string& agent_state, const AgentMetrics& metrics) {
  Exposition out;
  out.family("ddplaunch_info", "gauge", "Always 1; the job's run id as a label.");
  out.sample("ddplaunch_info", "run_id", metrics.run_id(), 1);
  out.family("ddplaunch_agent_state", "gauge", "1 for the state the agent is in, else 0.");
  for (const char* state : kAgentStates) {
    out.sample("ddplaunch_agent_state", "state", state, agent_state == state ? 1 : 0);
  }
  out.family("ddplaunch_group_healthy", "gauge",
             "1 while the worker group runs (what /health answers 200 for), else 0.");
  out.sample("ddplaunch_group_healthy", is_healthy_state(agent_state) ? 1 : 0);
  out.family("ddplaunch_spare", "gauge",
             "1 while this node stands by as a spare (the group was full when it came), else 0; "
             "sum over a job's nodes: its spares.");
  out.sample("ddplaunch_spare", metrics.spare() ? 1 : 0);
  out.family("ddplaunch_spare_admissions_total", "counter",
             "Times this node was admitted into the group after standing by as a spare.");
  out.sample("ddplaunch_spare_admissions_total", static_cast<double>(metrics.spare_admissions()));
  out.family("ddplaunch_standby_workers", "gauge",
             "Standby workers (--standby_workers) of this node parked and listening now.");
  out.sample("ddplaunch_standby_workers", static_cast<double>(metrics.standby_ready()));
  out.family("ddplaunch_standby_promotions_total", "counter",
             "Times a standby worker of this node took a failed worker's place.");
  out.sample("ddplaunch_standby_promotions_total",
             static_cast<double>(metrics.standby_promotions()));
  out.family("ddplaunch_workers", "gauge", "Workers of the current round, by state.");
  for (const char* state : kWorkerStates) {
    int count = 0;
    for (const auto& worker : metrics.workers()) count += worker.state == state ? 1 : 0;
    out.sample("ddplaunch_workers", "state", state, count);
  }
  out.family("ddplaunch_rendezvous_round", "gauge",
             "The current rendezvous round (TORCHELASTIC_RESTART_COUNT of the workers).");
  out.sample("ddplaunch_rendezvous_round", static_cast<double>(metrics.round()));
  out.family("ddplaunch_rendezvous_rounds_total", "counter",
             "Rendezvous rounds this agent completed.");
  out.sample("ddplaunch_rendezvous_rounds_total", static_cast<double>(metrics.rendezvous_rounds()));
  out.family("ddplaunch_restarts_total", "counter", "Restarts this node spent (--max_restarts).");
  out.sample("ddplaunch_restarts_total", metrics.restarts());
  out.family("ddplaunch_max_restarts", "gauge", "The --max_restarts this agent runs with.");
  out.sample("ddplaunch_max_restarts", metrics.max_restarts());
  out.family("ddplaunch_failures_total", "counter",
             "Failures that stopped the worker group, by kind (one per attempt).");
  for (const char* kind : kFailureKinds) {
    auto it = metrics.failures().find(kind);
    out.sample("ddplaunch_failures_total", "kind", kind,
               static_cast<double>(it == metrics.failures().end() ? 0 : it->second));
  }
  out.family("ddplaunch_in_place_recoveries_total", "counter",
             "Membership changes survived without restarting this node's workers "
             "(--in_place_recovery).");
  out.sample("ddplaunch_in_place_recoveries_total",
             static_cast<double>(metrics.in_place_recoveries()));
  if (!metrics.last_in_place().empty()) {
    out.family("ddplaunch_last_in_place_recovery_seconds", "gauge",
               "The last in-place recovery: seconds from the change noticed to each phase "
               "(-1: not reached).");
    for (const auto& [phase, ms] : metrics.last_in_place()) {
      out.sample("ddplaunch_last_in_place_recovery_seconds", "phase", phase,
                 ms < 0 ? -1.0 : ms / 1000.0);
    }
  }
  const auto& last = metrics.last_restart();
  if (last.workers_started != 0) {
    out.family("ddplaunch_last_restart_timestamp_seconds", "gauge",
               "When each phase of the last restart happened (unix time).");
    out.sample("ddplaunch_last_restart_timestamp_seconds", "phase", "failure_detected",
               last.failure_detected);
    out.sample("ddplaunch_last_restart_timestamp_seconds", "phase", "workers_stopped",
               last.workers_stopped);
    out.sample("ddplaunch_last_restart_timestamp_seconds", "phase", "rendezvous_done",
               last.rendezvous_done);
    out.sample("ddplaunch_last_restart_timestamp_seconds", "phase", "workers_started",
               last.workers_started);
    out.family("ddplaunch_last_restart_phase_seconds", "gauge",
               "How long each phase of the last restart took: stopping (failure detected to "
               "workers stopped), rendezvous, starting, and total.");
    const double stopped = last.workers_stopped != 0 ? last.workers_stopped : last.failure_detected;
    out.sample("ddplaunch_last_restart_phase_seconds", "phase", "stopping",
               stopped - last.failure_detected);
    out.sample("ddplaunch_last_restart_phase_seconds", "phase", "rendezvous",
               last.rendezvous_done - stopped);
    out.sample("ddplaunch_last_restart_phase_seconds", "phase", "starting",
               last.workers_started - last.rendezvous_done);
    out.sample("ddplaunch_last_restart_phase_seconds", "phase", "total",
               last.workers_started - last.failure_detected);
  }
  return out.take();
}

}  // namespace ddp::launcher
