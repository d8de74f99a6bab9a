// Error files in PyTorch's format, written by run_main on exceptions and fatal signals.
#include "worker_runtime/error_file.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/python.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::worker_runtime;
using namespace ddp::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = build_path("tests/rt_test_worker");
constexpr auto kRunTimeout = 120s;

// rt_test_worker running scenario with env, stdout and stderr in one capture.
ChildOptions worker(const std::string& scenario, std::map<std::string, std::string> env) {
  ChildOptions options;
  options.argv = {kWorker, scenario};
  options.env = std::move(env);
  options.merge_stderr = true;
  return options;
}

}  // namespace

TEST_CASE("error_file_json has PyTorch's layout", "[error_file]") {
  const auto doc =
      nlohmann::json::parse(error_file_json("RuntimeError: x \"q\"\n", "stack", 1700000000));
  CHECK(doc["message"]["message"] == "RuntimeError: x \"q\"\n");
  CHECK(doc["message"]["extraInfo"]["py_callstack"] == "stack");
  CHECK(doc["message"]["extraInfo"]["timestamp"] == "1700000000");  // a string, as PyTorch's
}

TEST_CASE("torch's ErrorHandler parses our error file", "[error_file][pytorch]") {
  if (!python_can_import("torch")) {
    // Real PyTorch is part of the suite (scripts/setup.sh installs it): never a silent skip.
    FAIL("/usr/bin/python3 cannot import torch: run scripts/setup.sh (python3-torch)");
  }
  TempDir dir;
  const auto path = (dir.path() / "error.json").string();
  REQUIRE(record_error("ValueError: bad batch", "native stack", path));
  // ProcessFailure is what torchrun's summary is built from; it reads message and timestamp
  // (in 1.13 `message` is the dict our file holds, as for Python workers).
  const auto run =
      run_python({"-c",
                  "from torch.distributed.elastic.multiprocessing.errors import ProcessFailure; "
                  "p = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file='" +
                      path + "'); print(p.message['message'] + '|' + str(p.timestamp))"},
                 kRunTimeout);
  CHECK(run.exit_code == 0);
  const std::string& out = run.output;
  INFO(out);
  REQUIRE_THAT(out, Contains("ValueError: bad batch|"));
  CHECK(std::stoll(out.substr(out.find('|') + 1)) > 1600000000);
}

TEST_CASE("run_main records an uncaught exception and returns 1", "[error_file]") {
  TempDir dir;
  const auto err = (dir.path() / "error.json").string();
  ChildProcess child(worker("throw", {{"RANK", "3"}, {"TORCHELASTIC_ERROR_FILE", err}}));
  CHECK(child.wait(30s) == 1);
  const auto doc = nlohmann::json::parse(read_file(err));
  CHECK(doc["message"]["message"] == "std::runtime_error: boom from rank 3");
  CHECK_THAT(doc["message"]["extraInfo"]["py_callstack"].get<std::string>(),
             Contains("rt_test_worker"));
  CHECK_THAT(child.out(), Contains("error: std::runtime_error: boom from rank 3"));
}

TEST_CASE("a fatal signal is recorded and still kills the worker", "[error_file]") {
  TempDir dir;
  const auto err = (dir.path() / "error.json").string();
  ChildProcess child(worker("segv", {{"TORCHELASTIC_ERROR_FILE", err}}));
  CHECK(child.wait(30s) == 128 + SIGSEGV);
  const auto doc = nlohmann::json::parse(read_file(err));
  CHECK_THAT(doc["message"]["message"].get<std::string>(), Contains("Fatal signal SIGSEGV (11)"));
  CHECK(std::stoll(doc["message"]["extraInfo"]["timestamp"].get<std::string>()) > 1600000000);
}

TEST_CASE("no error file variable: nothing is written", "[error_file]") {
  ::unsetenv("TORCHELASTIC_ERROR_FILE");
  CHECK_FALSE(record_error("x", "y", ""));
}

TEST_CASE("ddplaunch's failure summary shows the worker's message", "[error_file][launcher]") {
  const std::filesystem::path launcher = build_path("ddplaunch");
  if (!std::filesystem::exists(launcher)) {
    FAIL(launcher << " is not built (build the ddplaunch target)");
  }
  const auto run = run_process({launcher.string(), "--standalone", "--nproc_per_node=2",
                                "--max_restarts=0", kWorker, "throw"},
                               kRunTimeout);
  const std::string& out = run.output;
  INFO(out);
  CHECK(run.exit_code != 0);
  // The root-cause block quotes the message our error file carries.
  CHECK_THAT(out, Contains("message   : std::runtime_error: boom from rank"));
  CHECK_THAT(out, Contains("error_file:"));
}

TEST_CASE("native workers join a ddplaunch job through init()", "[launcher][gloo]") {
  const std::filesystem::path launcher = build_path("ddplaunch");
  if (!std::filesystem::exists(launcher)) {
    FAIL(launcher << " is not built (build the ddplaunch target)");
  }
  // One line per rank (--log_collapse off): each rank's own result is what is checked.
  const auto run = run_process({launcher.string(), "--standalone", "--nproc_per_node=3",
                                "--max_restarts=0", "--log_collapse=off", kWorker, "collectives"},
                               kRunTimeout);
  const std::string& out = run.output;
  INFO(out);
  CHECK(run.exit_code == 0);
  for (const char* rank : {"[default0]", "[default1]", "[default2]"}) {
    CHECK_THAT(out, Contains(std::string(rank) + ":RESULT gathered 0 1 4"));
  }
}
