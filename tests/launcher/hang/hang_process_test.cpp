// The hang-detection sources against real processes: the file-timer server kills a real
// child when its timer expires, /proc shows a stopped and a vanished child, and the Python
// progress helper (worker_runtime/python/ddplaunch_progress.py) writes into a real channel.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <nlohmann/json.hpp>
#include <vector>

#include "launcher/hang/file_timer_server.hpp"
#include "launcher/hang/progress_channel.hpp"
#include "launcher/process/proc_status.hpp"
#include "tests/launcher/hang/fifo_test_support.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/python.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::launcher;
using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

ChildOptions sleeper() {
  ChildOptions options;
  options.argv = {"/bin/sleep", "30"};
  return options;
}

char state_of(pid_t pid) {
  auto status = read_proc_status(pid);
  return status ? status->state : '-';
}

}  // namespace

TEST_CASE("FileTimerServer kills a real process whose timer expired, then reports it",
          "[file_timer_server]") {
  auto [signal, exit_code] = GENERATE(std::make_pair(SIGKILL, 137), std::make_pair(SIGTERM, 143));
  TempDir dir;
  boost::asio::io_context io;
  std::vector<ExpiredTimer> expired;
  FileTimerServer server(io, dir.path() / "timer",
                         [&](const ExpiredTimer& timer) { expired.push_back(timer); });
  ChildProcess child(sleeper());
  ChildProcess bystander(sleeper());  // another worker, with a timer it released
  double deadline = wall_now() + 0.3;
  REQUIRE(write_fifo(server.path(), timer_request(child.pid(), "train_step", deadline, signal)));
  REQUIRE(
      write_fifo(server.path(), timer_request(bystander.pid(), "train_step", deadline, signal)));
  REQUIRE(write_fifo(server.path(), timer_request(bystander.pid(), "train_step", -1, 0)));
  REQUIRE(run_until(
      io, [&] { return !expired.empty(); }, 10s));
  run_for(io, 100ms);

  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == child.pid());
  CHECK(expired[0].scope == "train_step");
  CHECK(expired[0].signal == signal);
  CHECK(expired[0].kill_error == 0);
  CHECK(child.wait_for(5s) == exit_code);  // the signal went out before the report
  CHECK(bystander.wait_for(0ms) == std::nullopt);
  CHECK(server.active_timers() == 0);
}

TEST_CASE("read_proc_status sees a child stopped (T), running again, a zombie, then gone",
          "[proc_status]") {
  ChildProcess child(sleeper());
  REQUIRE(wait_until([&] { return state_of(child.pid()) == 'S'; }, 10s));
  auto status = read_proc_status(child.pid());
  REQUIRE(status);
  REQUIRE(status->threads.size() == 1);
  CHECK(status->threads[0].tid == child.pid());
  CHECK(status->threads[0].name == "sleep");

  child.signal(SIGSTOP);
  REQUIRE(wait_until([&] { return state_of(child.pid()) == 'T'; }, 10s));
  status = read_proc_status(child.pid());
  REQUIRE(status);
  CHECK(status->threads[0].state == 'T');
  CHECK_THAT(describe(*status),
             Catch::StartsWith("tid " + std::to_string(child.pid()) + " (sleep) state T wchan "));

  child.signal(SIGCONT);
  CHECK(wait_until([&] { return state_of(child.pid()) == 'S'; }, 10s));

  // Killed but not reaped: a zombie; reaped: no such process.
  ::kill(child.pid(), SIGKILL);
  CHECK(wait_until([&] { return state_of(child.pid()) == 'Z'; }, 10s));
  CHECK(child.wait_for(5s) == 137);
  CHECK_FALSE(read_proc_status(child.pid()));
}

TEST_CASE("the Python progress helper writes protocol lines the channel understands",
          "[progress_channel]") {
  TempDir dir;
  boost::asio::io_context io;
  std::vector<ddp::progress::Report> reports;
  ProgressChannel channel(io, dir.path() / "progress",
                          [&](const ddp::progress::Report& report) { reports.push_back(report); });
  std::vector<std::string> warnings;
  channel.set_warning_sink([&](const std::string& message) { warnings.push_back(message); });

  const std::string code =
      "import os, sys\n"
      "sys.path.insert(0, sys.argv[1])\n"
      "from ddplaunch_progress import progress\n"
      "print(progress(1), progress(2, op='all reduce', seq=5, phase='enter'),\n"
      "      progress(2, op='allreduce', seq=5, phase='exit'), os.getpid())\n";
  ChildOptions options;
  options.argv = {kPython, "-c", code, source_path("worker_runtime/python")};
  options.env = {{"DDPLAUNCH_PROGRESS_FILE", channel.path().string()}, {"RANK", "3"}};
  ChildProcess python(options);
  // The loop runs while Python writes: its lines wait in the pipe until then anyway.
  REQUIRE(run_until(
      io, [&] { return reports.size() >= 3; }, 60s));
  REQUIRE(python.wait_for(30s) == 0);
  INFO(python.out() << python.err());
  CHECK(python.out() == "True True True " + std::to_string(python.pid()) + "\n");
  REQUIRE(reports.size() == 3);
  for (const auto& report : reports) {
    CHECK(report.rank == 3);
    CHECK(report.pid == python.pid());
  }
  CHECK(reports[0].step == 1);
  CHECK(reports[0].op.empty());
  CHECK(reports[0].seq == -1);
  CHECK(reports[1].step == 2);
  CHECK(reports[1].op == "all_reduce");
  CHECK(reports[1].seq == 5);
  CHECK(reports[1].phase == ddp::progress::Phase::kEnter);
  CHECK(reports[2].phase == ddp::progress::Phase::kExit);
  CHECK(channel.bad_lines() == 0);
  CHECK(warnings.empty());
}

TEST_CASE("the Python progress helper never blocks or raises without an agent",
          "[progress_channel]") {
  TempDir dir;
  auto fifo = dir.path() / "no_reader";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // a FIFO nobody reads: open() gets ENXIO
  std::string regular = dir.write("regular", "keep me\n");
  const std::string code =
      "import os, sys\n"
      "sys.path.insert(0, sys.argv[1])\n"
      "import ddplaunch_progress as p\n"
      "results = []\n"
      "for path in [None, sys.argv[2], sys.argv[3], sys.argv[4]]:\n"
      "    if path is None:\n"
      "        os.environ.pop(p.ENV_VAR, None)\n"
      "    else:\n"
      "        os.environ[p.ENV_VAR] = path\n"
      "    p._next_open = 0.0\n"
      "    results.append(p.progress(7))\n"
      "print(results)\n";
  auto result = run_python({"-c", code, source_path("worker_runtime/python"), fifo.string(),
                            regular, (dir.path() / "missing").string()},
                           30s);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output == "[False, False, False, False]\n");
  CHECK(read_file(regular) == "keep me\n");
}
