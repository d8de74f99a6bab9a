// Strangers against a running job with a secret (docs/security.md): another ddplaunch without
// the secret or with a wrong one, and a raw client without one, try to join the job, close its
// rendezvous or overwrite its keys; the job finishes untouched with exit 0.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>

#include "agent_process.hpp"
#include "rendezvous/store/server/store_server.hpp"
#include "tests/store/raw_client.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;
namespace wire = ddp::rendezvous::wire;
using ddp::test::AgentProcess;
using ddp::test::Raw;
using ddp::test::req;

namespace {

constexpr auto kGuard = 60s;
const std::string kLinger = std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/linger.sh";
const std::string kTorchScript =
    std::string(DDP_SOURCE_DIR) + "/tests/e2e/scripts/torch_allreduce.py";
const std::string kFastConf =
    "last_call_timeout=1,join_timeout=30,heartbeat_interval=0.2,lease_timeout=1";

struct Job {
  std::string dir = ddp::test::make_temp_dir();
  std::vector<std::unique_ptr<AgentProcess>> agents;

  AgentProcess& start(const std::string& tag, std::vector<std::string> args,
                      std::map<std::string, std::string> env = {}) {
    agents.push_back(std::make_unique<AgentProcess>(args, env, dir + "/" + tag + ".log"));
    return *agents.back();
  }
  // A secret file of the given mode.
  std::string secret(const std::string& name, const std::string& bytes, mode_t mode = 0600) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << bytes;
    REQUIRE(::chmod(path.c_str(), mode) == 0);
    return path;
  }
  ~Job() {
    agents.clear();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::vector<std::string> elastic(int port, const std::string& addr,
                                 const std::vector<std::string>& extra) {
  std::vector<std::string> args{"--nnodes",         "2:3",
                                "--nproc_per_node", "2",
                                "--rdzv_backend",   "c10d",
                                "--rdzv_id",        "sec",
                                "--rdzv_endpoint",  "127.0.0.1:" + std::to_string(port),
                                "--rdzv_conf",      kFastConf,
                                "--local_addr",     addr};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE("e2e security: strangers cannot join, close or overwrite a job with a secret",
          "[e2e][security]") {
  Job job;
  const int port = ddp::test::free_port();
  const std::string secret = job.secret("job.secret", "the job's secret\n");
  const std::map<std::string, std::string> env{{"LINGER", "8"}};
  auto& a = job.start("a", elastic(port, "127.0.0.1", {"--secret_file", secret, kLinger}), env);
  auto& b = job.start("b", elastic(port, "127.0.0.2", {"--secret_file", secret, kLinger}), env);
  REQUIRE(a.wait_for_log("WORLD_SIZE=4", kGuard));
  REQUIRE(b.wait_for_log("WORLD_SIZE=4", kGuard));

  // Another ddplaunch without the secret, then with a wrong one: refused at once, by name.
  auto& none = job.start("none", elastic(port, "127.0.0.3", {kLinger}), env);
  const std::string wrong_file = job.secret("wrong.secret", "not the job's secret");
  auto& wrong =
      job.start("wrong", elastic(port, "127.0.0.4", {"--secret_file", wrong_file, kLinger}), env);
  const auto none_rc = none.wait(kGuard);
  const auto wrong_rc = wrong.wait(kGuard);
  INFO("none:\n" << none.log() << "\nwrong:\n" << wrong.log());
  CHECK((none_rc && *none_rc != 0));
  CHECK((wrong_rc && *wrong_rc != 0));
  CHECK_THAT(none.log(),
             Contains("store 127.0.0.1:" + std::to_string(port) + " refused authentication"));
  CHECK_THAT(wrong.log(), Contains("refused authentication: wrong secret"));

  // A raw client (PyTorch's dialect, no secret) is scoped to the workers' attempt: closing the
  // rendezvous, bumping its round, deleting its members and reading its failure record all
  // reach keys of its own scope, never the agents' (docs/store.md, "Attempt scopes").
  Raw raw(static_cast<uint16_t>(port));
  raw.send(req(wire::Command::kSet, {"/torchelastic/sec/closed"}, {"1"}));
  raw.send(req(wire::Command::kAdd, {"/torchelastic/sec/round"}));
  CHECK(raw.recv_i64() == 0);  // a counter of its own, from 0
  raw.send(req(wire::Command::kDeleteKey, {"/torchelastic/sec/members"}));
  CHECK(raw.recv_i64() == 0);
  raw.send(req(wire::Command::kCheck, {"/torchelastic/sec/failure"}));
  CHECK(raw.recv_u8() == wire::kCheckNotReady);
  // ddplaunch's own commands (presence records) still need the secret: refused, closed.
  Raw native(static_cast<uint16_t>(port));
  native.send(req(wire::Command::kCheck, {wire::kExtensionProbeKey}));
  REQUIRE(native.recv_u8() == wire::kCheckReady);
  native.send(req(wire::Command::kOnClose, {"/torchelastic/sec/closed"}, {"1"}),
              wire::Dialect::kNative);
  CHECK(native.closed_by_server());

  // The job goes on as if nobody had tried.
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  for (auto* agent : {&a, &b}) {
    CHECK_THAT(agent->log(), Contains("WORLD_SIZE=4 RESTARTS=0 SECRET=set"));
    CHECK_THAT(agent->log(), !Contains("WORLD_SIZE=6"));
  }
  CHECK_THAT(a.log(), Contains("closing connection from"));  // the store's lines, on its host
}

TEST_CASE("e2e security: PyTorch workers on two nodes with a secret all-reduce, confined",
          "[e2e][security][torch]") {
  Job job;
  const int port = ddp::test::free_port();
  const std::string secret = job.secret("job.secret", "shared secret");
  const std::map<std::string, std::string> env{{"PYTHON_EXEC", "/usr/bin/python3"}};
  auto args = [&](const std::string& addr) {
    auto a = elastic(port, addr, {"--secret_file", secret, kTorchScript});
    a[1] = "2:2";
    return a;
  };
  auto& a = job.start("a", args("127.0.0.1"), env);
  auto& b = job.start("b", args("127.0.0.2"), env);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  const std::string logs = a.log() + b.log();
  for (int rank = 0; rank < 4; ++rank) {
    CHECK_THAT(logs, Contains("TORCH rank=" + std::to_string(rank) + " world=4 sum=6"));
  }
  CHECK_THAT(logs, !Contains("refused"));
}

TEST_CASE("e2e security: a secret file others can read stops ddplaunch before it starts",
          "[e2e][security]") {
  Job job;
  const std::string loose = job.secret("loose.secret", "s3cret", 0644);
  auto& agent = job.start(
      "loose", {"--standalone", "--nproc_per_node", "1", "--secret_file", loose, kLinger});
  const auto rc = agent.wait(kGuard);
  INFO(agent.log());
  CHECK((rc && *rc != 0));
  CHECK_THAT(agent.log(), Contains("secret file " + loose +
                                   " has mode 0644, expected 0600 (chmod 600 " + loose + ")"));
  CHECK_THAT(agent.log(), !Contains("WORKER RANK"));

  const std::string empty = job.secret("empty.secret", "", 0600);
  auto& agent2 = job.start(
      "empty", {"--standalone", "--nproc_per_node", "1", "--secret_file", empty, kLinger});
  CHECK(agent2.wait(kGuard) != 0);
  CHECK_THAT(agent2.log(), Contains("is empty"));
}

TEST_CASE("e2e security: --standalone makes a secret and hands it to the workers only",
          "[e2e][security]") {
  Job job;
  auto& agent = job.start("standalone", {"--standalone", "--nproc_per_node", "2", kLinger},
                          {{"LINGER", "0"}});
  REQUIRE(agent.wait(kGuard) == 0);
  CHECK_THAT(agent.log(), Contains("SECRET=set"));
}

TEST_CASE("e2e security: native Gloo workers prove the generated secret to the agent's store",
          "[e2e][security]") {
  Job job;
  const std::string worker = std::string(DDP_BINARY_DIR) + "/tests/rt_test_worker";
  auto& agent = job.start("native",
                          {"--standalone", "--nproc_per_node", "2", "--log_collapse=off", worker,
                           "collectives", "30000"},
                          {{"DDPLAUNCH_BACKEND", "gloo"}});
  REQUIRE(agent.wait(kGuard) == 0);
  const auto log = agent.log();
  INFO(log);
  CHECK_THAT(log, Contains("[default0]:RESULT sum 3"));
  CHECK_THAT(log, !Contains("refused"));
  CHECK_THAT(log, !Contains("closing connection"));
}

TEST_CASE("e2e security: a native worker with a wrong secret is refused by name",
          "[e2e][security]") {
  Job job;
  const std::string worker = std::string(DDP_BINARY_DIR) + "/tests/rt_test_worker";
  const std::string wrong = job.secret("wrong.secret", "not the generated one");
  // The agent hands its own secret as DDPLAUNCH_SECRET, which wins over a file: a worker
  // wrapper that swaps it for a wrong one stands in for a stranger's native process.
  const std::string wrapper =
      job.secret("wrong_secret.sh",
                 "#!/bin/sh\nDDPLAUNCH_SECRET= DDPLAUNCH_SECRET_FILE=" + wrong + " exec " + worker +
                     " collectives 30000\n",
                 0700);
  auto& agent = job.start("native", {"--standalone", "--nproc_per_node", "1", wrapper},
                          {{"DDPLAUNCH_BACKEND", "gloo"}});
  const auto rc = agent.wait(kGuard);
  const auto log = agent.log();
  INFO(log);
  CHECK((rc && *rc != 0));
  CHECK_THAT(log, Contains("refused authentication: wrong secret"));
}

TEST_CASE("e2e security: static 2-node job with a secret file on both nodes", "[e2e][security]") {
  Job job;
  const auto port = std::to_string(ddp::test::free_port());
  const std::string secret = job.secret("job.secret", "static secret");
  auto args = [&](int rank, const std::string& addr) {
    return std::vector<std::string>{
        "--nnodes",         "2",    "--node_rank",   std::to_string(rank),
        "--nproc_per_node", "1",    "--master_addr", "127.0.0.1",
        "--master_port",    port,   "--local_addr",  addr,
        "--secret_file",    secret, kLinger};
  };
  const std::map<std::string, std::string> env{{"LINGER", "0"}};
  auto& n1 = job.start("n1", args(1, "127.0.0.2"), env);
  auto& n0 = job.start("n0", args(0, "127.0.0.1"), env);
  REQUIRE(n0.wait(kGuard) == 0);
  REQUIRE(n1.wait(kGuard) == 0);
  CHECK_THAT(n0.log() + n1.log(), Contains("WORLD_SIZE=2 RESTARTS=0 SECRET=set"));
}

TEST_CASE("e2e security: on a separate store (ddpstore's part), agents declare the namespace",
          "[e2e][security][torch]") {
  Job job;
  const std::string secret = job.secret("job.secret", "store host secret");
  ddp::rendezvous::StoreServerOptions options;
  options.host = "127.0.0.1";
  options.secret = "store host secret";
  ddp::rendezvous::StoreServer store(options);
  const std::map<std::string, std::string> env{{"PYTHON_EXEC", "/usr/bin/python3"}};
  auto args = [&](const std::string& addr) {
    auto a = elastic(store.port(), addr, {"--secret_file", secret, kTorchScript});
    a[1] = "2:2";
    a[11] = kFastConf + ",is_host=false";
    return a;
  };
  auto& a = job.start("a", args("127.0.0.2"), env);
  auto& b = job.start("b", args("127.0.0.3"), env);
  REQUIRE(a.wait(kGuard) == 0);
  REQUIRE(b.wait(kGuard) == 0);
  const std::string logs = a.log() + b.log();
  for (int rank = 0; rank < 4; ++rank) {
    CHECK_THAT(logs, Contains("TORCH rank=" + std::to_string(rank) + " world=4 sum=6"));
  }
}
