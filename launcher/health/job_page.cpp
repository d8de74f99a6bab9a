#include "launcher/health/job_page.hpp"

#include <chrono>

#include "launcher/health/metrics_view.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace {

using Json = nlohmann::ordered_json;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double unix_seconds(std::chrono::system_clock::time_point when) {
  return std::chrono::duration<double>(when.time_since_epoch()).count();
}

// The root cause among failures (the summary's), as the page shows it.
Json describe_root_cause(const std::vector<WorkerFailure>& failures) {
  const auto& root = failures.at(root_cause_index(failures));
  Json out = {{"time", unix_seconds(root.observed)},
              {"rank", root.rank},
              {"local_rank", root.local_rank},
              {"pid", root.pid},
              {"exit_code", root.status.shell_status()},
              {"signal", root.status.signal != 0 ? signal_name(root.status.signal) : ""},
              {"hang", root.hang},
              {"culprit", root.culprit},
              {"others", failures.size() - 1}};
  std::string message;
  std::string traceback;
  if (root.error) {
    message = root.error->message;
    traceback = root.error->traceback;
    if (root.error->timestamp) out["time"] = *root.error->timestamp;
  }
  // A rank that died of a signal left its stack (faulthandler, a backtrace) on stderr.
  if (!traceback.empty() && !root.output_tail.empty() && traceback.back() != '\n') {
    traceback += '\n';
  }
  for (const auto& line : root.output_tail) traceback += line + "\n";
  out["message"] = message.empty() ? root.status.describe() : message;
  out["traceback"] = traceback;
  return out;
}

Json restart_json(const RestartRecord& record) {
  const auto& p = record.phases;
  const double stopped = p.workers_stopped != 0 ? p.workers_stopped : p.failure_detected;
  return {{"kind", record.spent ? "restart" : "reform"},
          {"time", p.failure_detected},
          {"from_round", record.from_round},
          {"round", record.round},
          {"cause", record.cause},
          {"rank", record.rank},
          {"phases",
           {{"stopping", stopped - p.failure_detected},
            {"rendezvous", p.rendezvous_done - stopped},
            {"starting", p.workers_started - p.rendezvous_done},
            {"total", p.workers_started - p.failure_detected}}}};
}

Json recovery_json(const RecoveryEvent& record) {
  Json phases = Json::object();
  for (const char* phase : {"aborted", "reformed", "state_sent", "first_step"}) {
    auto it = record.phases_ms.find(phase);
    phases[phase] = it == record.phases_ms.end() ? -1.0 : it->second;
  }
  return {{"kind", "recovery"},      {"time", record.started},
          {"reason", record.reason}, {"from_round", record.from_round},
          {"round", record.round},   {"phases_ms", phases},
          {"kept", record.kept},     {"restarted", record.restarted},
          {"step", record.step}};
}

Json hang_json(const HangRecord& record) {
  return {{"time", record.time},       {"round", record.round},
          {"rank", record.rank},       {"local_rank", record.local_rank},
          {"culprit", record.culprit}, {"source", record.source},
          {"scope", record.scope},     {"report", record.report}};
}

}  // namespace

JobPage::JobPage(const AgentMetrics& metrics, JobPageSources sources)
    : metrics_(metrics), sources_(std::move(sources)) {}

void JobPage::observe(const nlohmann::json& event) {
  const auto name = event.value("event", "");
  const bool restart = name == event::kRestart;
  if (!restart && !(name == event::kFinish && event.value("exit_code", 0) != 0)) return;
  auto failures = sources_.failures ? sources_.failures() : std::vector<WorkerFailure>{};
  Json cause;
  if (!failures.empty()) {
    cause = describe_root_cause(failures);
  } else if (restart && event.contains("failed_rank")) {
    // The job's failure record named a rank of another node: the events say which.
    cause = {
        {"time", event.value("time", 0.0)},
        {"rank", event.value("failed_rank", -1)},
        {"node", event.value("failed_node", -1)},
        {"exit_code", event.value("exit_code", 0)},
        {"message", "the job's first failure (another node's rank; its page has the details)"}};
  } else {
    return;  // a restart after a hang whose ranks ended on their own, a re-form: no rank to name
  }
  cause["round"] = metrics_.round();
  cause["restarted"] = restart;
  root_causes_.push_back(std::move(cause));
  if (root_causes_.size() > kRootCauseRecords) root_causes_.erase(root_causes_.begin());
}

std::string JobPage::json(const std::string& agent_state) const {
  Json workers = Json::array();
  for (const auto& worker : metrics_.workers()) {
    Json entry = {
        {"rank", worker.rank},   {"local_rank", worker.local_rank}, {"pid", worker.pid},
        {"state", worker.state}, {"exit_code", worker.exit_code},   {"signal", worker.signal}};
    RankOutput output;
    if (sources_.output) output = sources_.output(worker.local_rank);
    entry["progress"] = output.progress;
    entry["lines"] = output.lines;
    workers.push_back(std::move(entry));
  }
  Json timeline = Json::array();
  for (const auto& record : metrics_.restart_history()) timeline.push_back(restart_json(record));
  for (const auto& record : metrics_.recoveries()) timeline.push_back(recovery_json(record));
  Json hangs = Json::array();
  for (const auto& record : metrics_.hangs()) hangs.push_back(hang_json(record));
  Json body = {{"state", agent_state},
               {"healthy", is_healthy_state(agent_state)},
               {"run_id", metrics_.run_id()},
               {"host", sources_.host},
               {"node",
                {{"group_rank", metrics_.group_rank()},
                 {"group_world_size", metrics_.group_world_size()},
                 {"world_size", metrics_.world_size()}}},
               {"round", metrics_.round()},
               {"restarts", metrics_.restarts()},
               {"max_restarts", metrics_.max_restarts()},
               {"in_place_recoveries", metrics_.in_place_recoveries()},
               {"started", metrics_.started()},
               {"now", now_seconds()},
               {"exit_code", metrics_.exit_code() ? Json(*metrics_.exit_code()) : Json()},
               {"workers", std::move(workers)},
               {"timeline", std::move(timeline)},
               {"hangs", std::move(hangs)},
               {"root_causes", root_causes_}};
  return body.dump() + "\n";
}

}  // namespace ddp::launcher
