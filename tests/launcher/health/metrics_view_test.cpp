// The health endpoint without sockets: the agent's events turned into /health's JSON and
// /metrics' Prometheus text, and which request gets which status.
#include "launcher/health/metrics_view.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "launcher/health/health_routes.hpp"
#include "tests/launcher/health/agent_events.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using ddp::launcher::test::event;
using nlohmann::json;

namespace {

// The events a one-node agent records for two workers, one of which fails (exit 3) while the
// other is stopped by SIGTERM, then a restart into round 1, in the agent's own order.
void feed_failed_attempt(AgentMetrics& m) {
  m.observe(event("rendezvous", 100, {{"round", 0}}));
  m.observe(event("worker_start", 100.1, {{"rank", 0}, {"local_rank", 0}, {"pid", 11}}));
  m.observe(event("worker_start", 100.2, {{"rank", 1}, {"local_rank", 1}, {"pid", 12}}));
  m.observe(event("workers_started", 100.5, {{"count", 2}}));
  m.observe(event("worker_exit", 110, {{"pid", 11}, {"exit_code", 3}, {"signal", 0}}));
  m.observe(event("failure", 110, {{"kind", "exit"}, {"rank", 0}}));
  m.observe(event("stopping", 110, {{"reason", "failure"}, {"signal", 15}}));
  m.observe(event("worker_exit", 111, {{"pid", 12}, {"exit_code", 0}, {"signal", 15}}));
  m.observe(event("workers_stopped", 112));
  m.observe(event("restart", 112, {{"restarts_spent", 1}}));
}

void feed_restarted_attempt(AgentMetrics& m) {
  m.observe(event("rendezvous", 113, {{"round", 1}}));
  m.observe(event("worker_start", 113.5, {{"rank", 0}, {"local_rank", 0}, {"pid", 21}}));
  m.observe(event("worker_start", 113.6, {{"rank", 1}, {"local_rank", 1}, {"pid", 22}}));
  m.observe(event("workers_started", 114, {{"count", 2}}));
}

// The sample lines of text as name{labels} -> value.
std::map<std::string, std::string> samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

}  // namespace

TEST_CASE("health JSON: the running workers with their pids, ranks and states", "[metrics]") {
  AgentMetrics m("job7", 3);
  m.observe(event("rendezvous", 100, {{"round", 0}}));
  m.observe(event("worker_start", 100.1, {{"rank", 4}, {"local_rank", 0}, {"pid", 11}}));
  m.observe(event("worker_start", 100.2, {{"rank", 5}, {"local_rank", 1}, {"pid", 12}}));
  auto body = json::parse(render_health_json("HEALTHY", m));
  CHECK(body["state"] == "HEALTHY");
  CHECK(body["healthy"] == true);
  CHECK(body["run_id"] == "job7");
  CHECK(body["round"] == 0);
  CHECK(body["restarts"] == 0);
  CHECK(body["max_restarts"] == 3);
  REQUIRE(body["workers"].size() == 2);
  CHECK(body["workers"][0] ==
        json{{"rank", 4}, {"local_rank", 0}, {"pid", 11}, {"state", "RUNNING"}});
  CHECK(body["workers"][1]["pid"] == 12);
  CHECK(body["workers"][1]["rank"] == 5);
}

TEST_CASE("health JSON: a failed worker, a stopped one, then the restarted group", "[metrics]") {
  AgentMetrics m("none", 1);
  feed_failed_attempt(m);
  auto stopping = json::parse(render_health_json("STOPPING", m));
  CHECK(stopping["healthy"] == false);
  CHECK(stopping["workers"][0]["state"] == "FAILED");
  CHECK(stopping["workers"][0]["exit_code"] == 3);
  CHECK(stopping["workers"][1]["state"] == "STOPPED");
  CHECK(stopping["workers"][1]["signal"] == 15);
  CHECK(stopping["restarts"] == 1);

  feed_restarted_attempt(m);
  auto healthy = json::parse(render_health_json("HEALTHY", m));
  CHECK(healthy["round"] == 1);
  CHECK(healthy["workers"].size() == 2);
  CHECK(healthy["workers"][0]["pid"] == 21);
  CHECK(healthy["workers"][1]["pid"] == 22);
  CHECK(healthy["workers"][1]["state"] == "RUNNING");
}

