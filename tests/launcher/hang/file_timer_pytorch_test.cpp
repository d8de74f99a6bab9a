// FileTimerServer against real PyTorch clients, every version of tests/support/python.hpp:
// torch.distributed.elastic.timer's FileTimerClient, configured with configure() and used
// through expires(after=1, scope=...), as a torchrun user's script does
// (tests/launcher/scripts/file_timer_worker.py). Under ddplaunch: tests/e2e/hang_pytorch_test.cpp.
#include <catch2/catch.hpp>
#include <vector>

#include "launcher/hang/file_timer_server.hpp"
#include "tests/launcher/hang/fifo_test_support.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/python.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/torch_test_case.hpp"

using namespace ddp::launcher;
using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

struct Run {
  Run(const Torch& torch, const std::string& mode)
      : server(io, dir.path() / "watchdog_timer",
               [this](const ExpiredTimer& timer) { expired.push_back(timer); }),
        worker([&] {
          ChildOptions options;
          options.argv = {torch.python, source_path("tests/launcher/scripts/file_timer_worker.py"),
                          mode};
          options.env = {{"TORCHELASTIC_TIMER_FILE", server.path().string()}};
          return options;
        }()) {}

  TempDir dir;
  boost::asio::io_context io;
  std::vector<ExpiredTimer> expired;
  FileTimerServer server;
  ChildProcess worker;
};

}  // namespace

// Expected: SIGKILLed (exit 137), reported with its pid and scope "step".
TORCH_TEST_CASE("a worker stuck past expires(after=1) is killed and reported with its scope",
                "[pytorch][file_timer_server]") {
  Run run(torch, "hang");
  // Importing torch takes seconds; the 1 s deadline starts after that.
  REQUIRE(run_until(
      run.io, [&] { return !run.expired.empty(); }, 120s));
  INFO(run.worker.out() << run.worker.err());
  CHECK(run.expired[0].pid == run.worker.pid());
  CHECK(run.expired[0].scope == "step");
  CHECK(run.expired[0].signal == 9);  // FileTimerClient's default: SIGKILL
  CHECK(run.worker.wait_for(10s) == 137);
  CHECK_THAT(run.worker.out(), Contains("pid " + std::to_string(run.worker.pid())));
  CHECK_THAT(run.worker.out(), !Contains("released"));
  CHECK(run.server.bad_requests() == 0);
}

// Expected: exit 0, nothing expired, both requests read, no timer left.
TORCH_TEST_CASE("a worker that leaves expires() in time is not killed",
                "[pytorch][file_timer_server]") {
  Run run(torch, "finish");
  std::optional<int> status;
  REQUIRE(run_until(
      run.io,
      [&] {
        status = run.worker.wait_for(0ms);
        return status.has_value();
      },
      120s));
  INFO(run.worker.out() << run.worker.err());
  CHECK(status == 0);
  CHECK_THAT(run.worker.out(), Contains("released"));
  // The acquire and the release, both read; nothing left to expire.
  REQUIRE(run_until(
      run.io, [&] { return run.server.requests() >= 2; }, 10s));
  run_for(run.io, 1500ms);
  CHECK(run.expired.empty());
  CHECK(run.server.active_timers() == 0);
  CHECK(run.server.bad_requests() == 0);
}
