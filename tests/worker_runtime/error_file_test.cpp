// Error files in PyTorch's format, written by run_main on exceptions and fatal signals.
#include "worker_runtime/error_file.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

using namespace ddp::worker_runtime;
using namespace ddp::worker_runtime::test;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = std::string(DDP_BINARY_DIR) + "/tests/rt_test_worker";

}  // namespace

TEST_CASE("error_file_json has PyTorch's layout", "[error_file]") {
  const auto doc =
      nlohmann::json::parse(error_file_json("RuntimeError: x \"q\"\n", "stack", 1700000000));
  CHECK(doc["message"]["message"] == "RuntimeError: x \"q\"\n");
  CHECK(doc["message"]["extraInfo"]["py_callstack"] == "stack");
  CHECK(doc["message"]["extraInfo"]["timestamp"] == "1700000000");  // a string, as PyTorch's
}

TEST_CASE("torch's ErrorHandler parses our error file", "[error_file][pytorch]") {
  if (!have_torch()) {
    // Real PyTorch is part of the suite (scripts/setup.sh installs it): never a silent skip.
    FAIL("/usr/bin/python3 cannot import torch: run scripts/setup.sh (python3-torch)");
  }
  TempDir dir;
  const auto path = (dir.path() / "error.json").string();
  REQUIRE(record_error("ValueError: bad batch", "native stack", path));
  // ProcessFailure is what torchrun's summary is built from; it reads message and timestamp
  // (in 1.13 `message` is the dict our file holds, as for Python workers).
  int status = 0;
  const std::string out = run_command(
      "/usr/bin/python3 -c \"from torch.distributed.elastic.multiprocessing.errors import "
      "ProcessFailure; p = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file='" +
          path + "'); print(p.message['message'] + '|' + str(p.timestamp))\" 2>&1",
      &status);
  CHECK(status == 0);
  INFO(out);
  REQUIRE_THAT(out, Contains("ValueError: bad batch|"));
  CHECK(std::stoll(out.substr(out.find('|') + 1)) > 1600000000);
}

TEST_CASE("run_main records an uncaught exception and returns 1", "[error_file]") {
  TempDir dir;
  const auto err = (dir.path() / "error.json").string();
  Child child({kWorker, "throw"}, {{"RANK", "3"}, {"TORCHELASTIC_ERROR_FILE", err}},
              (dir.path() / "log").string());
  CHECK(exit_code(child.wait(30s)) == 1);
  const auto doc = nlohmann::json::parse(read_file(err));
  CHECK(doc["message"]["message"] == "std::runtime_error: boom from rank 3");
  CHECK_THAT(doc["message"]["extraInfo"]["py_callstack"].get<std::string>(),
             Contains("rt_test_worker"));
  CHECK_THAT(read_file(dir.path() / "log"),
             Contains("error: std::runtime_error: boom from rank 3"));
}

TEST_CASE("a fatal signal is recorded and still kills the worker", "[error_file]") {
  TempDir dir;
  const auto err = (dir.path() / "error.json").string();
  Child child({kWorker, "segv"}, {{"TORCHELASTIC_ERROR_FILE", err}}, (dir.path() / "log").string());
  CHECK(exit_code(child.wait(30s)) == 128 + SIGSEGV);
  const auto doc = nlohmann::json::parse(read_file(err));
  CHECK_THAT(doc["message"]["message"].get<std::string>(), Contains("Fatal signal SIGSEGV (11)"));
  CHECK(std::stoll(doc["message"]["extraInfo"]["timestamp"].get<std::string>()) > 1600000000);
}

TEST_CASE("no error file variable: nothing is written", "[error_file]") {
  ::unsetenv("TORCHELASTIC_ERROR_FILE");
  CHECK_FALSE(record_error("x", "y", ""));
}

TEST_CASE("ddplaunch's failure summary shows the worker's message", "[error_file][launcher]") {
  const std::filesystem::path launcher = std::string(DDP_BINARY_DIR) + "/ddplaunch";
  if (!std::filesystem::exists(launcher)) {
    FAIL(launcher << " is not built (build the ddplaunch target)");
  }
  int status = 0;
  const std::string out = run_command("timeout 120 " + launcher.string() +
                                          " --standalone --nproc_per_node=2 --max_restarts=0 " +
                                          kWorker + " throw 2>&1",
                                      &status);
  INFO(out);
  CHECK(status != 0);
  // The root-cause block quotes the message our error file carries.
  CHECK_THAT(out, Contains("message   : std::runtime_error: boom from rank"));
  CHECK_THAT(out, Contains("error_file:"));
}

TEST_CASE("native workers join a ddplaunch job through init()", "[launcher][gloo]") {
  const std::filesystem::path launcher = std::string(DDP_BINARY_DIR) + "/ddplaunch";
  if (!std::filesystem::exists(launcher)) {
    FAIL(launcher << " is not built (build the ddplaunch target)");
  }
  int status = 0;
  const std::string out = run_command("timeout 120 " + launcher.string() +
                                          " --standalone --nproc_per_node=3 --max_restarts=0 " +
                                          kWorker + " collectives 2>&1",
                                      &status);
  INFO(out);
  CHECK(status == 0);
  for (const char* rank : {"[default0]", "[default1]", "[default2]"}) {
    CHECK_THAT(out, Contains(std::string(rank) + ":RESULT gathered 0 1 4"));
  }
}
