// The health endpoint of a real ddplaunch: /health follows the group through a failure and a
// restart (with the real workers' pids), /metrics passes promtool, a real Prometheus scrapes
// it, and torchrun's TORCHELASTIC_HEALTH_CHECK_PORT and a busy port behave as documented.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/support/files.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 60s;
const std::string kDdplaunch = build_path("ddplaunch");
const std::string kWorker = source_path("tests/launcher/workers/health_worker.sh");
const std::string kPrometheus = "/usr/bin/prometheus";
const std::string kPromtool = "/usr/bin/promtool";

ChildOptions launch(std::vector<std::string> args, const TempDir& dir,
                    std::map<std::string, std::string> env = {}) {
  ChildOptions options;
  options.argv = {kDdplaunch};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = std::move(env);
  options.env["OUT_DIR"] = dir.path().string();
  return options;
}

// The port of the "health endpoint on http://127.0.0.1:PORT" line, once the agent printed it.
uint16_t endpoint_port(ChildProcess& agent) {
  const std::regex line(R"(ddplaunch: health endpoint on http://127\.0\.0\.1:(\d+)\n)");
  std::smatch match;
  std::string err;
  const bool found = wait_until(
      [&] {
        err = agent.err();
        return std::regex_search(err, match, line);
      },
      kGuard);
  INFO(err);
  REQUIRE(found);
  return static_cast<uint16_t>(std::stoi(match[1]));
}

// /health's JSON once pred holds for it (fails the test at the guard).
json health_when(uint16_t port, const std::function<bool(int, const json&)>& pred) {
  json body;
  int status = 0;
  const bool ok = wait_until(
      [&] {
        auto reply = http_get(port, "/health");
        status = reply.status;
        body = json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
        return !body.is_discarded() && pred(status, body);
      },
      kGuard);
  INFO(status << " " << body.dump());
  REQUIRE(ok);
  return body;
}

// The pid a worker of attempt/rank wrote, once it has.
int worker_pid(const TempDir& dir, int attempt, int rank) {
  const auto path = dir.file("pid_" + std::to_string(attempt) + "_" + std::to_string(rank));
  REQUIRE(wait_until([&] { return std::filesystem::exists(path); }, kGuard));
  return std::stoi(read_file(path));
}

void touch(const TempDir& dir, const std::string& name) {
  std::ofstream(dir.file(name)).flush();
}

