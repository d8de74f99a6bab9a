// Real PyTorch (Debian's python3-torch 1.13, legacy dialect) as a client of our server.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/tcp_store.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/python.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {

const std::string kScripts = ddp::test::source_path("tests/store/python/");

// kPython running script with args and env, stdout and stderr in one capture.
ddp::test::ChildOptions python(const std::string& script, std::vector<std::string> args,
                               std::map<std::string, std::string> env) {
  ddp::test::ChildOptions options;
  options.argv = {ddp::test::kPython, kScripts + script};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = std::move(env);
  options.merge_stderr = true;
  return options;
}

StoreServerOptions loopback() {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  return o;
}

}  // namespace

TEST_CASE("torch 1.13 TCPStore client: set/get/add/compare_set/wait/delete_key/num_keys",
          "[pytorch]") {
  StoreServer server(loopback());
  ddp::test::ChildProcess py(
      python("torch_store_client.py", {"127.0.0.1", std::to_string(server.port())}, {}));
  const int rc = py.wait(120s);
  INFO(py.out());
  REQUIRE(rc == 0);
  CHECK_THAT(py.out(), Catch::Contains("OK"));

  // What the Python client stored is visible to our own (2.x dialect) client; PyTorch's
  // TCPStore puts "/" in front of every key it sends.
  TcpStoreOptions co;
  co.port = server.port();
  co.timeout = 10s;
  TcpStore store(co);
  CHECK(store.get("/key") == "value");
  CHECK(store.get("/counter") == "3");
  CHECK(store.get("/cas") == "second");
}

TEST_CASE("two torch processes init_process_group(env://) on our store and all_reduce",
          "[pytorch]") {
  StoreServer server(loopback());
  std::vector<std::unique_ptr<ddp::test::ChildProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(std::make_unique<ddp::test::ChildProcess>(
        python("torch_allreduce_worker.py", {},
               {{"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(server.port())},
                {"RANK", std::to_string(rank)},
                {"WORLD_SIZE", "2"},
                {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                {"TORCHELASTIC_RESTART_COUNT", "0"},
                {"OMP_NUM_THREADS", "1"}})));
  }
  for (auto& rank : ranks) {
    const int rc = rank->wait(120s);
    INFO(rank->out());
    CHECK(rc == 0);
    CHECK_THAT(rank->out(), Catch::Contains("RESULT 3"));
  }
  // Gloo's rendezvous went under the agent-store prefix (PyTorch adds its own "/"), as
  // under torchrun's agent.
  TcpStoreOptions co;
  co.port = server.port();
  co.timeout = 10s;
  TcpStore store(co);
  CHECK(store.check(
      {"//worker/attempt_0/default_pg/0/0/rank_0", "//worker/attempt_0/default_pg/0/0/rank_1"}));
}

TEST_CASE("torch without the secret: its attempt's namespace works, nothing else is reached",
          "[pytorch][auth]") {
  StoreServerOptions options = loopback();
  options.secret = "the job's secret";
  StoreServer server(options);
  TcpStoreOptions co;
  co.port = server.port();
  co.timeout = 10s;
  co.secret = options.secret;
  TcpStore agent(co);
  agent.set("/torchelastic/rdzv/state", "agents only");
  agent.set_worker_namespace("/worker/attempt_3/");

  ddp::test::ChildProcess py(
      python("torch_confined_client.py", {"127.0.0.1", std::to_string(server.port()), "3"}, {}));
  const int rc = py.wait(120s);
  INFO(py.out());
  REQUIRE(rc == 0);
  CHECK_THAT(py.out(), Catch::Contains("INSIDE OK"));
  CHECK_THAT(py.out(), Catch::Contains("OUTSIDE UNREACHABLE"));
  CHECK(agent.get("/torchelastic/rdzv/state") == "agents only");
  // Stored as named, under the attempt's namespace (PyTorch puts "/" before every key).
  CHECK(agent.get("/worker/attempt_3///worker/attempt_3/key") == "value");
}

TEST_CASE("two torch processes all_reduce on a store with a secret, confined to attempt 0",
          "[pytorch][auth]") {
  StoreServerOptions options = loopback();
  options.secret = "the job's secret";
  StoreServer server(options);
  server.set_worker_namespace("/worker/attempt_0/");
  std::vector<std::unique_ptr<ddp::test::ChildProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(std::make_unique<ddp::test::ChildProcess>(
        python("torch_allreduce_worker.py", {},
               {{"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(server.port())},
                {"RANK", std::to_string(rank)},
                {"WORLD_SIZE", "2"},
                {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                {"TORCHELASTIC_RESTART_COUNT", "0"},
                {"OMP_NUM_THREADS", "1"}})));
  }
  for (auto& rank : ranks) {
    const int rc = rank->wait(120s);
    INFO(rank->out());
    CHECK(rc == 0);
    CHECK_THAT(rank->out(), Catch::Contains("RESULT 3"));
  }
}
