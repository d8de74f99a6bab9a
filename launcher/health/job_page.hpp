#pragma once
// The job page (docs/operations.md, "The job page"): GET / on the health endpoint is one
// self-contained HTML page (its script and styles inline: no CDN, nothing fetched but
// /job.json) that a person keeps open beside a job. It reads GET /job.json once a second and
// draws this node and its round, each local rank with its state, latest progress and last
// lines, the restarts and in-place recoveries on a timeline with their phase times, hangs with
// their culprit and stack, and the root cause of each failed attempt. What it shows comes from
// the agent's events (AgentMetrics), the log router (progress, last lines) and the agent's
// failures at each restart; nothing here decides anything. Pure: no sockets.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/health/metrics_view.hpp"
#include "launcher/output/error_report.hpp"

namespace ddp::launcher {

// What a local rank printed lately.
struct RankOutput {
  std::string progress;            // its latest progress bar state ("" when none)
  std::vector<std::string> lines;  // its last whole lines, both streams
};

struct JobPageSources {
  std::string host;  // this node's name, as the failure summary prints it
  // A local rank's output (null: none shown).
  std::function<RankOutput(int local_rank)> output;
  // The failures of the attempt that just ended (the agent's list), read when a restart or the
  // end is recorded (null: only what the events say).
  std::function<std::vector<WorkerFailure>()> failures;
};

// Root causes kept for the page (the oldest go first).
inline constexpr size_t kRootCauseRecords = 20;

class JobPage {
 public:
  // metrics must outlive this (and have seen each event before observe() does).
  JobPage(const AgentMetrics& metrics, JobPageSources sources);

  // Sees an event after the metrics did: keeps the root cause of each failed attempt.
  void observe(const nlohmann::json& event);
  // /job.json for an agent in agent_state (state_name()).
  [[nodiscard]] std::string json(const std::string& agent_state) const;
  // The page itself (text/html), the same for every job.
  [[nodiscard]] static const std::string& html();

 private:
  const AgentMetrics& metrics_;
  JobPageSources sources_;
  std::vector<nlohmann::ordered_json> root_causes_;
};

}  // namespace ddp::launcher
