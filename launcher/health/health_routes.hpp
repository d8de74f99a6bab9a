#pragma once
// What the health endpoint answers (docs/operations.md): GET /health (200 while the group is
// healthy, else 503; JSON), GET /metrics (Prometheus text), and with a job page GET / (the
// page, HTML) and GET /job.json (what it draws); 404 for any other path, 405 for any other
// method. Pure: no sockets.
#include <string>
#include <string_view>

#include "launcher/health/health_server.hpp"
#include "launcher/health/job_page.hpp"
#include "launcher/health/metrics_view.hpp"

namespace ddp::launcher {

// The reply to method target ("/health", "/metrics?x=1": a query is ignored) for an agent in
// agent_state (state_name()) whose events metrics has seen; page: the job page (null: none).
HttpReply route_health_request(std::string_view method, std::string_view target,
                               const std::string& agent_state, const AgentMetrics& metrics,
                               const JobPage* page = nullptr);

}  // namespace ddp::launcher
