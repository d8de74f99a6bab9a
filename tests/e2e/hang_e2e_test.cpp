// Hang detection end to end (docs/hangs.md): real ddplaunch agents, real workers that stop
// making progress. Each case writes down what a user sees: who is named, what is dumped,
// whether the job recovers. Timeouts are short (1-2 s) so the file stays quick; nothing
// asserts on speed.
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "agent_process.hpp"
#include "tests/support/checkpoint_weights.hpp"
#include "tests/support/wait_until.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::test::AgentProcess;

namespace {

constexpr auto kGuard = 90s;
const std::string kSource = DDP_SOURCE_DIR;
const std::string kTrain = std::string(DDP_BINARY_DIR) + "/train";
const std::string kStopMe = kSource + "/tests/e2e/scripts/stop_me.sh";
const std::string kPyWorker = kSource + "/tests/e2e/scripts/hang_worker.py";

struct Run {
  std::string dir = ddp::test::make_temp_dir();
  std::unique_ptr<AgentProcess> agent;
  ~Run() {
    agent.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  AgentProcess& start(std::vector<std::string> args, std::map<std::string, std::string> env = {},
                      const std::string& tag = "agent") {
    env["PID_DIR"] = dir;
    env["PYTHONPATH"] = kSource + "/worker_runtime/python";
    env["PYTHON_EXEC"] = "/usr/bin/python3";
    agent = std::make_unique<AgentProcess>(args, env, dir + "/" + tag + ".log");
    return *agent;
  }
};

std::vector<std::string> launch(int nproc, int max_restarts, const std::string& hang_timeout) {
  std::vector<std::string> args{"--standalone",
                                "--nproc_per_node",
                                std::to_string(nproc),
                                "--max_restarts",
                                std::to_string(max_restarts),
                                "--stop_timeout",
                                "2"};
  if (!hang_timeout.empty()) {
    args.push_back("--hang_timeout");
    args.push_back(hang_timeout);
  }
  return args;
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<std::string> train_args(const std::string& dir) {
  return {kTrain,
          "--data",
          "synthetic",
          "--synthetic_rows",
          "640",
          "--synthetic_features",
          "16",
          "--synthetic_classes",
          "4",
          "--hidden",
          "32,32",
          "--batch_size",
          "16",
          "--epochs",
          "2",
          "--seed",
          "3",
          "--log_every",
          "8",
          "--checkpoint_dir",
          dir + "/ckpt",
          "--checkpoint_every",
          "5",
          "--out",
          dir + "/final.safetensors"};
}

pid_t read_pid(const std::string& path) {
  pid_t pid = 0;
  for (int i = 0; i < 500 && pid == 0; ++i) {
    std::ifstream in(path);
    if (!(in >> pid)) std::this_thread::sleep_for(20ms);
  }
  return pid;
}

}  // namespace

TEST_CASE(
    "hang e2e: a native rank that stops progressing is named with its step and collective, "
    "and the restarted run ends like a clean one",
    "[hang][e2e]") {
  Run clean;
  auto& c = clean.start(with(launch(2, 0, ""), train_args(clean.dir)));
  REQUIRE(c.wait(kGuard) == 0);

  Run hung;
  auto& a = hung.start(
      with(launch(2, 1, "2"),
           with(train_args(hung.dir), {"--fault_hang_at_step", "13", "--fault_rank", "1"})));
  const auto rc = a.wait(kGuard);
  INFO(a.log());
  REQUIRE(rc == 0);
  // Rank 1 sleeps after step 13 (working on 14); rank 0 waits in the next all-reduce.
  CHECK_THAT(a.log(), Contains("hang detected: rank 1: no progress for") &&
                          Contains("in step 14, after collective all_reduce #") &&
                          Contains("rank 0 waits in all_reduce #"));
  // Its stack was asked for before it was killed: the runtime's backtrace names the trainer.
  CHECK_THAT(a.log(), Contains("received Aborted; backtrace:") && Contains("maybe_inject_fault"));
  CHECK_THAT(a.log(), Contains("resumed from") && Contains("restarting, attempt 1 of 1"));
  CHECK(ddp::test::checkpoint_weights(hung.dir + "/final.safetensors") ==
        ddp::test::checkpoint_weights(clean.dir + "/final.safetensors"));
}

TEST_CASE("hang e2e: with no restart left the summary carries the hang and the native backtrace",
          "[hang][e2e]") {
  Run run;
  auto& a = run.start(
      with(launch(2, 0, "1.5"),
           with(train_args(run.dir), {"--fault_hang_at_step", "3", "--fault_rank", "0"})));
  const auto rc = a.wait(kGuard);
  INFO(a.log());
  REQUIRE(rc.has_value());
  CHECK(*rc == 128 + SIGABRT);  // the culprit's status: it died of the dump signal
  CHECK_THAT(a.log(), Contains("Root Cause") && Contains("rank      : 0 (local_rank: 0)") &&
                          Contains("hang      : rank 0: no progress for") &&
                          Contains("stderr    : (last") && Contains("maybe_inject_fault"));
}

TEST_CASE("hang e2e: a stopped worker with no progress source is hung after the timeout",
          "[hang][e2e]") {
  Run run;
  auto& a = run.start(with(launch(2, 1, "1"), {kStopMe}));
  const pid_t pid = read_pid(run.dir + "/1.pid");
  REQUIRE(pid > 0);
  REQUIRE(a.wait_for_log("PYTHONFAULTHANDLER=1", kGuard));
  ::kill(pid, SIGSTOP);
  const auto rc = a.wait(kGuard);
  INFO(a.log());
  REQUIRE(rc == 0);  // restarted, and the second attempt finishes
  CHECK_THAT(a.log(), Contains("hang detected: rank 1: stopped (state T), no progress for") &&
                          Contains("(no progress source)") && Contains("state T"));
  CHECK_THAT(a.log(), Contains("restarting, attempt 1 of 1"));
}

TEST_CASE(
    "hang e2e: a slow job that keeps reporting progress and a job with no source are "
    "never killed",
    "[hang][e2e]") {
  SECTION("slow but progressing: a step every 0.4 s against a 1 s timeout, for 4 s") {
    Run run;
    auto& a = run.start(with(launch(2, 0, "1"), {kPyWorker}), {{"HANG_MODE", "slow"}});
    const auto rc = a.wait(kGuard);
    INFO(a.log());
    CHECK(rc == 0);
    CHECK_THAT(a.log(), !Contains("hang detected"));
  }
  SECTION("no progress source, sleeping (state S) 4 s against a 1 s timeout") {
    Run run;
    auto& a = run.start(with(launch(1, 0, "1"), {kStopMe}), {{"IDLE_SECONDS", "4"}});
    const auto rc = a.wait(kGuard);
    INFO(a.log());
    CHECK(rc == 0);
    CHECK_THAT(a.log(), !Contains("hang detected"));
  }
}

TEST_CASE("hang e2e: a Python rank behind the others is dumped: its traceback is in the summary",
          "[hang][e2e]") {
  Run run;
  auto& a = run.start(with(launch(2, 0, "1"), {kPyWorker}), {{"HANG_MODE", "stuck"}});
  const auto rc = a.wait(kGuard);
  INFO(a.log());
  REQUIRE(rc.has_value());
  CHECK(*rc == 128 + SIGABRT);
  CHECK_THAT(a.log(), Contains("hang detected: rank 1: no progress for") && Contains("in step 1"));
  // faulthandler (PYTHONFAULTHANDLER=1, set by the agent) printed where rank 1 was.
  CHECK_THAT(a.log(), Contains("Fatal Python error: Aborted") && Contains("stuck_in_here") &&
                          Contains("message   : hang: rank 1"));
}

namespace {

// Two agents (127.0.0.1 and 127.0.0.2), 2 native ranks each, rank 3 stops making progress
// after step 13 on the first attempt. rendezvous(addr, node) gives each agent's rendezvous
// flags. Both agents must name the same culprit, step and collective, and both recover.
void two_nodes_name_the_same_culprit(
    const std::function<std::vector<std::string>(const std::string&, int)>& rendezvous) {
  Run a;
  Run b;
  const auto node = [&](const std::string& addr, int index) {
    return with(with(rendezvous(addr, index), {"--nproc_per_node", "2", "--max_restarts", "1",
                                               "--stop_timeout", "2", "--hang_timeout", "2"}),
                with(train_args(a.dir), {"--fault_hang_at_step", "13", "--fault_rank", "3"}));
  };
  auto& second = b.start(node("127.0.0.2", 1), {}, "b");
  auto& first = a.start(node("127.0.0.1", 0), {}, "a");
  const auto rc_a = first.wait(kGuard);
  const auto rc_b = second.wait(kGuard);
  INFO(first.log());
  INFO(second.log());
  CHECK(rc_a == 0);
  CHECK(rc_b == 0);
  // Both agents print the same culprit, step and collective (the seconds may differ).
  const std::regex named(
      "hang detected: rank (\\d+): no progress for [0-9.]+ s in step (\\d+), "
      "after collective all_reduce #(\\d+)");
  std::smatch ma;
  std::smatch mb;
  const std::string la = first.log();
  const std::string lb = second.log();
  REQUIRE(std::regex_search(la, ma, named));
  REQUIRE(std::regex_search(lb, mb, named));
  CHECK(ma[1] == "3");
  CHECK(mb[1] == "3");
  CHECK(ma[2] == mb[2]);
  CHECK(ma[3] == mb[3]);
  // The node with ranks 0-1 had only victims.
  CHECK_THAT(la + lb, Contains("the hung rank is on another node"));
}

}  // namespace

TEST_CASE("hang e2e: two elastic nodes name the same culprit, and both recover",
          "[hang][e2e][multinode]") {
  const auto endpoint = "127.0.0.1:" + std::to_string(ddp::test::free_port());
  two_nodes_name_the_same_culprit([&](const std::string& addr, int) {
    return std::vector<std::string>{"--nnodes",        "2",      "--rdzv_backend", "c10d",
                                    "--rdzv_endpoint", endpoint, "--rdzv_id",      "hang",
                                    "--local_addr",    addr};
  });
}

TEST_CASE("hang e2e: two static nodes name the same culprit, and both recover",
          "[hang][e2e][multinode]") {
  const auto port = std::to_string(ddp::test::free_port());
  two_nodes_name_the_same_culprit([&](const std::string& addr, int node_rank) {
    return std::vector<std::string>{
        "--nnodes",      "2",         "--node_rank",   std::to_string(node_rank),
        "--master_addr", "127.0.0.1", "--master_port", port,
        "--local_addr",  addr};
  });
}

namespace {

// Every process below pid (its children, theirs, ...), from /proc.
std::vector<pid_t> descendants(pid_t pid) {
  std::map<pid_t, std::vector<pid_t>> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    if (rest >> state >> parent) children[parent].push_back(std::stoi(name));
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo{pid};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : children[p]) {
      out.push_back(c);
      todo.push_back(c);
    }
  }
  return out;
}

}  // namespace

