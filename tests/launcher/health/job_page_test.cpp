// The job page without sockets or a browser: the agent's events, its failures and the workers'
// output turned into /job.json, and the routes that serve it and the page.
#include "launcher/health/job_page.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "launcher/health/health_routes.hpp"
#include "tests/launcher/health/agent_events.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using ddp::launcher::test::event;
using nlohmann::json;

namespace {

// Feeds both views, in the order the agent's listener does.
struct Feed {
  AgentMetrics& metrics;
  JobPage& page;
  void operator()(const json& e) const {
    metrics.observe(e);
    page.observe(e);
  }
};

}  // namespace

TEST_CASE(
    "job.json: ranks with their output, a restart with its phases and root cause, a "
    "hang, an in-place recovery",
    "[job_page]") {
  AgentMetrics metrics("job42", 3);
  std::vector<WorkerFailure> failures;
  JobPageSources sources;
  sources.host = "node-a.example";
  sources.output = [](int local_rank) {
    return RankOutput{"step " + std::to_string(local_rank),
                      {"line of " + std::to_string(local_rank)}};
  };
  sources.failures = [&] { return failures; };
  JobPage page(metrics, sources);
  Feed feed{metrics, page};

  feed(event("rendezvous", 100,
             {{"round", 0}, {"group_rank", 1}, {"group_world_size", 2}, {"world_size", 4}}));
  feed(event("worker_start", 100.1, {{"rank", 2}, {"local_rank", 0}, {"pid", 11}}));
  feed(event("worker_start", 100.2, {{"rank", 3}, {"local_rank", 1}, {"pid", 12}}));
  feed(event("workers_started", 100.5));
  feed(event("hang", 104,
             {{"rank", 3},
              {"local_rank", 1},
              {"culprit", true},
              {"source", "progress"},
              {"scope", "step 7"},
              {"report", "rank 3: no progress for 2.0 s in step 7"}}));
  feed(event("worker_exit", 105, {{"pid", 12}, {"exit_code", 0}, {"signal", 6}}));
  feed(event("failure", 105, {{"kind", "hang"}, {"rank", 3}}));
  feed(event("stopping", 105.1, {{"reason", "failure"}, {"signal", 15}}));
  feed(event("worker_exit", 105.3, {{"pid", 11}, {"exit_code", 0}, {"signal", 15}}));
  feed(event("workers_stopped", 105.5));
  // The agent's failures when it records the restart: the culprit with its stack.
  WorkerFailure culprit;
  culprit.rank = 3;
  culprit.local_rank = 1;
  culprit.pid = 12;
  culprit.status = ExitStatus{0, 6};
  culprit.observed = std::chrono::system_clock::time_point(std::chrono::seconds(105));
  culprit.culprit = true;
  culprit.hang = "rank 3: no progress for 2.0 s in step 7";
  culprit.error = ErrorFileContent{"hang: rank 3 ...", "File \"x.py\", line 3 in stuck\n", 104.9};
  failures = {culprit};
  feed(event("restart", 105.6, {{"restarts_spent", 1}, {"failed_rank", 3}}));
  feed(event("rendezvous", 106,
             {{"round", 1}, {"group_rank", 1}, {"group_world_size", 2}, {"world_size", 4}}));
  feed(event("worker_start", 106.1, {{"rank", 2}, {"local_rank", 0}, {"pid", 21}}));
  feed(event("worker_start", 106.2, {{"rank", 3}, {"local_rank", 1}, {"pid", 22}}));
  feed(event("workers_started", 106.5));
  feed(event("recovery_started", 110, {{"reason", "node_waiting"}, {"round", 1}}));
  feed(event("rendezvous", 110.2,
             {{"round", 2}, {"group_rank", 0}, {"group_world_size", 3}, {"world_size", 6}}));
  feed(event("workers_resumed", 110.3, {{"round", 2}, {"kept", 2}, {"restarted", 0}}));
  feed(event("in_place_recovery", 110.5,
             {{"reason", "node_waiting"},
              {"from_round", 1},
              {"round", 2},
              {"kept", 2},
              {"restarted", 0},
              {"step", 40},
              {"aborted_ms", 3},
              {"reformed_ms", 150},
              {"state_sent_ms", -1},
              {"first_step_ms", 420}}));

  const auto job = json::parse(page.json("HEALTHY"));
  CHECK(job["state"] == "HEALTHY");
  CHECK(job["run_id"] == "job42");
  CHECK(job["host"] == "node-a.example");
  CHECK(job["round"] == 2);
  CHECK(job["restarts"] == 1);
  CHECK(job["max_restarts"] == 3);
  CHECK(job["in_place_recoveries"] == 1);
  CHECK(job["node"] == json{{"group_rank", 0}, {"group_world_size", 3}, {"world_size", 6}});
  CHECK(job["started"] == 100);
  CHECK(job["exit_code"].is_null());
  REQUIRE(job["workers"].size() == 2);
  CHECK(job["workers"][1]["rank"] == 3);
  CHECK(job["workers"][1]["pid"] == 22);
  CHECK(job["workers"][1]["state"] == "RUNNING");
  CHECK(job["workers"][1]["progress"] == "step 1");
  CHECK(job["workers"][1]["lines"] == json{"line of 1"});

  REQUIRE(job["timeline"].size() == 2);
  const auto& restart = job["timeline"][0];
  CHECK(restart["kind"] == "restart");
  CHECK(restart["cause"] == "hang");
  CHECK(restart["rank"] == 3);
  CHECK(restart["from_round"] == 0);
  CHECK(restart["round"] == 1);
  CHECK(restart["time"] == 105);
  CHECK(restart["phases"]["stopping"].get<double>() == Approx(0.5));
  CHECK(restart["phases"]["rendezvous"].get<double>() == Approx(0.5));
  CHECK(restart["phases"]["starting"].get<double>() == Approx(0.5));
  CHECK(restart["phases"]["total"].get<double>() == Approx(1.5));
  const auto& recovery = job["timeline"][1];
  CHECK(recovery["kind"] == "recovery");
  CHECK(recovery["time"] == 110);
  CHECK(recovery["reason"] == "node_waiting");
  CHECK(recovery["phases_ms"]["first_step"] == 420);
  CHECK(recovery["phases_ms"]["state_sent"] == -1);
  CHECK(recovery["kept"] == 2);
  CHECK(recovery["step"] == 40);

  REQUIRE(job["hangs"].size() == 1);
  CHECK(job["hangs"][0]["rank"] == 3);
  CHECK(job["hangs"][0]["culprit"] == true);
  CHECK(job["hangs"][0]["round"] == 0);
  CHECK(job["hangs"][0]["report"] == "rank 3: no progress for 2.0 s in step 7");

  REQUIRE(job["root_causes"].size() == 1);
  const auto& cause = job["root_causes"][0];
  CHECK(cause["rank"] == 3);
  CHECK(cause["round"] == 0);
  CHECK(cause["restarted"] == true);
  CHECK(cause["exit_code"] == 134);
  CHECK(cause["signal"] == "SIGABRT");
  CHECK(cause["time"].get<double>() == Approx(104.9));
  CHECK(cause["message"] == "hang: rank 3 ...");
  CHECK_THAT(cause["traceback"].get<std::string>(), Contains("line 3 in stuck"));

  // The end of a failed job names its root cause too; a clean end does not.
  feed(event("finish", 120, {{"exit_code", 0}}));
  CHECK(json::parse(page.json("DONE"))["root_causes"].size() == 1);
  CHECK(json::parse(page.json("DONE"))["exit_code"] == 0);
}

TEST_CASE("routes: / is the page, /job.json its data, only when there is a page", "[job_page]") {
  AgentMetrics metrics("none", 0);
  JobPage page(metrics, {});
  auto html = route_health_request("GET", "/?refresh=1", "HEALTHY", metrics, &page);
  CHECK(html.status == 200);
  CHECK(html.content_type == "text/html; charset=utf-8");
  CHECK_THAT(html.body, Contains("<!DOCTYPE html>") && Contains("fetch(\"/job.json\""));
  // Self-contained: nothing is fetched from anywhere else.
  CHECK_THAT(html.body, !Contains("http://") && !Contains("https://") && !Contains("<link") &&
                            !Contains("src="));
  auto data = route_health_request("GET", "/job.json", "RENDEZVOUS", metrics, &page);
  CHECK(data.status == 200);
  CHECK(data.content_type == "application/json");
  CHECK(json::parse(data.body)["state"] == "RENDEZVOUS");
  CHECK(json::parse(data.body)["workers"].empty());
  CHECK(route_health_request("GET", "/", "HEALTHY", metrics).status == 404);
  CHECK(route_health_request("GET", "/job.json", "HEALTHY", metrics).status == 404);
}
