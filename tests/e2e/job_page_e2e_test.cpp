// The job page (docs/operations.md) in a real browser: headless Chromium keeps one page of an
// agent open while its job has a hang (dumped, a restart) and then a node joins (an in-place
// recovery); the page's own script must show each as it happens. A screenshot of the end is
// written to <build>/tests/job_page.png (docs/images/job_page.png is one).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "agent_process.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "tests/support/files.hpp"
#include "tests/support/headless_browser.hpp"
#include "tests/support/wait_until.hpp"

using namespace std::chrono_literals;
using ddp::test::AgentProcess;
using ddp::test::HeadlessBrowser;
using nlohmann::json;

namespace {

constexpr auto kGuard = 120s;
const std::string kTrain = std::string(DDP_BINARY_DIR) + "/train";
const std::string kFastConf =
    "last_call_timeout=0.5,join_timeout=60,heartbeat_interval=0.2,lease_timeout=1,is_host=false";

// Evaluates expression in the page until it is true (the page redraws once a second).
bool page_shows(HeadlessBrowser& browser, const std::string& expression) {
  return ddp::test::wait_until([&] { return browser.evaluate(expression) == true; }, kGuard);
}

// The agents' logs, for a failed expectation.
std::string logs_of(const std::vector<const AgentProcess*>& agents) {
  std::string text;
  for (const auto* agent : agents) {
    if (agent != nullptr) text += "--- agent ---\n" + agent->log();
  }
  return text;
}

}  // namespace

TEST_CASE(
    "the job page in headless Chromium follows a hang, its restart and an in-place "
    "recovery as they happen",
    "[e2e][job_page]") {
  const auto chromium = HeadlessBrowser::find();
  if (!chromium) FAIL("no chromium on PATH: scripts/setup.sh installs Debian's chromium");
  const std::string dir = ddp::test::make_temp_dir();
  ddp::rendezvous::StoreServer store{{"127.0.0.1", 0}};
  const std::string endpoint = "127.0.0.1:" + std::to_string(store.port());
  // Rank 1 stops making progress after step 3 in the first attempt: hang detection names it,
  // dumps its stack and the group restarts. 50 ms per step keeps the job running for 20 s
  // (12 epochs of 30 steps) after that, long enough for a node to join and the page to see it.
  const std::vector<std::string> train{kTrain,      "--data",
                                       "synthetic", "--synthetic_rows",
                                       "1200",      "--synthetic_features",
                                       "16",        "--synthetic_classes",
                                       "4",         "--hidden",
                                       "32,32",     "--batch_size",
                                       "16",        "--epochs",
                                       "12",        "--log_every",
                                       "1",         "--fault_slow_step_ms",
                                       "50",        "--fault_hang_at_step",
                                       "3",         "--fault_rank",
                                       "1"};
  auto node = [&](const std::string& tag, const std::string& addr, const std::string& nproc) {
    std::vector<std::string> args{"--nnodes",
                                  "1:2",
                                  "--nproc_per_node",
                                  nproc,
                                  "--rdzv_backend",
                                  "c10d",
                                  "--rdzv_endpoint",
                                  endpoint,
                                  "--rdzv_id",
                                  "page",
                                  "--rdzv_conf",
                                  kFastConf,
                                  "--local_addr",
                                  addr,
                                  "--stop_timeout",
                                  "2",
                                  "--in_place_recovery",
                                  "--hang_timeout",
                                  "2",
                                  "--max_restarts",
                                  "2",
                                  "--health_port",
                                  "0"};
    args.insert(args.end(), train.begin(), train.end());
    return std::make_unique<AgentProcess>(args, std::map<std::string, std::string>{},
                                          dir + "/" + tag + ".log");
  };
  std::unique_ptr<AgentProcess> a;
  std::unique_ptr<AgentProcess> b;
  // Chromium first (it takes seconds to start), then the job.
  HeadlessBrowser browser(*chromium, dir + "/profile");
  a = node("a", "127.0.0.1", "2");
  const auto port = ddp::test::health_endpoint_port(*a, kGuard);
  REQUIRE(port.has_value());
  // A page expression that must become true; the agents' logs when it does not.
  auto shows = [&](const std::string& expression) {
    const bool shown = page_shows(browser, expression);
    INFO(expression << (shown ? "" : "\n" + logs_of({a.get(), b.get()})));
    CHECK(shown);
  };
  browser.navigate("http://127.0.0.1:" + std::to_string(*port) + "/");

  // Expected at once: the page draws itself from /job.json: the state, this node, its ranks.
  shows("document.querySelectorAll('#workers tbody tr').length === 2");
  CHECK(browser.evaluate("document.title") == "ddplaunch job");
  CHECK(browser.evaluate("document.getElementById('run-id').textContent") == "page");
  shows("document.querySelector('#nodes .node.here') !== null");

  // Expected after the hang: a restart on the timeline with its cause and phase times, the
  // hang with rank 1 as its culprit and a stack, the root cause naming rank 1.
  shows("document.querySelector('#events tr[data-kind=\"restart\"]') !== null");
  shows("document.querySelector('#timeline .mark.restart') !== null");
  const std::string restart_row =
      browser.evaluate("document.querySelector('#events tr[data-kind=\"restart\"]').textContent");
  CHECK_THAT(restart_row, Catch::Contains("hang (rank 1)") && Catch::Contains("0 → 1") &&
                              Catch::Contains("stopping") && Catch::Contains("total"));
  shows("document.querySelector('#hangs .hang-entry[data-rank=\"1\"]') !== null");
  CHECK_THAT(browser.evaluate("document.getElementById('hangs').textContent").get<std::string>(),
             Catch::Contains("rank 1 (culprit)"));
  shows("document.querySelector('#hangs pre.stack').textContent.length > 0");
  shows("document.querySelector('#root-cause [data-rank=\"1\"]') !== null");
  shows("document.getElementById('restarts').textContent === '1 of 2'");
  shows("document.getElementById('round').textContent === '1'");
  // The ranks of round 1 are running again.
  shows(
      "[...document.querySelectorAll('#workers tbody tr')].every("
      "r => r.dataset.state === 'RUNNING')");

  // A second node joins: the ranks of the first are kept and told their new place.
  b = node("b", "127.0.0.2", "1");
  shows("document.querySelector('#events tr[data-kind=\"recovery\"]') !== null");
  shows("document.querySelector('#timeline .mark.recovery') !== null");
  const std::string recovery_row =
      browser.evaluate("document.querySelector('#events tr[data-kind=\"recovery\"]').textContent");
  CHECK_THAT(recovery_row, Catch::Contains("node_waiting") && Catch::Contains("2 kept") &&
                               Catch::Contains("first_step"));
  shows("document.getElementById('recoveries').textContent === '1'");
  shows("document.querySelectorAll('#nodes .node').length === 2");
  // The same page load saw all of it: it redrew itself many times.
  CHECK(browser.evaluate("Number(document.getElementById('status').dataset.updates)").get<int>() >
        3);
  // Each rank's latest lines are on the page (the trainer's progress lines come from rank 0).
  shows(
      "document.querySelector('#workers tr[data-rank=\"0\"] pre')"
      ".textContent.includes('step')");
  std::ofstream(std::string(DDP_BINARY_DIR) + "/tests/job_page.png", std::ios::binary)
      << browser.screenshot_png();

  CHECK(a->wait(kGuard) == 0);
  CHECK(b->wait(kGuard) == 0);
  INFO(logs_of({a.get(), b.get()}));
  // Once the agent is gone the page says so instead of showing stale data as current.
  shows("document.getElementById('status').className === 'lost'");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
