// The real ddplaunch given torchrun command lines (--run_path, `--` before the program) and
// bad values that must stop it before anything runs (exit 2, the value named).
#include <catch2/catch.hpp>
#include <filesystem>

#include "launcher/config/launch_config.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/python.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

constexpr auto kRunTimeout = 60s;
const std::string kDdplaunch = build_path("ddplaunch");

ChildOptions launch(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  ChildOptions options;
  options.argv = {kDdplaunch};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.env = std::move(env);
  return options;
}

}  // namespace

TEST_CASE("torchrun command lines: --run_path, and -- before the program", "[process]") {
  TempDir dir;
  auto script = dir.write("show.py",
                          "import os, sys\n"
                          "print(f\"argv={sys.argv} name={__name__} rank={os.environ['RANK']}\")\n"
                          "if '--boom' in sys.argv:\n"
                          "    raise ValueError('boom')\n");
  std::map<std::string, std::string> env = {{"PYTHON_EXEC", kPython},
                                            {"TMPDIR", dir.path().string()}};
  ChildProcess ok(launch(
      {"--nproc_per_node", "2", "--standalone", "--run_path", "--", script, "--lr", "1"}, env));
  REQUIRE(ok.wait_for(kRunTimeout) == 0);
  INFO(ok.out() << ok.err());
  // runpy.run_path: sys.argv is [script, args...] and the script runs as __main__.
  for (int rank : {0, 1}) {
    CHECK_THAT(ok.out(), Contains("[default" + std::to_string(rank) + "]:argv=['" + script +
                                  "', '--lr', '1'] name=__main__ rank=" + std::to_string(rank)));
  }

  // An exception in the script reaches the failure summary through the error file, as
  // torchrun's record() wrapper of --run_path does.
  ChildProcess failing(
      launch({"--nproc_per_node=1", "--standalone", "--run_path", script, "--boom"}, env));
  REQUIRE(failing.wait_for(kRunTimeout) == 1);
  CHECK_THAT(failing.err(), Contains("message   : ValueError: boom"));
  CHECK_THAT(failing.err(), Contains("raise ValueError('boom')"));

  // `--` alone, without --run_path: a plain program with option-like arguments.
  ChildProcess plain(
      launch({"--nproc_per_node=1", "--standalone", "--", "/bin/echo", "--nproc_per_node=5"}));
  REQUIRE(plain.wait_for(kRunTimeout) == 0);
  CHECK_THAT(plain.out(), Contains("[default0]:--nproc_per_node=5"));
}

TEST_CASE("nproc_per_node gpu without a GPU: a clear error, exit 2, nothing run", "[process]") {
  if (!ddp::launcher::probe_gpus().empty()) {
    SUCCEED("this machine has a GPU; the no-GPU case is covered by the unit tests");
    return;
  }
  TempDir dir;
  auto marker = dir.file("ran");
  // CUDA_VISIBLE_DEVICES names two devices, but CUDA is not there: no worker starts.
  ChildProcess agent(launch({"--nproc_per_node", "gpu", "--standalone", "/usr/bin/touch", marker},
                            {{"CUDA_VISIBLE_DEVICES", "0,1"}}));
  CHECK(agent.wait_for(kRunTimeout) == 2);
  CHECK_THAT(agent.err(), Contains("--nproc_per_node=gpu: CUDA is not available"));
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("local_ranks_filter naming a rank that does not exist: exit 2, the valid range",
          "[process]") {
  TempDir dir;
  auto marker = dir.file("ran");
  ChildProcess agent(launch({"--nproc_per_node", "2", "--standalone", "--local_ranks_filter", "5",
                             "/usr/bin/touch", marker}));
  CHECK(agent.wait_for(kRunTimeout) == 2);
  CHECK_THAT(agent.err(), Contains("--local_ranks_filter=5") && Contains("0..1"));
  CHECK_FALSE(std::filesystem::exists(marker));
}
