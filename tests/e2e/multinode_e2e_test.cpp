// Several ddplaunch agents on one machine, each a "node" with its own --local_addr
// (127.0.0.x), running the shell worker in scripts/worker.sh.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <thread>

#include "agent_process.hpp"
#include "rendezvous/store/server/store_server.hpp"

using namespace std::chrono_literals;
using ddp::test::AgentProcess;
using ddp::test::ranks_in;

namespace {

constexpr auto kGuard = 60s;  // hang guard; nothing asserts on speed
const std::string kWorker = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/worker.sh";
// Fast failure detection and short windows so the suite stays quick.
const std::string kFastConf =
    "last_call_timeout=1,join_timeout=30,heartbeat_interval=0.2,lease_timeout=1";

struct Job {
  std::string dir = ddp::test::make_temp_dir();
  std::vector<std::unique_ptr<AgentProcess>> agents;

  AgentProcess& start(const std::string& tag, std::vector<std::string> args,
                      std::map<std::string, std::string> env = {}) {
    args.push_back(kWorker);
    env["NODE_TAG"] = tag;
    env["PID_DIR"] = dir;
    agents.push_back(std::make_unique<AgentProcess>(args, env, dir + "/" + tag + ".log"));
    return *agents.back();
  }
  ~Job() {
    agents.clear();  // SIGKILL + reap whatever still runs
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::vector<std::string> elastic(int port, const std::string& nnodes, const std::string& addr,
                                 const std::string& id = "e2e", const std::string& extra = "") {
  return {"--nnodes",       nnodes, "--nproc_per_node", "2",
          "--rdzv_backend", "c10d", "--rdzv_endpoint",  "127.0.0.1:" + std::to_string(port),
          "--rdzv_id",      id,     "--rdzv_conf",      kFastConf + extra,
          "--local_addr",   addr};
}

}  // namespace

TEST_CASE("e2e static: 2 nodes, ranks follow node_rank", "[e2e][multinode]") {
  Job job;
  const auto port = std::to_string(ddp::test::free_port());
  auto args = [&](int rank, const std::string& addr) {
    return std::vector<std::string>{"--nnodes",         "2",  "--node_rank",   std::to_string(rank),
                                    "--nproc_per_node", "2",  "--master_addr", "127.0.0.1",
                                    "--master_port",    port, "--local_addr",  addr};
  };
  // Node 1 first: it waits for node 0's store.
  auto& n1 = job.start("n1", args(1, "127.0.0.2"));
  auto& n0 = job.start("n0", args(0, "127.0.0.1"));
  REQUIRE(n0.wait(kGuard) == 0);
  REQUIRE(n1.wait(kGuard) == 0);
  CHECK(ranks_in(n0.log(), 4) == std::set<int>{0, 1});
  CHECK(ranks_in(n1.log(), 4) == std::set<int>{2, 3});
  CHECK_THAT(n1.log(), Catch::Contains("GROUP_RANK=1 GROUP_WORLD_SIZE=2 MASTER=127.0.0.1:" + port));
}

TEST_CASE("e2e static: a node that finished learns of a later failure, nobody restarts without it",
          "[e2e][multinode]") {
  const std::string dir = ddp::test::make_temp_dir();
  const auto port = std::to_string(ddp::test::free_port());
  const std::string uneven = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/uneven.sh";
  auto args = [&](int rank, const std::string& addr) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--node_rank",
                                    std::to_string(rank),
                                    "--master_addr",
                                    "127.0.0.1",
                                    "--master_port",
                                    port,
                                    "--local_addr",
                                    addr,
                                    "--nproc_per_node",
                                    "1",
                                    "--max_restarts",
                                    "2",
                                    "--rdzv_conf",
                                    "exit_barrier_timeout=60",
                                    uneven};
  };
  // Node 0 (the store host) finishes at once and waits in its exit barrier; node 1's worker
  // fails 1.5 s later, with restarts left.
  AgentProcess n0(args(0, "127.0.0.1"), {{"NAP", "0.2"}}, dir + "/n0.log");
  AgentProcess n1(args(1, "127.0.0.2"), {{"NAP", "3"}, {"CRASH", "1"}}, dir + "/n1.log");
  const auto started = std::chrono::steady_clock::now();
  const auto rc0 = n0.wait(kGuard);
  const auto rc1 = n1.wait(kGuard);
  INFO("--- node 0 ---\n" << n0.log() << "--- node 1 ---\n" << n1.log());
  REQUIRE(rc0.has_value());
  REQUIRE(rc1.has_value());
  // The finished node says the job failed and exits with the root cause's code, as soon as
  // the failed node is out: not after its 60 s exit barrier timeout.
  CHECK(*rc0 == 3);
  CHECK_THAT(n0.log(), Catch::Contains("the job failed on another node after this node's workers "
                                       "finished: rank 1 (local_rank 0"));
  CHECK(std::chrono::steady_clock::now() - started < 40s);
  // The failed node cannot restart without node 0's ranks: it says so in one line before
  // spending or announcing a restart, and exits with the root cause's code.
  CHECK(*rc1 == 3);
  CHECK_THAT(n1.log(), Catch::Contains("and cannot restart (2 restarts left, none spent): node 0 "
                                       "already finished (its workers succeeded)"));
  CHECK_THAT(n1.log(), !Catch::Contains("restarting") && !Catch::Contains("rendezvous failed"));
  CHECK_THAT(n1.log(), Catch::Contains("Root Cause"));
  const std::string log1 = n1.log();
  const auto first = log1.find("start RANK=1");
  CHECK((first != std::string::npos && log1.find("start RANK=1", first + 1) == std::string::npos));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("e2e: a store host that fails waits until a slow node read the failure record",
          "[e2e][multinode]") {
  // The store goes with its host's agent. A node that had not read the failure record yet (a
  // loaded machine; here its agent is stopped) would find the store gone and exit 1 with
  // "lost the rendezvous store" instead of the root cause's 3. The host waits (2 s at most)
  // for every node still connected to acknowledge the record.
  const bool elastic = GENERATE(false, true);
  CAPTURE(elastic);
  const std::string dir = ddp::test::make_temp_dir();
  const auto port = std::to_string(ddp::test::free_port());
  const std::string uneven = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/uneven.sh";
  auto args = [&](bool host) {
    std::vector<std::string> a{
        "--nnodes",       "2", "--nproc_per_node", "1",
        "--max_restarts", "0", "--local_addr",     host ? "127.0.0.1" : "127.0.0.2"};
    const std::vector<std::string> more =
        elastic ? std::vector<std::string>{"--rdzv_backend",
                                           "c10d",
                                           "--rdzv_endpoint",
                                           "127.0.0.1:" + port,
                                           "--rdzv_id",
                                           "slow-reader",
                                           "--rdzv_conf",
                                           std::string("join_timeout=30,last_call_timeout=1,"
                                                       "heartbeat_interval=0.2,lease_timeout=10,"
                                                       "is_host=") +
                                               (host ? "true" : "false")}
                : std::vector<std::string>{"--node_rank", host ? "0" : "1", "--master_addr",
                                           "127.0.0.1",   "--master_port",  port};
    a.insert(a.end(), more.begin(), more.end());
    a.push_back(uneven);
    return a;
  };
  AgentProcess host(args(true), {{"NAP", "6"}, {"CRASH", "1"}}, dir + "/host.log");
  std::this_thread::sleep_for(100ms);
  AgentProcess other(args(false), {{"NAP", "30"}}, dir + "/other.log");
  REQUIRE(host.wait_for_log("start RANK=", kGuard));
  REQUIRE(other.wait_for_log("start RANK=", kGuard));
  other.kill(SIGSTOP);  // slow to read: it reads the record once it runs again
  const bool crashed = host.wait_for_log("crash RANK=", kGuard);
  std::this_thread::sleep_for(1s);
  other.kill(SIGCONT);
  REQUIRE(crashed);
  const auto host_rc = host.wait(kGuard);
  const auto other_rc = other.wait(kGuard);
  INFO("--- host ---\n" << host.log() << "--- other ---\n" << other.log());
  CHECK(host_rc == 3);
  CHECK(other_rc == 3);
  CHECK_THAT(other.log(), Catch::Contains("the job failed on another node"));
  // The agent's own verdict on a lost store (its rendezvous watcher may still note the
  // connection closing once the host left, at info level, after the record was heard).
  CHECK_THAT(other.log(), !Catch::Contains("lost the rendezvous store, "));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("e2e elastic: a node joining mid-run grows the world without spending a restart",
          "[e2e][multinode]") {
  Job job;
  const int port = ddp::test::free_port();
  const std::map<std::string, std::string> env{{"EXIT_AT_NODES", "3"}};
  auto& a = job.start("a", elastic(port, "2:3", "127.0.0.1"), env);
  auto& b = job.start("b", elastic(port, "2:3", "127.0.0.2"), env);
  REQUIRE(a.wait_for_log("WORLD_SIZE=4", kGuard));
  REQUIRE(b.wait_for_log("WORLD_SIZE=4", kGuard));
  auto& c = job.start("c", elastic(port, "2:3", "127.0.0.3"), env);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  REQUIRE(c.wait(kGuard) == 0);
  std::set<int> all;
  for (auto* agent : {&a, &b, &c}) {
    const auto ranks = ranks_in(agent->log(), 6);
    CHECK(ranks.size() == 2);
    all.insert(ranks.begin(), ranks.end());
    // Re-formed into round 1 (the attempt every node agrees on) without a failure restart.
    CHECK_THAT(agent->log(), Catch::Contains("WORLD_SIZE=6") && Catch::Contains("RESTARTS=1"));
    CHECK_THAT(agent->log(), !Catch::Contains("restarting, attempt"));
  }
  CHECK(all == std::set<int>{0, 1, 2, 3, 4, 5});
  CHECK_THAT(a.log(), Catch::Contains("without spending a restart"));
}

TEST_CASE("e2e elastic: a SIGKILLed node is noticed, survivors re-form smaller",
          "[e2e][multinode]") {
  Job job;
  const int port = ddp::test::free_port();
  const std::map<std::string, std::string> env{{"EXIT_AT_NODES", "2"}};
  auto& a = job.start("a", elastic(port, "2:3", "127.0.0.1"), env);
  auto& b = job.start("b", elastic(port, "2:3", "127.0.0.2"), env);
  auto& c = job.start("c", elastic(port, "2:3", "127.0.0.3"), env);
  for (auto* agent : {&a, &b, &c}) REQUIRE(agent->wait_for_log("WORLD_SIZE=6", kGuard));
  // Both of c's workers have printed (each records its pid first); one may print before the
  // other has started.
  REQUIRE(c.wait_for_log("LOCAL_RANK=0 WORLD_SIZE=6", kGuard));
  REQUIRE(c.wait_for_log("LOCAL_RANK=1 WORLD_SIZE=6", kGuard));
  c.kill(SIGKILL);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  CHECK(ranks_in(a.log(), 4).size() == 2);
  CHECK(ranks_in(b.log(), 4).size() == 2);
  // Seen from its closed store connection, not after the heartbeat lease.
  CHECK_THAT(a.log() + b.log(), Catch::Contains("is gone (its store connection closed)"));
  // The killed agent's workers died with it.
  for (const char* worker : {"c-0", "c-1"}) {
    std::ifstream pid_file(job.dir + "/" + worker + ".pid");
    pid_t pid = 0;
    REQUIRE(pid_file >> pid);
    CHECK(ddp::test::all_gone({pid}, kGuard));
  }
}

TEST_CASE("e2e elastic: three survivors of a SIGKILLed node re-form once, all together",
          "[e2e][multinode]") {
  // Every survivor finds the killed node's connection closed and counts it out. It must count
  // once: counted by each survivor, the first one back took the others for gone too and
  // formed a group of its own (MIN is 1 here), and the rest re-formed it once more.
  Job job;
  const int port = ddp::test::free_port();
  const std::map<std::string, std::string> env{{"EXIT_AT_NODES", "3"}};
  std::vector<AgentProcess*> nodes;
  for (int i = 1; i <= 4; ++i) {
    const std::string addr = "127.0.0." + std::to_string(i);
    // A long last call: round 0 closes when the 4th node arrives (MAX), however late.
    nodes.push_back(&job.start("n" + std::to_string(i),
                               elastic(port, "1:4", addr, "e2e", ",last_call_timeout=30"), env));
  }
  for (auto* agent : nodes) REQUIRE(agent->wait_for_log("GROUP_WORLD_SIZE=4", kGuard));
  auto& victim = *nodes.back();
  REQUIRE(victim.wait_for_log("LOCAL_RANK=0 WORLD_SIZE=8", kGuard));
  REQUIRE(victim.wait_for_log("LOCAL_RANK=1 WORLD_SIZE=8", kGuard));
  victim.kill(SIGKILL);
  std::set<int> ranks;
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(nodes[i]->wait(kGuard) == 0);
    const std::string log = nodes[i]->log();
    // One re-form: straight from 4 nodes to 3, never a smaller group in between.
    CHECK_THAT(log, Catch::Contains("GROUP_WORLD_SIZE=3 MASTER") && Catch::Contains("RESTARTS=1"));
    CHECK_THAT(log,
               !Catch::Contains("GROUP_WORLD_SIZE=1 ") && !Catch::Contains("GROUP_WORLD_SIZE=2 "));
    CHECK_THAT(log, !Catch::Contains("RESTARTS=2"));
    const auto mine = ranks_in(log, 6);
    ranks.insert(mine.begin(), mine.end());
  }
  CHECK(ranks == std::set<int>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("e2e elastic: MIN never reached fails with the count", "[e2e][multinode]") {
  Job job;
  const int port = ddp::test::free_port();
  auto& a = job.start("a", elastic(port, "2:3", "127.0.0.1", "e2e", ",join_timeout=1"));
  const auto rc = a.wait(kGuard);
  REQUIRE(rc.has_value());
  CHECK(*rc != 0);
  CHECK_THAT(a.log(), Catch::Contains("only 1/2 nodes joined"));
}

TEST_CASE("e2e elastic: a node arriving after the job ended is told it is closed",
          "[e2e][multinode]") {
  Job job;
  ddp::rendezvous::StoreServer store({"127.0.0.1", 0});  // a standalone store
  const int port = store.port();
  auto& a = job.start("a", elastic(port, "2:2", "127.0.0.2", "e2e", ",is_host=false"));
  auto& b = job.start("b", elastic(port, "2:2", "127.0.0.3", "e2e", ",is_host=false"));
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  auto& late = job.start("late", elastic(port, "2:2", "127.0.0.4", "e2e", ",is_host=false"));
  const auto rc = late.wait(kGuard);
  REQUIRE(rc.has_value());
  CHECK(*rc != 0);
  CHECK_THAT(late.log(), Catch::Contains("is closed: the job has ended"));
}

TEST_CASE("e2e elastic: two rdzv_ids on one store never mix", "[e2e][multinode]") {
  Job job;
  ddp::rendezvous::StoreServer store({"127.0.0.1", 0});
  const int port = store.port();
  auto& x1 = job.start("x1", elastic(port, "2:2", "127.0.0.2", "job-x", ",is_host=false"));
  auto& y1 = job.start("y1", elastic(port, "2:2", "127.0.0.3", "job-y", ",is_host=false"));
  auto& x2 = job.start("x2", elastic(port, "2:2", "127.0.0.4", "job-x", ",is_host=false"));
  auto& y2 = job.start("y2", elastic(port, "2:2", "127.0.0.5", "job-y", ",is_host=false"));
  for (auto* agent : {&x1, &y1, &x2, &y2}) REQUIRE(agent->wait(kGuard) == 0);
  std::set<int> x, y;
  for (int r : ranks_in(x1.log(), 4)) x.insert(r);
  for (int r : ranks_in(x2.log(), 4)) x.insert(r);
  for (int r : ranks_in(y1.log(), 4)) y.insert(r);
  for (int r : ranks_in(y2.log(), 4)) y.insert(r);
  CHECK(x == std::set<int>{0, 1, 2, 3});
  CHECK(y == std::set<int>{0, 1, 2, 3});
  CHECK_THAT(x1.log(), Catch::Contains("RUN_ID=job-x") && !Catch::Contains("RUN_ID=job-y"));
}

TEST_CASE("e2e elastic: PyTorch workers on two nodes all-reduce through the agent store",
          "[e2e][multinode][torch]") {
  Job job;
  const int port = ddp::test::free_port();
  const std::string script = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/torch_allreduce.py";
  const std::map<std::string, std::string> env{{"PYTHON_EXEC", "/usr/bin/python3"}};
  auto args = [&](const std::string& addr) {
    auto a = elastic(port, "2:2", addr, "torch-e2e");
    a.push_back(script);
    return a;
  };
  // The shell worker is appended by start(); pass the script as the program instead.
  auto& a = *job.agents.emplace_back(
      std::make_unique<AgentProcess>(args("127.0.0.1"), env, job.dir + "/a.log"));
  auto& b = *job.agents.emplace_back(
      std::make_unique<AgentProcess>(args("127.0.0.2"), env, job.dir + "/b.log"));
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  const std::string logs = a.log() + b.log();
  for (int rank = 0; rank < 4; ++rank) {
    CHECK_THAT(logs, Catch::Contains("TORCH rank=" + std::to_string(rank) + " world=4 sum=6"));
  }
}
