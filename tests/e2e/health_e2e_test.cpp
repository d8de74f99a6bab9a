// The health endpoint of elastic nodes: when a node is SIGKILLed, the survivors' /metrics
// count a node_lost failure (spending no restart) and time the re-form, and /health follows.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "agent_process.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/wait_until.hpp"

using namespace std::chrono_literals;
using ddp::test::AgentProcess;
using nlohmann::json;

namespace {

constexpr auto kGuard = 60s;  // hang guard; nothing asserts on speed
const std::string kWorker = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/worker.sh";
const std::string kFastConf =
    "last_call_timeout=1,join_timeout=30,heartbeat_interval=0.2,lease_timeout=1";

std::vector<std::string> node(int port, const std::string& addr) {
  return {"--nnodes",       "2:3",    "--nproc_per_node", "2",
          "--rdzv_backend", "c10d",   "--rdzv_endpoint",  "127.0.0.1:" + std::to_string(port),
          "--rdzv_id",      "health", "--rdzv_conf",      kFastConf,
          "--local_addr",   addr,     "--health_port",    "0",
          kWorker};
}

uint16_t endpoint_port(const AgentProcess& agent) {
  const auto port = ddp::test::health_endpoint_port(agent, kGuard);
  REQUIRE(port.has_value());
  return *port;
}

// The value of one sample line ("name{labels}") of /metrics, "" when absent.
std::string sample(uint16_t port, const std::string& name) {
  const auto body = ddp::test::http_get(port, "/metrics").body;
  const auto at = body.find("\n" + name + " ");
  if (at == std::string::npos) return "";
  const auto start = at + name.size() + 2;
  return body.substr(start, body.find('\n', start) - start);
}

}  // namespace

TEST_CASE("e2e health: a SIGKILLed node is a node_lost failure on the survivors' metrics",
          "[e2e][multinode][health]") {
  const auto dir = ddp::test::make_temp_dir();
  const int port = ddp::test::free_port();
  const std::map<std::string, std::string> env{
      {"EXIT_AT_NODES", "never"}, {"PID_DIR", dir}, {"NODE_TAG", "n"}};
  std::vector<std::unique_ptr<AgentProcess>> agents;
  for (const char* addr : {"127.0.0.1", "127.0.0.2", "127.0.0.3"}) {
    agents.push_back(std::make_unique<AgentProcess>(node(port, addr), env,
                                                    dir + "/" + std::string(addr) + ".log"));
  }
  for (auto& agent : agents) REQUIRE(agent->wait_for_log("WORLD_SIZE=6", kGuard));
  const auto a = endpoint_port(*agents[0]);
  const auto b = endpoint_port(*agents[1]);
  auto round_of = [](uint16_t p) {
    const auto reply = ddp::test::http_get(p, "/health");
    const auto body = json::parse(reply.body, nullptr, false);
    return reply.status == 200 && !body.is_discarded() ? body["round"].get<int>() : -1;
  };
  REQUIRE(ddp::test::wait_until([&] { return round_of(a) >= 0 && round_of(b) >= 0; }, kGuard));
  const int before = round_of(a);

  agents[2]->kill(SIGKILL);
  for (const auto p : {a, b}) {
    INFO("port " << p);
    // Healthy again in a later round, of two nodes.
    CHECK(ddp::test::wait_until([&] { return round_of(p) > before; }, kGuard));
    CHECK(sample(p, "ddplaunch_failures_total{kind=\"node_lost\"}") == "1");
    CHECK(sample(p, "ddplaunch_restarts_total") == "0");
    CHECK_FALSE(sample(p, "ddplaunch_last_restart_phase_seconds{phase=\"total\"}").empty());
  }
  // The re-formed round's workers print once they run, a moment after the round is reported.
  CHECK(agents[0]->wait_for_log("WORLD_SIZE=4", kGuard));
  agents.clear();  // SIGKILL + reap
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
