#include "launcher/health/health_routes.hpp"

namespace ddp::launcher {

HttpReply route_health_request(std::string_view method, std::string_view target,
                               const std::string& agent_state, const AgentMetrics& metrics,
                               const JobPage* page) {
  HttpReply reply;
  if (method != "GET") {
    reply.status = 405;
    reply.allow = "GET";
    reply.body = "only GET is served here\n";
    return reply;
  }
  const auto path = target.substr(0, target.find('?'));
  if (path == "/health") {
    reply.status = is_healthy_state(agent_state) ? 200 : 503;
    reply.content_type = "application/json";
    reply.body = render_health_json(agent_state, metrics);
  } else if (path == "/metrics") {
    reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    reply.body = render_prometheus(agent_state, metrics);
  } else if (page != nullptr && path == "/") {
    reply.content_type = "text/html; charset=utf-8";
    reply.body = JobPage::html();
  } else if (page != nullptr && path == "/job.json") {
    reply.content_type = "application/json";
    reply.body = page->json(agent_state);
  } else {
    reply.status = 404;
    reply.body = "not found: " + std::string(path) +
                 (page != nullptr ? " (try /, /health, /metrics or /job.json)\n"
                                  : " (try /health or /metrics)\n");
  }
  return reply;
}

}  // namespace ddp::launcher