TEST_CASE("metrics: restarts, failures by kind, rounds and the last restart's phases",
          "[metrics]") {
  AgentMetrics m("none", 1);
  feed_failed_attempt(m);
  auto before = samples(render_prometheus("RENDEZVOUS", m));
  // No restart has finished yet: its phases are not exported half-done.
  CHECK(before.count("ddplaunch_last_restart_phase_seconds{phase=\"total\"}") == 0);
  CHECK(before["ddplaunch_group_healthy"] == "0");
  CHECK(before["ddplaunch_agent_state{state=\"RENDEZVOUS\"}"] == "1");
  CHECK(before["ddplaunch_agent_state{state=\"HEALTHY\"}"] == "0");

  feed_restarted_attempt(m);
  auto after = samples(render_prometheus("HEALTHY", m));
  CHECK(after["ddplaunch_restarts_total"] == "1");
  CHECK(after["ddplaunch_max_restarts"] == "1");
  CHECK(after["ddplaunch_failures_total{kind=\"exit\"}"] == "1");
  CHECK(after["ddplaunch_failures_total{kind=\"signal\"}"] == "0");
  CHECK(after["ddplaunch_failures_total{kind=\"hang\"}"] == "0");
  CHECK(after["ddplaunch_failures_total{kind=\"node_lost\"}"] == "0");
  CHECK(after["ddplaunch_rendezvous_rounds_total"] == "2");
  CHECK(after["ddplaunch_rendezvous_round"] == "1");
  CHECK(after["ddplaunch_workers{state=\"RUNNING\"}"] == "2");
  CHECK(after["ddplaunch_workers{state=\"FAILED\"}"] == "0");
  CHECK(after["ddplaunch_group_healthy"] == "1");
  CHECK(after["ddplaunch_last_restart_timestamp_seconds{phase=\"failure_detected\"}"] == "110");
  CHECK(after["ddplaunch_last_restart_timestamp_seconds{phase=\"workers_stopped\"}"] == "112");
  CHECK(after["ddplaunch_last_restart_timestamp_seconds{phase=\"rendezvous_done\"}"] == "113");
  CHECK(after["ddplaunch_last_restart_timestamp_seconds{phase=\"workers_started\"}"] == "114");
  CHECK(after["ddplaunch_last_restart_phase_seconds{phase=\"stopping\"}"] == "2");
  CHECK(after["ddplaunch_last_restart_phase_seconds{phase=\"rendezvous\"}"] == "1");
  CHECK(after["ddplaunch_last_restart_phase_seconds{phase=\"starting\"}"] == "1");
  CHECK(after["ddplaunch_last_restart_phase_seconds{phase=\"total\"}"] == "4");
}

TEST_CASE("metrics: every failure kind counted under its own label", "[metrics]") {
  AgentMetrics m("none", 5);
  for (const char* kind : {"signal", "hang", "node_lost", "hang"}) {
    m.observe(event("failure", 1, {{"kind", kind}}));
  }
  auto s = samples(render_prometheus("STOPPING", m));
  CHECK(s["ddplaunch_failures_total{kind=\"signal\"}"] == "1");
  CHECK(s["ddplaunch_failures_total{kind=\"hang\"}"] == "2");
  CHECK(s["ddplaunch_failures_total{kind=\"node_lost\"}"] == "1");
  CHECK(s["ddplaunch_failures_total{kind=\"exit\"}"] == "0");
}

TEST_CASE("metrics: a membership re-form is timed like a restart", "[metrics]") {
  AgentMetrics m("none", 0);
  m.observe(event("rendezvous", 10, {{"round", 0}}));
  m.observe(event("workers_started", 11));
  m.observe(event("membership_change", 20, {{"change", "node_waiting"}}));
  m.observe(event("stopping", 20, {{"reason", "membership"}}));
  m.observe(event("workers_stopped", 21.5));
  m.observe(event("rendezvous", 23, {{"round", 1}}));
  m.observe(event("workers_started", 23.25));
  auto s = samples(render_prometheus("HEALTHY", m));
  CHECK(s["ddplaunch_last_restart_phase_seconds{phase=\"total\"}"] == "3.25");
  CHECK(s["ddplaunch_restarts_total"] == "0");  // a re-form spends no restart
  CHECK(s["ddplaunch_failures_total{kind=\"exit\"}"] == "0");
}

