// IPv6 end to end on the loopback ::1: real ddplaunch agents whose store address is ::1 (or
// [::1]), with the shell worker, a store probe, native Gloo workers and PyTorch 1.13 DDP.
// Only ::1 is ever dialled.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <stdexcept>

#include "agent_process.hpp"

using namespace std::chrono_literals;
using ddp::test::AgentProcess;
using ddp::test::ranks_in;

namespace {

constexpr auto kGuard = 60s;  // hang guard; nothing asserts on speed
const std::string kSource = DDP_SOURCE_DIR;
const std::string kWorker = kSource + "/tests/e2e/scripts/worker.sh";
const std::string kProbe = kSource + "/tests/e2e/scripts/store_probe.py";
// Debian's python3 with python3-torch, as tests/support/python.hpp (whose library defines
// helpers agent_process.cpp defines too).
const std::string kPython = "/usr/bin/python3";
const std::string kFastConf =
    "last_call_timeout=1,join_timeout=30,heartbeat_interval=0.2,lease_timeout=1";

struct Job {
  std::string dir = ddp::test::make_temp_dir();
  std::vector<std::unique_ptr<AgentProcess>> agents;

  AgentProcess& start(const std::string& tag, const std::vector<std::string>& args,
                      std::map<std::string, std::string> env = {}) {
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

// A port nobody listens on at ::1 right now (the kernel picks it).
int free_port6() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  socklen_t len = sizeof(addr);
  auto* raw = reinterpret_cast<sockaddr*>(&addr);
  if (fd < 0 || ::bind(fd, raw, sizeof(addr)) != 0 || ::getsockname(fd, raw, &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("free_port6: no IPv6 loopback here");
  }
  ::close(fd);
  return ntohs(addr.sin6_port);
}

std::vector<std::string> single_node(const std::string& master_addr,
                                     std::vector<std::string> program) {
  std::vector<std::string> args{"--master_addr",    master_addr, "--master_port", "0",
                                "--nproc_per_node", "2"};
  args.insert(args.end(), program.begin(), program.end());
  return args;
}

}  // namespace

TEST_CASE("ipv6 single node: --master_addr ::1 or [::1], workers reach the store at ::1",
          "[e2e][ipv6]") {
  const std::string addr = GENERATE(as<std::string>{}, "::1", "[::1]");
  INFO(addr);
  Job job;
  auto& agent = job.start("single", single_node(addr, {kProbe}));
  REQUIRE(agent.wait(kGuard) == 0);
  const auto log = agent.log();
  INFO(log);
  // Workers get the bare address, as torchrun hands it (PyTorch's TCPStore takes no brackets).
  CHECK_THAT(log, Catch::Contains("PROBE REACHED RANK=0 MASTER=::1 "));
  CHECK_THAT(log, Catch::Contains("PROBE REACHED RANK=1 MASTER=::1 "));
}

TEST_CASE("ipv6 single node: the store's log lines in the agent's output say ddplaunch",
          "[e2e][ipv6]") {
  const std::string addr = GENERATE(as<std::string>{}, "127.0.0.1", "::1");
  Job job;
  auto& agent = job.start("single", single_node(addr, {kProbe, "bad-frame"}));
  REQUIRE(agent.wait(kGuard) == 0);
  const auto log = agent.log();
  INFO(log);
  const std::string peer = addr == "::1" ? "[::1]:" : "127.0.0.1:";
  CHECK_THAT(log, Catch::Contains("ddplaunch: closing connection from " + peer));
  CHECK_THAT(log, !Catch::Contains("ddpstore"));
}

TEST_CASE("ipv6 single node: native Gloo workers run collectives over ::1", "[e2e][ipv6]") {
  Job job;
  const std::string worker = std::string(DDP_BINARY_DIR) + "/tests/rt_test_worker";
  // One line per rank (--log_collapse off): each rank's own result is what is checked.
  auto& agent =
      job.start("gloo", single_node("::1", {"--log_collapse=off", worker, "collectives", "30000"}),
                {{"DDPLAUNCH_BACKEND", "gloo"}});
  REQUIRE(agent.wait(kGuard) == 0);
  const auto log = agent.log();
  INFO(log);
  CHECK_THAT(log, Catch::Contains("[default0]:RESULT sum 3"));
  CHECK_THAT(log, Catch::Contains("[default1]:RESULT backend gloo"));
}

TEST_CASE("ipv6 single node: PyTorch 1.13 DDP with --master_addr ::1 trains", "[e2e][ipv6]") {
  if (std::system((kPython + " -c 'import torch.distributed' >/dev/null 2>&1").c_str()) != 0) {
    // Real PyTorch is part of the suite (scripts/setup.sh installs it): never a silent skip.
    FAIL("/usr/bin/python3 cannot import torch.distributed: run scripts/setup.sh (python3-torch)");
  }
  Job job;
  auto& agent =
      job.start("torch", single_node("::1", {kSource + "/tests/launcher/workers/ddp_train.py"}),
                {{"PYTHON_EXEC", kPython}});
  REQUIRE(agent.wait(240s) == 0);
  const auto log = agent.log();
  INFO(log);
  CHECK_THAT(log, Catch::Contains("[default1]:rank 1/2 agent_store=True"));
  CHECK_THAT(log, Catch::Contains("[default0]:params in sync after 20 steps"));
}

TEST_CASE("ipv6 static: 2 nodes meet at --master_addr ::1", "[e2e][multinode][ipv6]") {
  const bool local_addr = GENERATE(true, false);
  INFO("--local_addr ::1: " << local_addr);
  Job job;
  const auto port = std::to_string(free_port6());
  auto args = [&](int rank) {
    std::vector<std::string> a{"--nnodes",         "2", "--node_rank",   std::to_string(rank),
                               "--nproc_per_node", "2", "--master_addr", "::1",
                               "--master_port",    port};
    if (local_addr) a.insert(a.end(), {"--local_addr", "::1"});
    a.push_back(kWorker);
    return a;
  };
  auto& n1 = job.start("n1", args(1));  // first: it waits for node 0's store
  auto& n0 = job.start("n0", args(0));
  REQUIRE(n0.wait(kGuard) == 0);
  REQUIRE(n1.wait(kGuard) == 0);
  INFO(n0.log() + n1.log());
  CHECK(ranks_in(n0.log(), 4) == std::set<int>{0, 1});
  CHECK(ranks_in(n1.log(), 4) == std::set<int>{2, 3});
  CHECK_THAT(n1.log(), Catch::Contains("GROUP_RANK=1 GROUP_WORLD_SIZE=2 MASTER=::1:" + port));
}

TEST_CASE("ipv6 elastic: 2 nodes meet at --rdzv_endpoint [::1]:PORT", "[e2e][multinode][ipv6]") {
  const bool local_addr = GENERATE(true, false);
  INFO("--local_addr ::1: " << local_addr);
  Job job;
  const auto port = std::to_string(free_port6());
  std::vector<std::string> args{"--nnodes",       "2",    "--nproc_per_node", "2",
                                "--rdzv_backend", "c10d", "--rdzv_endpoint",  "[::1]:" + port,
                                "--rdzv_id",      "ipv6", "--rdzv_conf",      kFastConf};
  if (local_addr) args.insert(args.end(), {"--local_addr", "::1"});
  args.push_back(kWorker);
  auto& a = job.start("a", args);
  auto& b = job.start("b", args);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  INFO(a.log() + b.log());
  std::set<int> all = ranks_in(a.log(), 4);
  const auto more = ranks_in(b.log(), 4);
  all.insert(more.begin(), more.end());
  CHECK(all == std::set<int>{0, 1, 2, 3});
  CHECK_THAT(a.log() + b.log(), Catch::Contains("MASTER=::1:"));
}
