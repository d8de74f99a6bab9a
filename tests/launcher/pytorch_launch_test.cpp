// Real PyTorch as ddplaunch's workers, one node: every version of tests/support/python.hpp
// (Debian's 1.13, the 2.x venvs), handed to ddplaunch as PYTHON_EXEC.
#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/python.hpp"
#include "tests/support/torch_test_case.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

const std::string kDdplaunch = build_path("ddplaunch");

std::string worker_script(const std::string& name) {
  return source_path("tests/launcher/workers/" + name);
}

// ddplaunch args... under torch's Python; stdout and stderr captured apart. --master_port 0:
// the default one-node job, on a port the kernel picks (tests run side by side).
ChildOptions launch(const Torch& torch, std::vector<std::string> args) {
  ChildOptions options;
  options.argv = {kDdplaunch, "--master_port", "0"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = {{"PYTHON_EXEC", torch.python}};
  return options;
}

}  // namespace

// Expected: exit 0, both ranks on the agent's store with the generated secret, params in sync.
TORCH_TEST_CASE("plain ddplaunch --nproc_per_node 2: a gloo DDP script trains and exits 0",
                "[pytorch]") {
  ChildProcess agent(launch(torch, {"--nproc_per_node", "2", worker_script("ddp_train.py")}));
  auto status = agent.wait_for(240s);
  INFO(agent.out() << agent.err());
  REQUIRE(status == 0);
  CHECK_THAT(agent.out(), Contains("[default0]:rank 0/2 agent_store=True secret=set torch=" +
                                   torch.version.substr(0, 3)));
  CHECK_THAT(agent.out(), Contains("[default1]:rank 1/2 agent_store=True secret=set"));
  CHECK_THAT(agent.out(), Contains("[default0]:params in sync after 20 steps"));
  // One node made a job secret: the workers' PyTorch clients stayed in their attempt's
  // scope, so the store refused and closed nothing (docs/security.md).
  CHECK_THAT(agent.err(), !Contains("refused"));
  CHECK_THAT(agent.err(), !Contains("closing connection"));
}

// Expected: exit 0; each rank gets --local_rank=<its LOCAL_RANK> before the script's own args.
TORCH_TEST_CASE("a legacy torch.distributed.launch script reading --local_rank works",
                "[pytorch]") {
  ChildProcess agent(launch(torch, {"--nproc_per_node=2", "--standalone", "--pass_local_rank_arg",
                                    worker_script("legacy_local_rank.py"), "--lr=0.5"}));
  auto status = agent.wait_for(240s);
  INFO(agent.out() << agent.err());
  REQUIRE(status == 0);
  CHECK_THAT(agent.out(), Contains("[default0]:local_rank=0 lr=0.5 world=2"));
  CHECK_THAT(agent.out(), Contains("[default1]:local_rank=1 lr=0.5 world=2"));
}

// Expected: exit 1; the summary names rank 1, the exception type and message, the traceback.
TORCH_TEST_CASE("PyTorch's own @record error file feeds the failure summary", "[pytorch]") {
  ChildProcess agent(launch(torch, {"--nproc_per_node=2", worker_script("record_failure.py")}));
  auto status = agent.wait_for(240s);
  INFO(agent.out() << agent.err());
  CHECK(status == 1);
  auto err = agent.err();
  CHECK_THAT(err, Contains("record_failure.py FAILED"));
  CHECK_THAT(err, Contains("rank      : 1 (local_rank: 1)"));
  CHECK_THAT(err, Contains("ValueError"));
  CHECK_THAT(err, Contains("rank 1 found a NaN in the loss"));
  CHECK_THAT(err, Contains("traceback :"));
  CHECK_THAT(err, Contains("in main"));
}

// Expected: exit 0 after one restart; attempt 1 sees none of attempt 0's keys on its store
// (2.6+: a bare TCPStore on the agent's store, scoped per attempt by the server).
TORCH_TEST_CASE("one node, default secret: after rank 1 fails, the restart reads no old key",
                "[pytorch][restart]") {
  ChildProcess agent(launch(torch, {"--nproc_per_node", "2", "--max_restarts", "1",
                                    worker_script("restart_fresh_store.py")}));
  auto status = agent.wait_for(240s);
  INFO(agent.out() << agent.err());
  REQUIRE(status == 0);
  CHECK_THAT(agent.out(), Contains("[default1]:ATTEMPT 0 rank 1: wrote"));
  CHECK_THAT(agent.err(), Contains("restarting, attempt 1 of 1"));
  for (const std::string rank : {"0", "1"}) {
    CHECK_THAT(agent.out(), Contains("[default" + rank + "]:ATTEMPT 1 rank " + rank +
                                     ": no key of attempt 0 visible; trained 5 DDP steps"));
  }
  CHECK_THAT(agent.err(), !Contains("closing connection"));
}
