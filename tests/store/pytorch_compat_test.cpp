// Real PyTorch as a client of our server, every version of tests/support/python.hpp:
// Debian's 1.13 (legacy dialect) and the 2.x venvs (VALIDATE handshake; 2.6+ bare keys).
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
#include "tests/support/torch_test_case.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {

const std::string kScripts = ddp::test::source_path("tests/store/python/");

// torch's Python running script with args and env, stdout and stderr in one capture.
ddp::test::ChildOptions python(const ddp::test::Torch& torch, const std::string& script,
                               std::vector<std::string> args,
                               std::map<std::string, std::string> env) {
  ddp::test::ChildOptions options;
  options.argv = {torch.python, kScripts + script};
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

// The env ddplaunch hands rank `rank` of a 2-process job on the store at port.
std::map<std::string, std::string> worker_env(uint16_t port, int rank) {
  return {{"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"RANK", std::to_string(rank)},
          {"WORLD_SIZE", "2"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"OMP_NUM_THREADS", "1"}};
}

// Runs torch_allreduce_worker.py as ranks 0 and 1 on the store at port; both print RESULT 3.
void allreduce_on(const ddp::test::Torch& torch, uint16_t port) {
  std::vector<std::unique_ptr<ddp::test::ChildProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(std::make_unique<ddp::test::ChildProcess>(
        python(torch, "torch_allreduce_worker.py", {}, worker_env(port, rank))));
  }
  for (auto& rank : ranks) {
    const int rc = rank->wait(120s);
    INFO(rank->out());
    CHECK(rc == 0);
    CHECK_THAT(rank->out(), Catch::Contains("RESULT 3"));
  }
}

}  // namespace

// Expected: every operation the version's client has (queues, list_keys, barrier on 2.15)
// answers as PyTorch's own server does, the script checking that server first.
TORCH_TEST_CASE("TCPStore client: every operation against a standalone ddpstore",
                "[pytorch][ddpstore]") {
  ddp::test::ChildOptions daemon_options;
  daemon_options.argv = {ddp::test::build_path("ddpstore"), "--host", "127.0.0.1", "--port", "0"};
  daemon_options.merge_stderr = true;
  ddp::test::ChildProcess daemon(daemon_options);
  const std::string port = daemon.first_line(10s);  // ddpstore prints its port first
  INFO("ddpstore: " << daemon.out());
  REQUIRE(std::stoi(port) > 0);

  ddp::test::ChildProcess py(python(torch, "torch_store_client.py", {"127.0.0.1", port}, {}));
  const int rc = py.wait(120s);
  INFO(py.out());
  REQUIRE(rc == 0);
  CHECK_THAT(py.out(), Catch::Contains("REFERENCE OK"));
  CHECK_THAT(py.out(), Catch::Contains(": OK set get add compare_set"));
  if (torch.at_least(2, 1)) {
    CHECK_THAT(py.out(), Catch::Contains("append multi_set multi_get"));
  }
  if (torch.at_least(2, 15)) {
    CHECK_THAT(py.out(), Catch::Contains("queue_push queue_pop queue_len list_keys barrier"));
  }

  // What the Python client stored is visible to our own (2.x dialect) client; PyTorch's
  // TCPStore puts "/" in front of every key it sends.
  TcpStoreOptions co;
  co.port = static_cast<uint16_t>(std::stoi(port));
  co.timeout = 10s;
  TcpStore store(co);
  CHECK(store.get("/key") == "value");
  CHECK(store.get("/counter") == "3");
  CHECK(store.get("/cas") == "second");
}

// Expected: both ranks print RESULT 3; Gloo's keys went where the version puts them.
TORCH_TEST_CASE("two processes init_process_group(env://) on our store and all_reduce",
                "[pytorch]") {
  StoreServer server(loopback());
  allreduce_on(torch, server.port());
  TcpStoreOptions co;
  co.port = server.port();
  co.timeout = 10s;
  TcpStore store(co);
  // Under the agent-store prefix (PyTorch adds its own "/"), as under torchrun; from 2.6 a
  // bare TCPStore, trusting each attempt to get a fresh store. Gloo's key names as 1.13 and
  // the 2.x releases tested name them.
  const std::string prefix = torch.at_least(2, 6) ? "/" : "//worker/attempt_0/";
  const std::string gloo = torch.at_least(2, 0) ? "default_pg/0//cpu//0/" : "default_pg/0/0/rank_";
  CHECK(store.check({prefix + gloo + "0", prefix + gloo + "1"}));
}

// Expected: INSIDE OK and OUTSIDE UNREACHABLE; the agent's key untouched, the client's keys
// stored under attempt 3's namespace as it named them.
TORCH_TEST_CASE("without the secret: the attempt's namespace works, nothing else is reached",
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

  ddp::test::ChildProcess py(python(torch, "torch_confined_client.py",
                                    {"127.0.0.1", std::to_string(server.port()), "3"}, {}));
  const int rc = py.wait(120s);
  INFO(py.out());
  REQUIRE(rc == 0);
  CHECK_THAT(py.out(), Catch::Contains("INSIDE OK"));
  CHECK_THAT(py.out(), Catch::Contains("OUTSIDE UNREACHABLE"));
  CHECK(agent.get("/torchelastic/rdzv/state") == "agents only");
  // Stored as named, under the attempt's namespace (PyTorch puts "/" before every key).
  CHECK(agent.get("/worker/attempt_3///worker/attempt_3/key") == "value");
}

// Expected: both ranks print RESULT 3 (2.6+'s bare keys are scoped to attempt 0, not refused).
TORCH_TEST_CASE("two processes all_reduce on a store with a secret, scoped to attempt 0",
                "[pytorch][auth]") {
  StoreServerOptions options = loopback();
  options.secret = "the job's secret";
  StoreServer server(options);
  server.set_worker_namespace("/worker/attempt_0/");
  allreduce_on(torch, server.port());
}