// A loopback port nobody listens on now (the kernel's pick).
uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  auto* raw = reinterpret_cast<sockaddr*>(&addr);
  REQUIRE(::bind(fd, raw, sizeof(addr)) == 0);
  REQUIRE(::getsockname(fd, raw, &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

TEST_CASE("health endpoint: 200 while running, 503 while stopping, then the restarted group",
          "[process][health]") {
  TempDir dir;
  ChildProcess agent(launch({"--nproc_per_node=2", "--max_restarts=1", "--master_port=0",
                             "--health_port=0", "--stop_timeout=120", kWorker},
                            dir));
  const auto port = endpoint_port(agent);

  // Attempt 0 runs: healthy, with the pids the workers themselves report.
  const int first0 = worker_pid(dir, 0, 0);
  const int first1 = worker_pid(dir, 0, 1);
  auto running = health_when(
      port, [](int status, const json& b) { return status == 200 && b["workers"].size() == 2; });
  CHECK(running["state"] == "HEALTHY");
  CHECK(running["healthy"] == true);
  CHECK(running["round"] == 0);
  CHECK(running["restarts"] == 0);
  CHECK(running["max_restarts"] == 1);
  CHECK(running["workers"][0] ==
        json{{"rank", 0}, {"local_rank", 0}, {"pid", first0}, {"state", "RUNNING"}});
  CHECK(running["workers"][1] ==
        json{{"rank", 1}, {"local_rank", 1}, {"pid", first1}, {"state", "RUNNING"}});

  // Rank 0 fails; rank 1 holds the group in STOPPING until released.
  touch(dir, "fail");
  REQUIRE(wait_until([&] { return std::filesystem::exists(dir.file("term_1")); }, kGuard));
  auto stopping = http_get(port, "/health");
  CHECK(stopping.status == 503);
  auto body = json::parse(stopping.body);
  CHECK(body["state"] == "STOPPING");
  CHECK(body["healthy"] == false);
  CHECK(body["workers"][0]["pid"] == first0);
  CHECK(body["workers"][0]["state"] == "FAILED");
  CHECK(body["workers"][0]["exit_code"] == 3);
  CHECK(body["workers"][1]["state"] == "RUNNING");
  const auto failing = http_get(port, "/metrics");
  CHECK_THAT(failing.body, Contains("\nddplaunch_failures_total{kind=\"exit\"} 1\n"));
  CHECK_THAT(failing.body, Contains("\nddplaunch_group_healthy 0\n"));
  CHECK_THAT(failing.body, Contains("\nddplaunch_agent_state{state=\"STOPPING\"} 1\n"));

  // Released: the group restarts into round 1 with new workers.
  touch(dir, "release");
  const int second0 = worker_pid(dir, 1, 0);
  const int second1 = worker_pid(dir, 1, 1);
  auto restarted = health_when(port, [](int status, const json& b) {
    return status == 200 && b["round"] == 1 && b["workers"].size() == 2;
  });
  CHECK(restarted["restarts"] == 1);
  CHECK(restarted["workers"][0]["pid"] == second0);
  CHECK(restarted["workers"][1]["pid"] == second1);
  CHECK(restarted["workers"][1]["state"] == "RUNNING");

  const auto metrics = http_get(port, "/metrics");
  CHECK(metrics.status == 200);
  CHECK_THAT(metrics.headers, Contains("text/plain; version=0.0.4"));
  CHECK_THAT(metrics.body, Contains("\nddplaunch_restarts_total 1\n"));
  CHECK_THAT(metrics.body, Contains("\nddplaunch_rendezvous_rounds_total 2\n"));
  CHECK_THAT(metrics.body, Contains("ddplaunch_last_restart_phase_seconds{phase=\"total\"} "));
  // Prometheus' own linter accepts the exposition.
  REQUIRE(std::filesystem::exists(kPromtool));  // scripts/setup.sh installs prometheus
  const auto scraped = dir.write("metrics.txt", metrics.body);
  auto lint = run_process({"/bin/sh", "-c", kPromtool + " check metrics < " + scraped}, kGuard);
  INFO(lint.output);
  CHECK(lint.exit_code == 0);

  CHECK(http_get(port, "/nope").status == 404);
  CHECK(http_request(port, "POST", "/health").status == 405);

  agent.signal(SIGTERM);
  CHECK(agent.wait_for(kGuard) == 128 + SIGTERM);
  CHECK(http_get(port, "/health").status == 0);  // gone with the agent
}

TEST_CASE("health endpoint: a real Prometheus scrapes ddplaunch_restarts_total",
          "[process][health]") {
  REQUIRE(std::filesystem::exists(kPrometheus));  // scripts/setup.sh installs prometheus
  TempDir dir;
  touch(dir, "fail");  // rank 0 fails at once, rank 1 goes when told
  touch(dir, "release");
  ChildProcess agent(launch(
      {"--nproc_per_node=2", "--max_restarts=1", "--master_port=0", "--health_port=0", kWorker},
      dir));
  const auto port = endpoint_port(agent);
  health_when(port, [](int status, const json& b) { return status == 200 && b["round"] == 1; });

  const auto web_port = free_loopback_port();
  const auto config = dir.write("prometheus.yml",
                                "global:\n"
                                "  scrape_interval: 1s\n"
                                "  scrape_timeout: 1s\n"
                                "scrape_configs:\n"
                                "  - job_name: ddplaunch\n"
                                "    static_configs:\n"
                                "      - targets: ['127.0.0.1:" +
                                    std::to_string(port) + "']\n");
  ChildOptions prometheus;
  prometheus.argv = {
      kPrometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir.file("data"),
      "--web.listen-address=127.0.0.1:" + std::to_string(web_port), "--log.level=warn"};
  prometheus.merge_stderr = true;
  ChildProcess server(prometheus);

  const std::string query = "/api/v1/query?query=" + url_encode("ddplaunch_restarts_total");
  json result;
  const bool scraped = wait_until(
      [&] {
        auto reply = http_get(web_port, query);
        auto body = json::parse(reply.body, nullptr, false);
        if (body.is_discarded() || body["status"] != "success") return false;
        result = body["data"]["result"];
        return !result.empty();
      },
      kGuard);
  INFO(server.out());
  REQUIRE(scraped);
  REQUIRE(result.size() == 1);
  CHECK(result[0]["metric"]["job"] == "ddplaunch");
  CHECK(result[0]["metric"]["instance"] == "127.0.0.1:" + std::to_string(port));
  CHECK(result[0]["value"][1] == "1");

  agent.signal(SIGTERM);
  CHECK(agent.wait_for(kGuard) == 128 + SIGTERM);
}

TEST_CASE("health endpoint: torchrun's TORCHELASTIC_HEALTH_CHECK_PORT, and a busy port named",
          "[process][health]") {
  TempDir dir;
  const auto port = free_loopback_port();
  auto served = run_process(launch({"--master_port=0", "/bin/true"}, dir,
                                   {{"TORCHELASTIC_HEALTH_CHECK_PORT", std::to_string(port)}}),
                            kGuard);
  CHECK(served.exit_code == 0);
  CHECK_THAT(served.output,
             Contains("ddplaunch: health endpoint on http://127.0.0.1:" + std::to_string(port)));

  // Someone else listens on the port: ddplaunch refuses to start, naming it.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const auto busy = std::to_string(ntohs(addr.sin_port));
  auto refused =
      run_process(launch({"--master_port=0", "--health_port=" + busy, kWorker}, dir), kGuard);
  ::close(fd);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, Contains("--health_port=" + busy + ": cannot listen on 127.0.0.1:" +
                                      busy + ": Address already in use"));
  CHECK_FALSE(std::filesystem::exists(dir.file("pid_0_0")));  // nothing was started
}
