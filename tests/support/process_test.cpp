// The child-process helpers every multi-process test relies on: deadlines hold, nothing is
// left running, failures say what happened.
#include "tests/support/process.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>

#include "tests/support/files.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

ChildOptions shell(const std::string& script) {
  ChildOptions options;
  options.argv = {"/bin/sh", "-c", script};
  return options;
}

}  // namespace

TEST_CASE("exit codes, signals, separate and merged output, env overrides", "[support]") {
  auto options = shell("echo out; echo err >&2; echo \"$DDP_SUPPORT_X\"; exit 3");
  options.env = {{"DDP_SUPPORT_X", "from the test"}};
  ChildProcess child(options);
  CHECK(child.wait_for(30s) == 3);
  CHECK(child.out() == "out\nfrom the test\n");
  CHECK(child.err() == "err\n");

  ChildProcess killed(shell("kill -TERM $$"));
  CHECK(killed.wait(30s) == 128 + SIGTERM);

  const auto merged = run_process({"/bin/sh", "-c", "echo a; echo b >&2; echo c"}, 30s);
  CHECK(merged.exit_code == 0);
  CHECK(merged.output == "a\nb\nc\n");
}

TEST_CASE("a program that cannot be executed exits 127 and names itself", "[support]") {
  const auto result = run_process({"/nonexistent/program", "arg"}, 30s);
  CHECK(result.exit_code == 127);
  CHECK_THAT(result.output, Contains("exec /nonexistent/program failed"));
}

TEST_CASE("wait() kills a child still running at the deadline and says so", "[support]") {
  ChildProcess child(shell("echo started; exec sleep 600"));
  CHECK(child.first_line(30s) == "started");
  CHECK_FALSE(child.wait_for(50ms).has_value());
  CHECK(child.wait(50ms) == kTimedOut);
  CHECK(child.timed_out());
  CHECK_FALSE(process_alive(child.pid()));
  CHECK_THAT(child.err(), Contains("killed with SIGKILL: still running after 50 ms"));

  const auto result = run_process({"/bin/sleep", "600"}, 50ms);
  CHECK(result.timed_out);
  CHECK(result.exit_code == kTimedOut);
}

TEST_CASE("scope exit kills the child and, with its own group, all it started", "[support]") {
  TempDir dir;
  const std::string grandchild_pid = dir.file("grandchild.pid");
  pid_t child_pid = -1;
  {
    auto options = shell("sleep 600 & echo $! > " + grandchild_pid + "; wait");
    options.own_process_group = true;
    ChildProcess child(options);
    child_pid = child.pid();
    REQUIRE(wait_until([&] { return read_file(grandchild_pid).ends_with("\n"); }, 30s));
    CHECK(process_alive(child_pid));
  }  // as when an assertion fails mid-test
  const pid_t grandchild = static_cast<pid_t>(std::stol(read_file(grandchild_pid)));
  CHECK_FALSE(process_alive(child_pid));
  const bool grandchild_gone = wait_until([&] { return !process_alive(grandchild); }, 10s);
  if (!grandchild_gone) ::kill(grandchild, SIGKILL);  // clean up before failing
  CHECK(grandchild_gone);
}
