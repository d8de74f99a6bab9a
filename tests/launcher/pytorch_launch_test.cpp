// Real PyTorch (Debian's torch 1.13 under /usr/bin/python3) as ddplaunch's workers.
#include <catch2/catch.hpp>
#include <filesystem>

#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/python.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

const std::string kDdplaunch = build_path("ddplaunch");

std::string worker_script(const std::string& name) {
  return source_path("tests/launcher/workers/" + name);
}

bool have_torch() {
  return python_can_import("torch.distributed");
}

}  // namespace

TEST_CASE("a 2-worker gloo DDP script trains and exits 0 on the agent's store", "[pytorch]") {
  if (!have_torch()) {
    // Real PyTorch is part of the suite (scripts/setup.sh installs it): never a silent skip.
    FAIL("/usr/bin/python3 cannot import torch.distributed: run scripts/setup.sh (python3-torch)");
  }
  ChildOptions options;
  options.argv = {kDdplaunch, "--nproc_per_node=2", "--standalone", worker_script("ddp_train.py")};
  options.env = {{"PYTHON_EXEC", kPython}};
  ChildProcess agent(options);
  auto status = agent.wait_for(240s);
  INFO(agent.out() << agent.err());
  REQUIRE(status == 0);
  CHECK_THAT(agent.out(), Contains("[default0]:rank 0/2 agent_store=True"));
  CHECK_THAT(agent.out(), Contains("[default1]:rank 1/2 agent_store=True"));
  CHECK_THAT(agent.out(), Contains("[default0]:params in sync after 20 steps"));
  // --standalone made a job secret: the workers' PyTorch clients stayed inside their
  // namespace, so the store refused nothing (docs/security.md).
  CHECK_THAT(agent.err(), !Contains("refused"));
}

TEST_CASE("a legacy torch.distributed.launch script reading --local_rank works", "[pytorch]") {
  if (!have_torch()) {
    // Real PyTorch is part of the suite (scripts/setup.sh installs it): never a silent skip.
    FAIL("/usr/bin/python3 cannot import torch.distributed: run scripts/setup.sh (python3-torch)");
  }
  ChildOptions options;
  options.argv = {kDdplaunch,
                  "--nproc_per_node=2",
                  "--standalone",
                  "--pass_local_rank_arg",
                  worker_script("legacy_local_rank.py"),
                  "--lr=0.5"};
  options.env = {{"PYTHON_EXEC", kPython}};
  ChildProcess agent(options);
  auto status = agent.wait_for(240s);
  INFO(agent.out() << agent.err());
  REQUIRE(status == 0);
  CHECK_THAT(agent.out(), Contains("[default0]:local_rank=0 lr=0.5 world=2"));
  CHECK_THAT(agent.out(), Contains("[default1]:local_rank=1 lr=0.5 world=2"));
}

TEST_CASE("PyTorch's own @record error file feeds the failure summary", "[pytorch]") {
  if (!have_torch()) {
    // Real PyTorch is part of the suite (scripts/setup.sh installs it): never a silent skip.
    FAIL("/usr/bin/python3 cannot import torch.distributed: run scripts/setup.sh (python3-torch)");
  }
  ChildOptions options;
  options.argv = {kDdplaunch, "--nproc_per_node=2", "--standalone",
                  worker_script("record_failure.py")};
  options.env = {{"PYTHON_EXEC", kPython}};
  ChildProcess agent(options);
  auto status = agent.wait_for(240s);
  INFO(agent.out() << agent.err());
  CHECK(status == 1);
  auto err = agent.err();
  CHECK_THAT(err, Contains("record_failure.py FAILED"));
  CHECK_THAT(err, Contains("rank      : 1 (local_rank: 1)"));
  CHECK_THAT(err, Contains("rank 1 found a NaN in the loss"));
  CHECK_THAT(err, Contains("traceback :"));
  CHECK_THAT(err, Contains("in main"));
}
