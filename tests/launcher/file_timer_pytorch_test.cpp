// FileTimerServer against real PyTorch 1.13 clients: torch.distributed.elastic.timer's
// FileTimerClient, configured with configure() and used through expires(after=1, scope=...),
// as a torchrun user's script does (tests/launcher/scripts/file_timer_worker.py).
#include <catch2/catch.hpp>
#include <vector>

#include "launcher/file_timer_server.hpp"
#include "tests/launcher/fifo_test_support.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/python.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

void require_torch() {
  if (!python_can_import("torch.distributed.elastic.timer")) {
    // Real PyTorch is part of the suite (scripts/setup.sh installs it): never a silent skip.
    FAIL("/usr/bin/python3 cannot import torch.distributed.elastic.timer: run scripts/setup.sh");
  }
}

struct Run {
  explicit Run(const std::string& mode)
      : server(io, dir.path() / "watchdog_timer",
               [this](const ExpiredTimer& timer) { expired.push_back(timer); }),
        worker([&] {
          ChildOptions options;
          options.argv = {kPython, source_path("tests/launcher/scripts/file_timer_worker.py"),
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

TEST_CASE("a PyTorch worker stuck past expires(after=1) is killed and reported with its scope",
          "[pytorch][file_timer_server]") {
  require_torch();
  Run run("hang");
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

TEST_CASE("a PyTorch worker that leaves expires() in time is not killed",
          "[pytorch][file_timer_server]") {
  require_torch();
  Run run("finish");
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
