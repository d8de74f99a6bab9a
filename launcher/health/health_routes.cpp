#include "launcher/health/health_routes.hpp"

namespace ddp::launcher {

HttpReply route_health_request(std::string_view method, std::string_view target,
                               const std::string& agent_state, const AgentMetrics& metrics) {
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
  } else {
    reply.status = 404;
    reply.body = "not found: " + std::string(path) + " (try /health or /metrics)\n";
  }
  return reply;
}

}  // namespace ddp::launcher
