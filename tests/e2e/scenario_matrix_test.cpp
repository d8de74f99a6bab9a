// The scenario matrix of docs/multinode.md: two real ddplaunch agents on loopback, "host"
// (it hosts the store: node_rank 0, or is_host=true) and "other", for every
// {static, elastic} x {timing} x {fault} x {IPv4, IPv6}. Each cell states its expected
// outcome: every agent's exit code, whose worker completed, a time bound, and what is printed.
// Ordinary timing is the point: nodes finishing seconds apart, a signal during a wait.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "agent_process.hpp"

using namespace std::chrono_literals;
using ddp::test::AgentProcess;

namespace {

using Clock = std::chrono::steady_clock;
const std::string kWorker = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/uneven.sh";

enum class Kind { kStatic, kElastic };
enum class Timing { kTogether, kHostFirst, kHostLast, kOtherMuchLater };
enum class Fault {
  kNone,
  kCrashOnHost,        // the host's worker exits 3 halfway through its run
  kCrashOnOther,       // the other node's worker does
  kOtherAgentKilled,   // SIGKILL to the other agent 0.3 s into the run
  kTermInRendezvous,   // SIGTERM to the host while it waits for the other node to join
  kTermInRun,          // SIGTERM to the other agent 0.3 s into the run
  kTermInExitBarrier,  // SIGTERM to the host once its worker is done and it serves the store
};
enum class Family { kV4, kV6 };

const char* name(Kind k) {
  return k == Kind::kStatic ? "static" : "elastic";
}
const char* name(Timing t) {
  switch (t) {
    case Timing::kTogether:
      return "together";
    case Timing::kHostFirst:
      return "host first";
    case Timing::kHostLast:
      return "host last";
    case Timing::kOtherMuchLater:
      return "other much later";
  }
  return "?";
}

// How long each node's worker runs (seconds). "Much later" stands for minutes.
struct Naps {
  double host;
  double other;
};
Naps naps(Timing t) {
  switch (t) {
    case Timing::kTogether:
      return {3, 3};
    case Timing::kHostFirst:
      return {0.5, 3};
    case Timing::kHostLast:
      return {3, 0.5};
    case Timing::kOtherMuchLater:
      return {0.5, 5};
  }
  return {1, 1};
}

struct Outcome {
  int host_rc = 0;
  int other_rc = 0;
  bool host_done = true;  // its worker printed "done": it ran to completion
  bool other_done = true;
  std::string host_says;  // a line the agent prints ("": nothing in particular)
  std::string other_says;
};

constexpr int kKilled = 128 + SIGKILL;
constexpr int kTerminated = 128 + SIGTERM;

// The expected outcome of one cell (nullopt: no such cell, as the store host waits in no exit
// barrier when it does not finish first). docs/multinode.md has the same table in words.
std::optional<Outcome> expected(Kind kind, Timing timing, Fault fault) {
  const bool host_first = timing == Timing::kHostFirst || timing == Timing::kOtherMuchLater;
  Outcome o;
  switch (fault) {
    case Fault::kNone:
      return o;
    case Fault::kCrashOnHost:
      o.host_rc = 3;
      o.host_done = false;
      o.host_says = "Root Cause";
      // Job-wide: the other node stops at once with the same root cause and exit code,
      // unless its worker had finished before the crash.
      if (timing != Timing::kHostLast) {
        o.other_rc = 3;
        o.other_done = false;
        o.other_says = "the job failed on another node";
      }
      return o;
    case Fault::kCrashOnOther:
      o.other_rc = 3;
      o.other_done = false;
      o.other_says = "Root Cause";
      o.host_rc = 3;
      if (!host_first) {  // the host still runs: it stops too, with the other's exit code
        o.host_done = false;
        o.host_says = "the job failed on another node";
      } else {  // its worker done, it waits in its exit barrier: it learns the job failed
        o.host_says = "the job failed on another node after this node's workers finished";
      }
      return o;
    case Fault::kOtherAgentKilled:
      o.other_rc = kKilled;
      o.other_done = false;
      if (host_first) {
        // Seen from the exit barrier. Static: the dead node never departs (barrier
        // timeout), and its node_lost record says the job failed; elastic: the host's
        // monitor counts it out, and the job had finished for it.
        o.host_says = kind == Kind::kStatic ? "closing the store anyway" : "stopped heartbeating";
        if (kind == Kind::kStatic) o.host_rc = 1;
      } else if (kind == Kind::kStatic) {
        o.host_rc = 1;  // its store connection closed: the node is lost, a static job ends
        o.host_done = false;
        o.host_says = "lost: its agent's connection to the store closed";
      } else {
        o.host_rc = 1;  // lost while running: re-forms, and 1 node is below MIN 2
        o.host_done = false;
        o.host_says = "only 1/2 nodes joined";
      }
      return o;
    case Fault::kTermInRendezvous:
      o.host_rc = kTerminated;
      o.host_done = false;
      o.host_says = "received SIGTERM during rendezvous";
      o.other_rc = 1;  // started after the host left: no store to join
      o.other_done = false;
      return o;
    case Fault::kTermInRun:
      o.other_rc = kTerminated;
      o.other_done = false;
      o.other_says = "received SIGTERM; forwarding it to the workers (pids";
      o.host_rc = kTerminated;  // a node told to stop ends the job, the host's exit says so
      o.host_says = "its agent received signal 15";
      if (!host_first) o.host_done = false;
      return o;
    case Fault::kTermInExitBarrier:
      if (!host_first) return std::nullopt;
      o.host_rc = kTerminated;
      o.host_says = "while leaving the rendezvous; exiting now";
      // The host announces that it leaves: the other node's worker runs on to its end.
      o.other_says = "which hosts the store, finished and is leaving";
      return o;
  }
  return o;
}

struct Cell {
  Kind kind;
  Timing timing;
  Fault fault;
  Family family;
};

std::vector<std::string> agent_args(const Cell& cell, bool host, int port) {
  const bool v6 = cell.family == Family::kV6;
  std::vector<std::string> args{"--nnodes", "2", "--nproc_per_node", "1", "--max_restarts", "0"};
  if (cell.kind == Kind::kStatic) {
    const std::vector<std::string> more{"--node_rank",   host ? "0" : "1",
                                        "--master_addr", v6 ? "::1" : "127.0.0.1",
                                        "--master_port", std::to_string(port),
                                        "--rdzv_conf",   "join_timeout=4,exit_barrier_timeout=3"};
    args.insert(args.end(), more.begin(), more.end());
  } else {
    const std::string endpoint = (v6 ? "[::1]:" : "127.0.0.1:") + std::to_string(port);
    const std::vector<std::string> more{
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        endpoint,
        "--rdzv_id",
        "matrix",
        "--rdzv_conf",
        std::string("join_timeout=4,last_call_timeout=1,heartbeat_interval=0.2,lease_timeout=1,"
                    "exit_barrier_timeout=30,is_host=") +
            (host ? "true" : "false")};
    args.insert(args.end(), more.begin(), more.end());
    // Two node ids on one machine: distinct loopback addresses where the family has them.
    if (!v6) args.insert(args.end(), {"--local_addr", host ? "127.0.0.1" : "127.0.0.2"});
  }
  args.push_back(kWorker);
  return args;
}

std::map<std::string, std::string> worker_env(double nap, bool crash) {
  std::map<std::string, std::string> env{{"NAP", std::to_string(nap)}};
  if (crash) env["CRASH"] = "1";
  return env;
}

// Runs one cell and checks every part of its expected outcome.
void run_cell(const Cell& cell) {
  const auto want = expected(cell.kind, cell.timing, cell.fault);
  if (!want) return;
  const std::string dir = ddp::test::make_temp_dir();
  const int port = ddp::test::free_port();
  const Naps nap = naps(cell.timing);
  // Generous: the longest worker, a join or lease timeout, and a loaded CI machine.
  const auto bound =
      std::chrono::milliseconds(static_cast<int>(1000 * nap.other + 1000 * nap.host)) + 15s;
  const auto prompt = 5s;  // an agent told to stop is gone within this (not 600 s)

  auto start = [&](bool host) {
    const double n = host ? nap.host : nap.other;
    const bool crash =
        host ? cell.fault == Fault::kCrashOnHost : cell.fault == Fault::kCrashOnOther;
    return std::make_unique<AgentProcess>(agent_args(cell, host, port), worker_env(n, crash),
                                          dir + (host ? "/host.log" : "/other.log"));
  };
  std::unique_ptr<AgentProcess> host = start(true);
  std::unique_ptr<AgentProcess> other;
  std::optional<int> host_rc;
  std::optional<int> other_rc;

  if (cell.fault == Fault::kTermInRendezvous) {
    std::this_thread::sleep_for(700ms);
    host->kill(SIGTERM);
    host_rc = host->wait(prompt);
    REQUIRE(host_rc.has_value());
    other = start(false);
  } else {
    std::this_thread::sleep_for(100ms);
    other = start(false);
    REQUIRE(host->wait_for_log("start RANK=", bound));
    REQUIRE(other->wait_for_log("start RANK=", bound));
    if (cell.fault == Fault::kOtherAgentKilled || cell.fault == Fault::kTermInRun) {
      // Where the host finishes first, the fault comes once it has (it waits in its exit
      // barrier); otherwise 0.3 s into the run, while both still work.
      const bool host_first =
          cell.timing == Timing::kHostFirst || cell.timing == Timing::kOtherMuchLater;
      if (host_first) REQUIRE(host->wait_for_log("done RANK=", bound));
      std::this_thread::sleep_for(300ms);
      other->kill(cell.fault == Fault::kOtherAgentKilled ? SIGKILL : SIGTERM);
      if (cell.fault == Fault::kTermInRun) REQUIRE(other->wait(prompt).has_value());
    } else if (cell.fault == Fault::kTermInExitBarrier) {
      REQUIRE(host->wait_for_log("done RANK=", bound));
      std::this_thread::sleep_for(300ms);
      host->kill(SIGTERM);
      REQUIRE(host->wait(prompt).has_value());
    }
  }
  if (!host_rc) host_rc = host->wait(bound);
  other_rc = other->wait(bound);
  const std::string host_log = host->log();
  const std::string other_log = other->log();
  INFO("--- host agent ---\n" << host_log << "--- other agent ---\n" << other_log);
  REQUIRE(host_rc.has_value());
  REQUIRE(other_rc.has_value());
  CHECK(*host_rc == want->host_rc);
  CHECK(*other_rc == want->other_rc);
  CHECK((host_log.find("done RANK=") != std::string::npos) == want->host_done);
  CHECK((other_log.find("done RANK=") != std::string::npos) == want->other_done);
  if (!want->host_says.empty()) CHECK_THAT(host_log, Catch::Contains(want->host_says));
  if (!want->other_says.empty()) CHECK_THAT(other_log, Catch::Contains(want->other_says));
  host.reset();
  other.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

void run_row(Kind kind, Fault fault) {
  const auto timing =
      GENERATE(Timing::kTogether, Timing::kHostFirst, Timing::kHostLast, Timing::kOtherMuchLater);
  const auto family = GENERATE(Family::kV4, Family::kV6);
  CAPTURE(name(kind), name(timing), family == Family::kV6 ? "IPv6" : "IPv4");
  run_cell(Cell{kind, timing, fault, family});
}

}  // namespace

TEST_CASE("matrix static: success", "[e2e][matrix]") {
  run_row(Kind::kStatic, Fault::kNone);
}
TEST_CASE("matrix static: a worker crash on the store host", "[e2e][matrix]") {
  run_row(Kind::kStatic, Fault::kCrashOnHost);
}
TEST_CASE("matrix static: a worker crash on another node", "[e2e][matrix]") {
  run_row(Kind::kStatic, Fault::kCrashOnOther);
}
TEST_CASE("matrix static: another node's agent SIGKILLed", "[e2e][matrix]") {
  run_row(Kind::kStatic, Fault::kOtherAgentKilled);
}
TEST_CASE("matrix static: SIGTERM to the store host during rendezvous", "[e2e][matrix]") {
  run_row(Kind::kStatic, Fault::kTermInRendezvous);
}
TEST_CASE("matrix static: SIGTERM to another node during the run", "[e2e][matrix]") {
  run_row(Kind::kStatic, Fault::kTermInRun);
}
TEST_CASE("matrix static: SIGTERM to the store host in the exit barrier", "[e2e][matrix]") {
  run_row(Kind::kStatic, Fault::kTermInExitBarrier);
}
TEST_CASE("matrix elastic: success", "[e2e][matrix]") {
  run_row(Kind::kElastic, Fault::kNone);
}
TEST_CASE("matrix elastic: a worker crash on the store host", "[e2e][matrix]") {
  run_row(Kind::kElastic, Fault::kCrashOnHost);
}
TEST_CASE("matrix elastic: a worker crash on another node", "[e2e][matrix]") {
  run_row(Kind::kElastic, Fault::kCrashOnOther);
}
TEST_CASE("matrix elastic: another node's agent SIGKILLed", "[e2e][matrix]") {
  run_row(Kind::kElastic, Fault::kOtherAgentKilled);
}
TEST_CASE("matrix elastic: SIGTERM to the store host during rendezvous", "[e2e][matrix]") {
  run_row(Kind::kElastic, Fault::kTermInRendezvous);
}
TEST_CASE("matrix elastic: SIGTERM to another node during the run", "[e2e][matrix]") {
  run_row(Kind::kElastic, Fault::kTermInRun);
}
TEST_CASE("matrix elastic: SIGTERM to the store host in the exit barrier", "[e2e][matrix]") {
  run_row(Kind::kElastic, Fault::kTermInExitBarrier);
}