TEST_CASE("metrics: in-place recoveries are counted with their phases, not timed as restarts",
          "[metrics][recovery]") {
  AgentMetrics m("job", 0);
  m.observe(event("rendezvous", 100, {{"round", 0}}));
  m.observe(event("worker_start", 100.1, {{"rank", 0}, {"local_rank", 0}, {"pid", 11}}));
  m.observe(event("workers_started", 100.5, {{"count", 1}}));
  CHECK_THAT(render_prometheus("HEALTHY", m), Contains("ddplaunch_in_place_recoveries_total 0"));
  m.observe(event("membership_change", 110, {{"change", "node_lost"}}));
  m.observe(event("rendezvous", 110.3, {{"round", 1}}));
  m.observe(event("workers_resumed", 110.3, {{"kept", 1}, {"restarted", 0}}));
  m.observe(event(
      "in_place_recovery", 110.4,
      {{"aborted_ms", 2}, {"reformed_ms", 300}, {"state_sent_ms", 320}, {"first_step_ms", 350}}));
  CHECK(m.in_place_recoveries() == 1);
  CHECK(m.last_restart().workers_started == 0);  // nothing was restarted
  CHECK(m.workers().size() == 1);
  CHECK(m.workers()[0].state == "RUNNING");
  const auto text = render_prometheus("HEALTHY", m);
  CHECK_THAT(text, Contains("ddplaunch_in_place_recoveries_total 1"));
  CHECK_THAT(text, Contains("ddplaunch_last_in_place_recovery_seconds{phase=\"first_step\"} 0.35"));
  CHECK_THAT(text, Contains("ddplaunch_last_in_place_recovery_seconds{phase=\"reformed\"} 0.3"));
}

TEST_CASE("metrics text: HELP and TYPE before every family, counters end in _total", "[metrics]") {
  AgentMetrics m("a \"quoted\\\" id\nwith a newline", 1);
  feed_failed_attempt(m);
  feed_restarted_attempt(m);
  const auto text = render_prometheus("HEALTHY", m);
  std::map<std::string, std::string> types;
  std::set<std::string> helped;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    if (line.rfind("# HELP ", 0) == 0) {
      helped.insert(line.substr(7, line.find(' ', 7) - 7));
    } else if (line.rfind("# TYPE ", 0) == 0) {
      const auto name = line.substr(7, line.find(' ', 7) - 7);
      types[name] = line.substr(line.rfind(' ') + 1);
      CHECK(helped.count(name) == 1);
    } else {
      const auto name = line.substr(0, line.find_first_of("{ "));
      REQUIRE(types.count(name) == 1);
      CHECK(name.rfind("ddplaunch_", 0) == 0);
      CHECK((types[name] == "counter") == name.ends_with("_total"));
    }
  }
  // The run id's quote, backslash and newline are escaped, so the line stays one sample.
  CHECK_THAT(text,
             Contains("ddplaunch_info{run_id=\"a \\\"quoted\\\\\\\" id\\nwith a newline\"} 1\n"));
}

TEST_CASE("routes: /health is 200 only while the group is healthy, else 503", "[metrics]") {
  AgentMetrics m("none", 0);
  auto healthy = route_health_request("GET", "/health", "HEALTHY", m);
  CHECK(healthy.status == 200);
  CHECK(healthy.content_type == "application/json");
  CHECK(json::parse(healthy.body)["state"] == "HEALTHY");
  for (const char* state : {"INIT", "RENDEZVOUS", "STOPPING", "EXITING", "DONE"}) {
    auto reply = route_health_request("GET", "/health", state, m);
    CHECK(reply.status == 503);
    CHECK(json::parse(reply.body)["state"] == state);
  }
}

