// What a user sees at the command line: torch.distributed.launch's old commands,
// the messages of an unreachable store, of a bad PET_ variable and of a normal end, and
// ddplaunch finding its own `train` from anywhere. Real ddplaunch runs, outcomes written down.
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "tests/e2e/agent_process.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 60s;
const std::string kDdplaunch = build_path("ddplaunch");

// A torch.distributed.launch-era script: argparse declares --local_rank (default 0).
constexpr const char* kLegacyScript = R"(import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()
print(f"ARG={args.local_rank} ENV={os.environ['LOCAL_RANK']}")
)";

ProcessResult launch(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env = {}) {
  return run_ddplaunch(args, env, kGuard);
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

}  // namespace

TEST_CASE("use_env: runs as torch.distributed.launch ran it, LOCAL_RANK and no --local_rank",
          "[e2e][user_view]") {
  TempDir dir;
  auto script = dir.write("legacy.py", kLegacyScript);
  auto run = launch({"--use_env", "--nproc_per_node=2", "--standalone", script});
  INFO(run.output);
  // Expected: exit 0, each rank reads its LOCAL_RANK from the environment, the argument keeps
  // its default (as under torch.distributed.launch --use_env), and no hint (it was asked for).
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.output, Contains("[default0]:ARG=0 ENV=0") && Contains("[default1]:ARG=0 ENV=1"));
  CHECK_THAT(run.output, !Contains("--pass_local_rank_arg"));

  // Expected: --use_env and --pass_local_rank_arg contradict each other: exit 2, naming both.
  auto both = launch({"--use_env", "--pass_local_rank_arg", "--standalone", script});
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.output, Contains("--use_env and --pass_local_rank_arg"));
}

TEST_CASE("a script declaring --local_rank, run without it, gets a one-line hint",
          "[e2e][user_view]") {
  TempDir dir;
  auto script = dir.write("legacy.py", kLegacyScript);
  auto run = launch({"--nproc_per_node=2", "--standalone", script});
  INFO(run.output);
  // Expected: the job runs (every rank gets the argument's default, as the hint says), and
  // one line names --pass_local_rank_arg and LOCAL_RANK, once per job, not per rank.
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.output, Contains("[default1]:ARG=0 ENV=1"));
  CHECK(count_of(run.output, "declares a --local_rank argument") == 1);
  CHECK_THAT(run.output, Contains("--pass_local_rank_arg") && Contains("LOCAL_RANK"));

  // Expected: with --pass_local_rank_arg each rank gets its own argument, and no hint.
  auto passed = launch({"--nproc_per_node=2", "--standalone", "--pass_local_rank_arg", script});
  CHECK(passed.exit_code == 0);
  CHECK_THAT(passed.output, Contains("[default1]:ARG=1 ENV=1"));
  CHECK_THAT(passed.output, !Contains("declares a --local_rank"));

  // Expected: a script that reads LOCAL_RANK and declares nothing gets no hint.
  auto modern = dir.write("modern.py", "import os\nprint('LR', os.environ['LOCAL_RANK'])\n");
  auto plain = launch({"--standalone", modern});
  CHECK(plain.exit_code == 0);
  CHECK_THAT(plain.output, !Contains("declares a"));
}

TEST_CASE("an unreachable store: every waiting line gives the cause, the error the right numbers",
          "[e2e][user_view]") {
  TempDir dir;
  auto script = dir.write("w.py", "print('never runs')\n");
  const auto port = std::to_string(free_port());
  auto run = launch({"--nnodes=2", "--node_rank=1", "--master_port=" + port, "--rdzv_conf",
                     "join_timeout=7", script});
  INFO(run.output);
  // Expected: after 7 s, exit 1. Each "waiting" line ends with the cause (connection refused);
  // the error names the 7 s and a last try that had time to try (no "within 1 ms" or "0 ms").
  CHECK(run.exit_code == 1);
  std::regex waiting("waiting for the rendezvous store of node_rank 0 at 127\\.0\\.0\\.1:" + port +
                     " \\(\\d+ s so far\\): Connection refused");
  CHECK(std::regex_search(run.output, waiting));
  CHECK(count_of(run.output, "so far)") == count_of(run.output, "so far): Connection refused"));
  CHECK_THAT(run.output, Contains("within 7000 ms; the last try: cannot connect"));
  CHECK(!std::regex_search(run.output, std::regex("within [0-9]{1,2} ms")));
}

