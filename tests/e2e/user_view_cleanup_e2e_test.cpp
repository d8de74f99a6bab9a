// What a job leaves behind and reports: a daemon a worker started with setsid is
// stopped with the group, and a rank reaped by torchrun's file timer has its stack in the
// failure summary. Real ddplaunch runs, outcomes written down.
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>

#include "tests/e2e/agent_process.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 60s;

ProcessResult launch(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env = {}) {
  return run_ddplaunch(args, env, kGuard);
}

}  // namespace

TEST_CASE(
    "a daemon a worker started with setsid -f is gone after the job (--no_adopt_daemons keeps it)",
    "[e2e][user_view]") {
  TempDir dir;
  // The daemon leaves the worker's process group and session; the worker exits 0 at once.
  auto script = dir.write("daemonize.sh", R"(#!/bin/sh
setsid -f sh -c 'echo $$ > "$OUT_DIR/daemon_$LOCAL_RANK.pid"; exec sleep 313'
while [ ! -s "$OUT_DIR/daemon_$LOCAL_RANK.pid" ]; do sleep 0.05; done
echo started
)");
  auto run = launch({"--nproc_per_node=2", "--standalone", "--no_python", "/bin/sh", script},
                    {{"OUT_DIR", dir.path().string()}});
  INFO(run.output);
  // Expected: exit 0; one line names the two sleeps it had to kill; neither survives.
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.output, Contains("killed 2 process(es) the workers had started outside their "
                                  "process groups") &&
                             Contains("(sleep)"));
  for (int rank : {0, 1}) {
    auto text = read_file(dir.path() / ("daemon_" + std::to_string(rank) + ".pid"));
    REQUIRE(!text.empty());
    const pid_t daemon = static_cast<pid_t>(std::stol(text));
    CHECK(wait_until([&] { return !process_alive(daemon); }, 5s));
  }

  // Expected with --no_adopt_daemons: the daemon outlives the job, as under torchrun, and
  // nothing is said of it.
  const auto kept_dir = dir.path() / "kept";
  std::filesystem::create_directories(kept_dir);
  auto kept = launch({"--standalone", "--no_adopt_daemons", "--no_python", "/bin/sh", script},
                     {{"OUT_DIR", kept_dir.string()}});
  INFO(kept.output);
  CHECK(kept.exit_code == 0);
  CHECK_THAT(kept.output, !Contains("outside their process groups"));
  {
    auto text = read_file(kept_dir / "daemon_0.pid");
    REQUIRE(!text.empty());
    const pid_t daemon = static_cast<pid_t>(std::stol(text));
    CHECK(process_alive(daemon));
    ::kill(daemon, SIGKILL);
  }

  // Expected: a job whose workers start no daemon says nothing about it.
  auto quiet = launch({"--standalone", "--no_python", "/bin/echo", "hi"});
  CHECK(quiet.exit_code == 0);
  CHECK_THAT(quiet.output, !Contains("outside their process groups"));
}

TEST_CASE(
    "a shell worker's own child, still in its process group when the group is stopped, is "
    "not reported as escaped",
    "[e2e][user_view]") {
  TempDir dir;
  // Rank 0's shell starts a sleep in its own process group that ignores SIGTERM, so the shell
  // dies of the stop's SIGTERM first and the agent (a child subreaper) adopts the sleep while
  // it still lives; rank 1 then fails the first attempt, and the group is stopped for the
  // restart. The second attempt ends at once.
  auto script = dir.write("group_child.sh", R"(#!/bin/sh
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || { echo "attempt $TORCHELASTIC_RESTART_COUNT"; exit 0; }
if [ "$LOCAL_RANK" = 1 ]; then
  while [ ! -s "$OUT_DIR/sleep.pid" ]; do sleep 0.05; done
  exit 1
fi
sh -c 'trap "" TERM; echo $$ > "$OUT_DIR/sleep.pid"; exec sleep 317' &
wait
)");
  auto run = launch(
      {"--nproc_per_node=2", "--standalone", "--max_restarts=1", "--no_python", "/bin/sh", script},
      {{"OUT_DIR", dir.path().string()}});
  INFO(run.output);
  // Expected: one restart, exit 0; the sleep (same process group as its shell) is killed with
  // the group and never named as a process started outside it.
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.output, Contains("restarting, attempt 1 of 1") && Contains("attempt 1"));
  CHECK_THAT(run.output, !Contains("outside their process groups"));
  auto text = read_file(dir.path() / "sleep.pid");
  REQUIRE(!text.empty());
  const pid_t sleeper = static_cast<pid_t>(std::stol(text));
  CHECK(wait_until([&] { return !process_alive(sleeper); }, 5s));
}

TEST_CASE("a rank reaped by the file timer has its Python stack in the failure summary",
          "[e2e][user_view]") {
  TempDir dir;
  // torch.distributed.elastic.timer.FileTimerClient's request, written by hand (no torch).
  auto script = dir.write("timer.py", R"(import json, os, time
rank = int(os.environ["RANK"])
def stuck_in_here():
    time.sleep(600)
if rank == 1:
    with open(os.environ["TORCHELASTIC_TIMER_FILE"], "w") as fifo:
        fifo.write(json.dumps({"version": 1, "pid": os.getpid(), "scope_id": "stuck_step",
                               "expiration_time": time.time() + 1, "signal": 9}) + "\n")
    stuck_in_here()
time.sleep(600)
)");
  auto run = launch({"--nproc_per_node=2", "--standalone", script},
                    {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}});
  INFO(run.output);
  // Expected: rank 1 is asked for its stack (SIGABRT) before SIGKILL; Python's faulthandler
  // prints it and the rank dies of SIGABRT (exit 134); the summary names the scope and shows
  // the traceback down to stuck_in_here.
  CHECK(run.exit_code == 134);
  CHECK_THAT(run.output, Contains("file timer scope 'stuck_step' expired; asked for its stack "
                                  "(SIGABRT); SIGKILL follows"));
  const auto summary = run.output.substr(std::min(run.output.size(), run.output.find("FAILED")));
  CHECK_THAT(summary, Contains("rank      : 1") && Contains("hang: file timer scope 'stuck_step'"));
  CHECK_THAT(summary, Contains("stuck_in_here"));
}