TEST_CASE("routes: /metrics in Prometheus' format, other paths 404, other methods 405",
          "[metrics]") {
  AgentMetrics m("none", 0);
  auto metrics = route_health_request("GET", "/metrics?name[]=x", "STOPPING", m);
  CHECK(metrics.status == 200);
  CHECK(metrics.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK_THAT(metrics.body, Contains("ddplaunch_group_healthy 0\n"));
  auto missing = route_health_request("GET", "/healthz", "HEALTHY", m);
  CHECK(missing.status == 404);
  CHECK_THAT(missing.body, Contains("/healthz"));
  for (const char* method : {"POST", "PUT", "DELETE", "HEAD"}) {
    auto reply = route_health_request(method, "/health", "HEALTHY", m);
    CHECK(reply.status == 405);
    CHECK(reply.allow == "GET");
  }
}

TEST_CASE("metrics: a spare standing by, then admitted, in /metrics and /health", "[metrics]") {
  AgentMetrics m("job7", 3);
  auto body = json::parse(render_health_json("RENDEZVOUS", m));
  CHECK(body["spare"] == false);
  CHECK(samples(render_prometheus("RENDEZVOUS", m))["ddplaunch_spare"] == "0");

  m.observe(event("spare", 100, {{"run_id", "job7"}, {"round", 1}, {"group_full_at", 2}}));
  body = json::parse(render_health_json("RENDEZVOUS", m));
  CHECK(body["spare"] == true);
  auto s = samples(render_prometheus("RENDEZVOUS", m));
  CHECK(s["ddplaunch_spare"] == "1");
  CHECK(s["ddplaunch_spare_admissions_total"] == "0");

  m.observe(event("spare_admitted", 130, {{"round", 1}, {"group_rank", 1}}));
  m.observe(event("rendezvous", 130, {{"round", 1}}));
  s = samples(render_prometheus("HEALTHY", m));
  CHECK(s["ddplaunch_spare"] == "0");
  CHECK(s["ddplaunch_spare_admissions_total"] == "1");
  CHECK(json::parse(render_health_json("HEALTHY", m))["spare"] == false);
}

TEST_CASE("metrics: a spare the job ended without is no longer one", "[metrics]") {
  AgentMetrics m("job7", 3);
  m.observe(event("spare", 100, {{"round", 1}, {"group_full_at", 2}}));
  m.observe(event("not_needed", 200, {{"message", "the job finished without needing this node"}}));
  m.observe(event("finish", 200, {{"exit_code", 0}}));
  auto s = samples(render_prometheus("DONE", m));
  CHECK(s["ddplaunch_spare"] == "0");
  CHECK(s["ddplaunch_spare_admissions_total"] == "0");
}

TEST_CASE("metrics: standby workers parked now, and how many took a place", "[metrics][standby]") {
  AgentMetrics m("job7", 3);
  auto s = samples(render_prometheus("HEALTHY", m));
  CHECK(s["ddplaunch_standby_workers"] == "0");
  CHECK(s["ddplaunch_standby_promotions_total"] == "0");
  m.observe(event("standby_start", 100, {{"pid", 41}}));
  CHECK(samples(render_prometheus("HEALTHY", m))["ddplaunch_standby_workers"] == "0");
  m.observe(event("standby_ready", 102, {{"pid", 41}, {"ms", 2000}}));
  m.observe(event("standby_ready", 103, {{"pid", 42}, {"ms", 2100}}));
  CHECK(samples(render_prometheus("HEALTHY", m))["ddplaunch_standby_workers"] == "2");
  m.observe(event("standby_promoted", 200, {{"pid", 41}, {"rank", 1}, {"local_rank", 0}}));
  m.observe(event("standby_exit", 210, {{"pid", 42}, {"exit_code", 0}, {"signal", 9}}));
  s = samples(render_prometheus("HEALTHY", m));
  CHECK(s["ddplaunch_standby_workers"] == "0");
  CHECK(s["ddplaunch_standby_promotions_total"] == "1");
  m.observe(event("standby_ready", 220, {{"pid", 43}}));
  m.observe(event("standby_off", 230, {{"reason", "three died in a row"}}));
  CHECK(samples(render_prometheus("HEALTHY", m))["ddplaunch_standby_workers"] == "0");
}