TEST_CASE(
    "hang e2e: a node paused for longer than --hang_timeout, shorter than the tolerance, "
    "costs a stall: nobody is named hung, nothing restarts",
    "[hang][e2e][multinode]") {
  // Two elastic nodes of 2 native ranks, --hang_timeout 3 s, the peer tolerance 15 s (the
  // default). Node b, agent and workers, is stopped as a paused machine is (the agent first,
  // resumed last) until a has waited on it and 3 s more: 6-7 s in all. Node a's ranks wait on b's
  // in their all-reduce for the whole pause: not a hang, since b's agent is not heard from and the
  // tolerance decides whether b is lost. Expected: a says it waits on a node not heard from; nobody
  // is named hung or dumped, no restart, no re-form; both nodes finish, exit 0.
  const auto endpoint = "127.0.0.1:" + std::to_string(ddp::test::free_port());
  Run a;
  Run b;
  auto train = with(train_args(a.dir), {"--fault_slow_step_ms", "100"});
  *(std::find(train.begin(), train.end(), "--epochs") + 1) = "16";  // about 16 s of steps
  const auto node = [&](const std::string& addr) {
    return with(
        std::vector<std::string>{"--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                                 endpoint, "--rdzv_id", "pause", "--local_addr", addr,
                                 "--nproc_per_node", "2", "--max_restarts", "1", "--stop_timeout",
                                 "2", "--hang_timeout", "3"},
        train);
  };
  auto& first = a.start(node("127.0.0.1"), {}, "a");
  auto& second = b.start(node("127.0.0.2"), {}, "b");
  {
    // Rank 0, which prints, is on either node.
    const bool training = ddp::test::wait_until(
        [&] {
          return (first.log() + second.log()).find("[train] epoch 1 step") != std::string::npos;
        },
        kGuard);
    INFO(first.log() + second.log());
    REQUIRE(training);
  }
  const auto workers = descendants(second.pid());
  second.kill(SIGSTOP);
  for (pid_t p : workers) ::kill(p, SIGSTOP);
  REQUIRE(first.wait_for_log("waiting on a node that is not heard from", kGuard));
  std::this_thread::sleep_for(3s);  // a pause well past the 3 s hang timeout
  for (auto p = workers.rbegin(); p != workers.rend(); ++p) ::kill(*p, SIGCONT);
  second.kill(SIGCONT);
  const auto rc_a = first.wait(kGuard);
  const auto rc_b = second.wait(kGuard);
  INFO(first.log());
  INFO(second.log());
  CHECK(rc_a == 0);
  CHECK(rc_b == 0);
  CHECK_THAT(first.log(), Contains("its node not heard from for"));
  CHECK_THAT(first.log() + second.log(), !Contains("hang detected"));
  CHECK_THAT(first.log() + second.log(), !Contains("restarting"));
  CHECK_THAT(first.log() + second.log(), !Contains("membership changed"));
}
