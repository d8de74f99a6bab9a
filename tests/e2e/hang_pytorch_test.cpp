// torchrun's file timer under ddplaunch (docs/hangs.md): a real PyTorch script that uses
// torch.distributed.elastic.timer.FileTimerClient, as it would under torchrun, for every
// version of tests/support/python.hpp (Debian's 1.13, the 2.x venvs).
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>

#include "agent_process.hpp"
#include "tests/support/torch_test_case.hpp"

using namespace std::chrono_literals;
using Catch::Matchers::Contains;

// Expected: exit 0; rank 1, stuck past expires(after=2) in attempt 0, is killed and named with
// its scope; the restart finishes.
TORCH_TEST_CASE(
    "hang pytorch: an expired file-timer scope is reaped, named, and the restart finishes",
    "[hang][pytorch]") {
  const std::string dir = ddp::test::make_temp_dir();
  const std::string source = DDP_SOURCE_DIR;
  {
    ddp::test::AgentProcess a({"--standalone", "--nproc_per_node", "2", "--max_restarts", "1",
                               source + "/tests/e2e/scripts/hang_worker.py"},
                              {{"HANG_MODE", "timer"},
                               {"TORCHELASTIC_ENABLE_FILE_TIMER", "1"},
                               {"PYTHON_EXEC", torch.python}},
                              dir + "/agent.log");
    const auto rc = a.wait(120s);
    INFO(a.log());
    REQUIRE(rc == 0);
    CHECK_THAT(a.log(), Contains("rank 1 (pid ") &&
                            Contains("file timer scope 'stuck_step' expired; asked for its "
                                     "stack (SIGABRT); SIGKILL follows"));
    // The stack it printed (faulthandler) is the failure's traceback, in the summary.
    CHECK_THAT(a.log(), Contains("stuck_in_here"));
    CHECK_THAT(a.log(), Contains("restarting, attempt 1 of 1") && Contains("WORKER RANK=1 DONE"));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
