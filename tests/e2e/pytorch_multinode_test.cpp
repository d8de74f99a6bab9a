// Real PyTorch on two ddplaunch agents (two "nodes" on loopback), every version of
// tests/support/python.hpp (Debian's 1.13, the 2.x venvs), handed to ddplaunch as PYTHON_EXEC.
// No secret: a multi-node job without --secret_file runs on an open store (docs/security.md).
#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "agent_process.hpp"
#include "tests/support/torch_test_case.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using ddp::test::AgentProcess;
using ddp::test::Torch;

namespace {

constexpr auto kGuard = 180s;  // hang guard: importing torch on a loaded 2-core machine is slow
const std::string kWorkers = std::string(DDP_SOURCE_DIR) + "/tests/launcher/workers/";
const std::string kFastConf =
    "last_call_timeout=1,join_timeout=60,heartbeat_interval=0.2,lease_timeout=1";

struct Job {
  std::string dir = ddp::test::make_temp_dir();
  std::vector<std::unique_ptr<AgentProcess>> agents;

  AgentProcess& start(const Torch& torch, const std::string& tag,
                      const std::vector<std::string>& args) {
    agents.push_back(std::make_unique<AgentProcess>(
        args, std::map<std::string, std::string>{{"PYTHON_EXEC", torch.python}},
        dir + "/" + tag + ".log"));
    return *agents.back();
  }
  ~Job() {
    agents.clear();  // SIGKILL + reap whatever still runs
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace

// Expected: both agents exit 0; ranks 0 and 1 (one per node) train with DDP, params in sync.
TORCH_TEST_CASE("2 static nodes (--node_rank 0/1, --master_addr): a gloo DDP script exits 0",
                "[pytorch][multinode]") {
  Job job;
  const auto port = std::to_string(ddp::test::free_port());
  auto args = [&](int node_rank) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--node_rank",
                                    std::to_string(node_rank),
                                    "--nproc_per_node",
                                    "1",
                                    "--master_addr",
                                    "127.0.0.1",
                                    "--master_port",
                                    port,
                                    kWorkers + "ddp_train.py"};
  };
  auto& n1 = job.start(torch, "n1", args(1));
  auto& n0 = job.start(torch, "n0", args(0));
  const auto rc0 = n0.wait(kGuard);
  const auto rc1 = n1.wait(kGuard);
  INFO("node 0:\n" << n0.log() << "\nnode 1:\n" << n1.log());
  CHECK(rc0 == 0);
  CHECK(rc1 == 0);
  CHECK_THAT(n0.log(), Contains("rank 0/2 agent_store=True secret=none"));
  CHECK_THAT(n1.log(), Contains("rank 1/2 agent_store=True secret=none"));
  CHECK_THAT(n0.log(), Contains("params in sync after 20 steps"));
}

// Expected: both agents exit 0 after one restart of the whole job; in attempt 1 neither rank
// sees a key that attempt 0 wrote on its store (2.6+: bare keys, scoped per attempt).
TORCH_TEST_CASE("2 elastic nodes (c10d): rank 1 fails, the restart reads no old key, both exit 0",
                "[pytorch][multinode][restart]") {
  Job job;
  const auto endpoint = "127.0.0.1:" + std::to_string(ddp::test::free_port());
  auto args = [&](const std::string& addr) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--nproc_per_node",
                                    "1",
                                    "--rdzv_backend",
                                    "c10d",
                                    "--rdzv_endpoint",
                                    endpoint,
                                    "--rdzv_id",
                                    "torch-restart",
                                    "--rdzv_conf",
                                    kFastConf,
                                    "--local_addr",
                                    addr,
                                    "--max_restarts",
                                    "1",
                                    kWorkers + "restart_fresh_store.py"};
  };
  auto& a = job.start(torch, "a", args("127.0.0.1"));
  auto& b = job.start(torch, "b", args("127.0.0.2"));
  const auto rc_a = a.wait(kGuard);
  const auto rc_b = b.wait(kGuard);
  INFO("node a:\n" << a.log() << "\nnode b:\n" << b.log());
  CHECK(rc_a == 0);
  CHECK(rc_b == 0);
  const std::string logs = a.log() + b.log();
  CHECK_THAT(logs, Contains("ATTEMPT 0 rank 1: wrote"));
  CHECK_THAT(a.log(), Contains("restarting every node, attempt 1 of 1"));
  CHECK_THAT(b.log(), Contains("restarting every node, attempt 1 of 1"));
  for (const std::string rank : {"0", "1"}) {
    CHECK_THAT(logs, Contains("ATTEMPT 1 rank " + rank +
                              ": no key of attempt 0 visible; trained 5 DDP steps"));
  }
}
