// Spares end to end (docs/recovery.md, "Spares"): agents on loopback with --nnodes 2:2, the
// first one at the endpoint's address hosting the store. A third agent finds the group full:
// it says once that it stands by as a spare, is admitted when a member is SIGKILLed (the world
// size stays 2), and exits 0 when the job finishes without needing it.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_process.hpp"
#include "tests/support/process.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::test::AgentProcess;

namespace {

constexpr auto kGuard = 120s;  // hang guard; nothing asserts on speed
const std::string kWorker = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/job_worker.sh";
const std::string kFastConf =
    "last_call_timeout=0.5,join_timeout=60,heartbeat_interval=0.2,lease_timeout=1";
const std::string kSpareLine = "standing by as a spare for job spare-job (group full at 2 nodes)";

// The agents of one job, each with its own log and events file.
struct Job {
  std::string dir = ddp::test::make_temp_dir();
  int port = ddp::test::free_port();
  std::vector<std::unique_ptr<AgentProcess>> agents;

  ~Job() {
    agents.clear();  // SIGKILL + reap whatever still runs
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  // One node (1 rank) running program (the shell worker by default) after agent_flags.
  AgentProcess& start(const std::map<std::string, std::string>& env,
                      const std::vector<std::string>& agent_flags = {},
                      const std::vector<std::string>& program = {kWorker}) {
    const size_t i = agents.size();
    std::vector<std::string> args{"--nnodes",         "2:2",
                                  "--nproc_per_node", "1",
                                  "--rdzv_backend",   "c10d",
                                  "--rdzv_endpoint",  "127.0.0.1:" + std::to_string(port),
                                  "--rdzv_id",        "spare-job",
                                  "--rdzv_conf",      kFastConf,
                                  "--local_addr",     "127.0.0." + std::to_string(i + 1),
                                  "--stop_timeout",   "2",
                                  "--events_file",    events_path(i)};
    args.insert(args.end(), agent_flags.begin(), agent_flags.end());
    args.insert(args.end(), program.begin(), program.end());
    agents.push_back(
        std::make_unique<AgentProcess>(args, env, dir + "/" + std::to_string(i) + ".log"));
    return *agents.back();
  }
  [[nodiscard]] std::string events_path(size_t i) const {
    return dir + "/" + std::to_string(i) + ".events";
  }
  [[nodiscard]] std::vector<nlohmann::json> events(size_t i, const std::string& name) const {
    return ddp::test::events_named(events_path(i), name);
  }
  [[nodiscard]] std::string logs() const {
    std::string all;
    for (size_t i = 0; i < agents.size(); ++i) {
      all += "--- agent " + std::to_string(i) + " ---\n" + agents[i]->log();
    }
    return all;
  }
  // Waits (up to the guard) until agent i's events file holds count events named name.
  [[nodiscard]] bool wait_for_event(size_t i, const std::string& name, size_t count = 1) const {
    const auto deadline = std::chrono::steady_clock::now() + kGuard;
    while (events(i, name).size() < count) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }
  std::vector<int> codes(const std::vector<size_t>& which) {
    std::vector<int> out;
    for (size_t i : which) {
      const auto rc = agents[i]->wait(kGuard);
      if (!rc) FAIL("agent " << i << " still runs after " << kGuard.count() << " s\n" << logs());
      out.push_back(*rc);
    }
    return out;
  }
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("spare e2e: a third agent of a full group stands by, and takes a lost member's place",
          "[e2e][spare]") {
  // Expected: the spare says its line once and no waiting line in 6 s (the old progress line
  // came every 5 s); agent 1 SIGKILLed (137); agents 0 and 2 form round 1 with world size 2
  // and exit 0; the spare's events file has spare then spare_admitted.
  Job job;
  const std::map<std::string, std::string> env{{"NAP", "10"}};
  job.start(env);
  job.start(env);
  REQUIRE(job.agents[0]->wait_for_log("WORLD_SIZE=2", kGuard));
  REQUIRE(job.agents[1]->wait_for_log("WORLD_SIZE=2", kGuard));
  auto& spare = job.start(env);
  REQUIRE(spare.wait_for_log(kSpareLine, kGuard));
  std::this_thread::sleep_for(6s);
  {
    const std::string log = spare.log();
    INFO(log);
    CHECK(count(log, kSpareLine) == 1);
    CHECK(count(log, "waiting") == 0);
    CHECK(count(log, "WORKER RANK=") == 0);  // no workers while standing by
  }
  job.agents[1]->kill(SIGKILL);
  const auto codes = job.codes({0, 1, 2});
  INFO(job.logs());
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 128 + SIGKILL);
  CHECK(codes[2] == 0);
  CHECK_THAT(spare.log(), Contains("admitted as a spare in round 1") &&
                              Contains("WORLD_SIZE=2 GROUP_RANK=") &&
                              Contains("GROUP_WORLD_SIZE=2 RESTARTS=1"));
  CHECK_THAT(job.agents[0]->log(), Contains("GROUP_WORLD_SIZE=2 RESTARTS=1"));
  const auto standing = job.events(2, "spare");
  REQUIRE(standing.size() == 1);
  CHECK(standing[0]["run_id"] == "spare-job");
  CHECK(standing[0]["group_full_at"] == 2);
  const auto admitted = job.events(2, "spare_admitted");
  REQUIRE(admitted.size() == 1);
  CHECK(admitted[0]["round"] == 1);
  const auto rounds = job.events(2, "rendezvous");
  REQUIRE(rounds.size() == 1);
  CHECK(rounds[0]["world_size"] == 2);
}

TEST_CASE("spare e2e: a job that finishes while a spare stands by ends with exit 0 everywhere",
          "[e2e][spare]") {
  // Expected: agents 0 and 1 exit 0 after their workers; the spare (never admitted) exits 0 too
  // with a line saying the job finished without needing it, and a not_needed event.
  Job job;
  const std::map<std::string, std::string> env{{"NAP", "3"}};
  job.start(env);
  job.start(env);
  REQUIRE(job.agents[0]->wait_for_log("WORLD_SIZE=2", kGuard));
  REQUIRE(job.agents[1]->wait_for_log("WORLD_SIZE=2", kGuard));
  auto& spare = job.start(env);
  REQUIRE(spare.wait_for_log(kSpareLine, kGuard));
  const auto codes = job.codes({0, 1, 2});
  INFO(job.logs());
  CHECK(codes == std::vector<int>{0, 0, 0});
  CHECK_THAT(spare.log(), Contains("the job finished without needing this node"));
  CHECK(count(spare.log(), "WORKER RANK=") == 0);
  CHECK(job.events(2, "not_needed").size() == 1);
  const auto finish = job.events(2, "finish");
  REQUIRE(finish.size() == 1);
  CHECK(finish[0]["exit_code"] == 0);
}

namespace {

// The native trainer, 100 ms a step (about 4 s an epoch at 2 ranks), its result in dir.
std::vector<std::string> slow_train(const std::string& dir, int epochs) {
  return ddp::test::synthetic_train(epochs, 100, {"--out", dir + "/final.safetensors"});
}

// Waits until a member's rank 0 printed its first step (either member may hold it).
bool first_step(const Job& job) {
  const auto until = std::chrono::steady_clock::now() + kGuard;
  while (std::chrono::steady_clock::now() < until) {
    for (size_t i : {0U, 1U}) {
      if (job.agents[i]->wait_for_log("epoch 0 step 1 ", 50ms)) return true;
    }
  }
  return false;
}

// The spare's one worker was started while it stood by and kept through its admission.
void check_hot_admission(const Job& job, size_t spare, size_t starts = 1) {
  const auto started = job.events(spare, "worker_start");
  const auto admitted = job.events(spare, "spare_admitted");
  REQUIRE(started.size() == starts);
  REQUIRE(admitted.size() == 1);
  CHECK(started.back()["time"].get<double>() < admitted[0]["time"].get<double>());
  const auto joined = job.events(spare, "in_place_recovery");
  REQUIRE(joined.size() == 1);
  CHECK(joined[0]["reason"] == "spare_admitted");
  CHECK(joined[0]["kept"] == 1);
  CHECK(joined[0]["restarted"] == 0);
  const auto rounds = job.events(spare, "rendezvous");
  REQUIRE(rounds.size() == 1);
  CHECK(rounds[0]["world_size"] == 2);
}

}  // namespace

TEST_CASE("spare e2e: in place, the native trainer's survivor keeps its process, the spare joins",
          "[e2e][spare]") {
  // --in_place_recovery, one trainer rank per node: agent 1 SIGKILLed mid-epoch with a spare
  // standing by, its worker started and parked (workers_parked). Expected: agent 0 keeps its one
  // worker process (an in_place_recovery event, reason node_lost), the spare is admitted with
  // world size 2 and its parked worker receives the state; agents 0 and 2 exit 0.
  Job job;
  const auto train = slow_train(job.dir, 2);
  const std::vector<std::string> flags{"--in_place_recovery"};
  job.start({}, flags, train);
  job.start({}, flags, train);
  REQUIRE(first_step(job));
  auto& spare = job.start({}, flags, train);
  REQUIRE(spare.wait_for_log(kSpareLine, kGuard));
  REQUIRE(job.wait_for_event(2, "workers_parked"));
  job.agents[1]->kill(SIGKILL);
  const auto codes = job.codes({0, 1, 2});
  INFO(job.logs());
  CHECK(codes == std::vector<int>{0, 128 + SIGKILL, 0});
  CHECK(job.events(0, "worker_start").size() == 1);  // the same process throughout
  const auto recovered = job.events(0, "in_place_recovery");
  REQUIRE(recovered.size() == 1);
  CHECK(recovered[0]["reason"] == "node_lost");
  CHECK(recovered[0]["kept"] == 1);
  check_hot_admission(job, 2);
}

TEST_CASE("spare e2e: a spare's worker killed while standing by is started again, then admitted",
          "[e2e][spare]") {
  // Expected: the spare says its worker exited while standing by and starts it again (a
  // second worker_start, a second workers_parked); admitted when agent 1 is SIGKILLed, that
  // worker is kept; agents 0 and 2 exit 0.
  Job job;
  const auto train = slow_train(job.dir, 2);
  const std::vector<std::string> flags{"--in_place_recovery"};
  job.start({}, flags, train);
  job.start({}, flags, train);
  REQUIRE(first_step(job));
  auto& spare = job.start({}, flags, train);
  REQUIRE(job.wait_for_event(2, "workers_parked"));
  const int parked = job.events(2, "worker_start").at(0)["pid"].get<int>();
  REQUIRE(::kill(parked, SIGKILL) == 0);
  REQUIRE(
      spare.wait_for_log("exited (signal 9 (SIGKILL)) while parked, before this node was "
                         "admitted; starting it again",
                         kGuard));
  REQUIRE(job.wait_for_event(2, "workers_parked", 2));
  job.agents[1]->kill(SIGKILL);
  const auto codes = job.codes({0, 1, 2});
  INFO(job.logs());
  CHECK(codes == std::vector<int>{0, 128 + SIGKILL, 0});
  check_hot_admission(job, 2, 2);
}

TEST_CASE(
    "spare e2e: a hot spare SIGKILLed while standing by disturbs nothing and leaves no orphan",
    "[e2e][spare]") {
  // Expected: the members never re-form (no membership_change) and exit 0; the spare's agent
  // 137; its parked worker does not outlive it.
  Job job;
  const auto train = slow_train(job.dir, 2);
  const std::vector<std::string> flags{"--in_place_recovery"};
  job.start({}, flags, train);
  job.start({}, flags, train);
  REQUIRE(first_step(job));
  job.start({}, flags, train);
  REQUIRE(job.wait_for_event(2, "workers_parked"));
  const int parked = job.events(2, "worker_start").at(0)["pid"].get<int>();
  job.agents[2]->kill(SIGKILL);
  const auto codes = job.codes({0, 1, 2});
  INFO(job.logs());
  CHECK(codes == std::vector<int>{0, 0, 128 + SIGKILL});
  CHECK(ddp::test::all_gone({parked}, 10s));
  for (size_t i : {0U, 1U}) {
    CHECK(job.events(i, "membership_change").empty());
    CHECK(job.events(i, "worker_start").size() == 1);
  }
}

TEST_CASE("spare e2e: two spares take two lost members' places in turn, world size 2 throughout",
          "[e2e][spare]") {
  // Agents 0 and 1 train; 2 and 3 stand by, both ready. Agent 1 is SIGKILLed: one spare is
  // admitted; once it stepped, it is SIGKILLed in turn and the other spare is admitted.
  // Expected: agent 0 keeps its one worker through two in-place recoveries (node_lost, kept
  // 1); each spare's parked worker was kept at its admission; agents 0 and the last spare
  // exit 0, the two killed 137.
  Job job;
  const auto train = slow_train(job.dir, 4);
  const std::vector<std::string> flags{"--in_place_recovery"};
  job.start({}, flags, train);
  job.start({}, flags, train);
  REQUIRE(first_step(job));
  job.start({}, flags, train);
  job.start({}, flags, train);
  REQUIRE(job.wait_for_event(2, "workers_parked"));
  REQUIRE(job.wait_for_event(3, "workers_parked"));
  job.agents[1]->kill(SIGKILL);
  if (!job.wait_for_event(0, "in_place_recovery")) FAIL(job.logs());
  const size_t first = job.events(2, "spare_admitted").empty() ? 3 : 2;
  const size_t second = first == 2 ? 3 : 2;
  if (!job.wait_for_event(first, "in_place_recovery")) FAIL(job.logs());
  job.agents[first]->kill(SIGKILL);
  const auto codes = job.codes({0, 1, first, second});
  INFO(job.logs());
  CHECK(codes == std::vector<int>{0, 128 + SIGKILL, 128 + SIGKILL, 0});
  CHECK(job.events(0, "worker_start").size() == 1);
  const auto recovered = job.events(0, "in_place_recovery");
  REQUIRE(recovered.size() == 2);
  for (const auto& r : recovered) {
    CHECK(r["reason"] == "node_lost");
    CHECK(r["kept"] == 1);
  }
  check_hot_admission(job, second);
  CHECK(job.events(first, "spare_admitted").size() == 1);
}

TEST_CASE("spare e2e: a spare told to stop leaves at once, and the job goes on without it",
          "[e2e][spare]") {
  // Expected: SIGTERM to the spare: it exits 143 within seconds; the members finish with exit
  // 0 (the spare's leaving did not close the job's rendezvous).
  Job job;
  const std::map<std::string, std::string> env{{"NAP", "5"}};
  job.start(env);
  job.start(env);
  REQUIRE(job.agents[0]->wait_for_log("WORLD_SIZE=2", kGuard));
  REQUIRE(job.agents[1]->wait_for_log("WORLD_SIZE=2", kGuard));
  auto& spare = job.start(env);
  REQUIRE(spare.wait_for_log(kSpareLine, kGuard));
  spare.kill(SIGTERM);
  const auto left = spare.wait(10s);
  INFO(job.logs());
  REQUIRE(left.has_value());
  CHECK(*left == 128 + SIGTERM);
  CHECK(job.codes({0, 1}) == std::vector<int>{0, 0});
  CHECK(job.events(0, "membership_change").empty());
}