TEST_CASE("a usage error is the only line, and errors name the PET_ variable the user set",
          "[e2e][user_view]") {
  TempDir dir;
  auto script = dir.write("w.py", "print('never runs')\n");
  // Expected: exit 2 with the usage error alone: no "no --secret_file" notice before it.
  auto usage = launch({"--nnodes=2", script});
  CHECK(usage.exit_code == 2);
  CHECK_THAT(usage.output, Contains("needs --node_rank") && !Contains("secret"));

  // Expected: exit 2, the message starts with the variable and its value.
  auto bad = launch({script}, {{"PET_NPROC_PER_NODE", "abc"}});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("ddplaunch: error: PET_NPROC_PER_NODE=abc: expected a positive "
                                  "integer") &&
                             !Contains("--nproc_per_node=abc"));
  // Expected: the same value on the command line is named as the flag.
  auto flag = launch({"--nproc_per_node=abc", script});
  CHECK_THAT(flag.output, Contains("error: --nproc_per_node=abc:"));
}

TEST_CASE("a successful two-node static run ends without an alarm", "[e2e][user_view]") {
  TempDir dir;
  auto script = dir.write("w.py", "import time\ntime.sleep(0.5)\nprint('done')\n");
  const auto port = std::to_string(free_port());
  auto node = [&](int rank) {
    return std::vector<std::string>{"--nnodes=2", "--node_rank=" + std::to_string(rank),
                                    "--master_port=" + port, script};
  };
  AgentProcess n1(node(1), {}, dir.file("n1.log"));
  AgentProcess n0(node(0), {}, dir.file("n0.log"));
  // Expected: both exit 0, and neither log has a warning about a closed connection (node 1
  // leaves its store waits behind when it ends, which is normal).
  REQUIRE(n0.wait(kGuard) == 0);
  REQUIRE(n1.wait(kGuard) == 0);
  for (auto* agent : {&n0, &n1}) {
    INFO(agent->log());
    CHECK_THAT(agent->log(), Contains("[default0]:done"));
    CHECK_THAT(agent->log(), !Contains("closing connection") && !Contains("connection lost"));
  }
}

TEST_CASE("`ddplaunch train` finds its own program, from the build tree and installed",
          "[e2e][user_view]") {
  TempDir dir;
  // Expected: from any directory, with PATH lacking the build tree, `train` is the build
  // tree's (it prints its version and exits 0 on both workers: one line for both).
  ChildOptions options;
  options.argv = {kDdplaunch, "--nproc_per_node=2", "--standalone", "train", "--version"};
  options.env = {{"PATH", "/usr/bin:/bin"}};
  options.merge_stderr = true;
  auto built = run_process(options, kGuard);
  INFO(built.output);
  CHECK(built.exit_code == 0);
  CHECK_THAT(built.output, Contains("[default0-1]:train "));

  // Expected: an installed layout (<prefix>/bin/ddplaunch, <prefix>/libexec/ddplaunch/PROGRAM)
  // runs PROGRAM by name; a name in neither place is an error naming both places searched.
  std::filesystem::create_directories(dir.path() / "bin");
  std::filesystem::create_directories(dir.path() / "libexec/ddplaunch");
  std::filesystem::copy_file(kDdplaunch, dir.path() / "bin/ddplaunch");
  dir.write("libexec/ddplaunch/hello", "#!/bin/sh\necho hello from libexec\n");
  std::filesystem::permissions(dir.path() / "libexec/ddplaunch/hello",
                               std::filesystem::perms::owner_all);
  options.argv = {(dir.path() / "bin/ddplaunch").string(), "--standalone", "hello"};
  auto installed = run_process(options, kGuard);
  INFO(installed.output);
  CHECK(installed.exit_code == 0);
  CHECK_THAT(installed.output, Contains("[default0]:hello from libexec"));
  options.argv = {(dir.path() / "bin/ddplaunch").string(), "--standalone", "nosuchprogram"};
  auto missing = run_process(options, kGuard);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output,
             Contains("searched PATH, " + (dir.path() / "libexec/ddplaunch").string()));
}
