// Error files (PyTorch's format) and the torchrun-style failure summary.
#include "launcher/output/error_report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

using namespace ddp::launcher;
using Catch::Matchers::Contains;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  auto path =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

WorkerFailure failure(int rank, int exit_code, int signal, int seconds_after) {
  WorkerFailure f;
  f.rank = rank;
  f.local_rank = rank;
  f.pid = 100 + rank;
  f.status = ExitStatus{exit_code, signal};
  f.observed =
      std::chrono::system_clock::time_point(std::chrono::seconds(1700000000 + seconds_after));
  f.error_file = "/logs/" + std::to_string(rank) + "/error.json";
  return f;
}

}  // namespace

TEST_CASE("PyTorch's error file format is read, message and traceback", "[report]") {
  auto path = write_temp("err_obj", R"({"message": {"message": "RuntimeError: boom",
      "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  x", "timestamp": "1700000123"}}})");
  auto content = read_error_file(path);
  REQUIRE(content.has_value());
  CHECK(content->message == "RuntimeError: boom");
  CHECK_THAT(content->traceback, Contains("most recent call last"));
  REQUIRE(content->timestamp.has_value());
  CHECK(*content->timestamp == Approx(1700000123.0));
  std::filesystem::remove(path);

  auto plain = write_temp("err_str", R"({"message": "plain text error"})");
  CHECK(read_error_file(plain)->message == "plain text error");
  std::filesystem::remove(plain);

  auto bad = write_temp("err_bad", "not json {");
  CHECK_FALSE(read_error_file(bad).has_value());
  std::filesystem::remove(bad);
  CHECK_FALSE(read_error_file("/no/such/error.json").has_value());
}

TEST_CASE(
    "a whole-second timestamp (PyTorch's) takes the file's modification time within that "
    "second, else is shown without milliseconds",
    "[report]") {
  const std::string stamp = "1700000123";
  auto path = write_temp("err_whole", R"({"message": {"message": "x", "extraInfo": )"
                                      R"({"py_callstack": "", "timestamp": ")" +
                                          stamp + R"("}}})");
  auto set_mtime = [&](long seconds, long nanoseconds) {
    const timespec times[2] = {{seconds, nanoseconds}, {seconds, nanoseconds}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  };
  // Written 0.25 s into the recorded second: that is the time, to the nanosecond.
  set_mtime(1700000123, 250000000);
  auto content = read_error_file(path);
  REQUIRE(content.has_value());
  CHECK(*content->timestamp == Approx(1700000123.25).epsilon(1e-12));
  CHECK_FALSE(content->whole_seconds);
  std::vector<WorkerFailure> failures = {failure(0, 1, 0, 200)};
  failures[0].error = content;
  CHECK_THAT(format_failure_summary("x.py", "h", failures), Contains(":23.250\n"));

  // Modified a minute later (copied, touched): the second is all that is known.
  set_mtime(1700000183, 0);
  content = read_error_file(path);
  REQUIRE(content.has_value());
  CHECK(*content->timestamp == Approx(1700000123.0));
  CHECK(content->whole_seconds);
  failures[0].error = content;
  const auto text = format_failure_summary("x.py", "h", failures);
  CHECK_THAT(text, Contains(":23\n") && !Contains(":23.000"));
  CHECK_THAT(text, Contains("its error file was recorded at ") && !Contains(".000"));
  std::filesystem::remove(path);
}

TEST_CASE("timestamps no clock can hold are ignored, not converted", "[report]") {
  // Found by tests/fuzz/error_file_fuzz: 1e300 or "nan" made the summary's time conversion
  // undefined behaviour.
  for (const char* stamp : {"1e300", "\"nan\"", "\"inf\"", "-5", "\"1e12\""}) {
    auto path = write_temp("err_stamp", std::string(R"({"message": {"message": "x", )") +
                                            R"("extraInfo": {"timestamp": )" + stamp + "}}}");
    auto content = read_error_file(path);
    std::filesystem::remove(path);
    REQUIRE(content.has_value());
    CHECK_FALSE(content->timestamp.has_value());
    std::vector<WorkerFailure> failures = {failure(0, 1, 0, 0)};
    failures[0].error = content;
    CHECK_THAT(format_failure_summary("ddplaunch", "h", failures), Contains("Root Cause"));
  }
}

TEST_CASE("root cause: earliest error-file timestamp, else first exit observed", "[report]") {
  std::vector<WorkerFailure> failures = {failure(0, 1, 0, 0), failure(1, 2, 0, 5)};
  CHECK(root_cause_index(failures) == 0);
  failures[1].error = ErrorFileContent{"late observed, early error", "", 1600000000.0};
  CHECK(root_cause_index(failures) == 1);
}

TEST_CASE("the summary names rank, exit code or signal, pid, host and message", "[report]") {
  std::vector<WorkerFailure> failures = {failure(3, 0, 9, 0), failure(1, 4, 0, 1)};
  failures[1].error = ErrorFileContent{"ValueError: bad input", "File train.py, line 7", 1.0};
  auto text = format_failure_summary("train.py", "node7", failures);
  CHECK_THAT(text, Contains("train.py FAILED"));
  CHECK_THAT(text, Contains("Root Cause (first observed failure):\n[0]:"));
  CHECK_THAT(text, Contains("rank      : 1 (local_rank: 1)"));
  CHECK_THAT(text, Contains("exitcode  : 4 (pid: 101)"));
  CHECK_THAT(text, Contains("message   : ValueError: bad input"));
  CHECK_THAT(text, Contains("    File train.py, line 7"));
  CHECK_THAT(text, Contains("host      : node7"));
  CHECK_THAT(text, Contains("exitcode  : 137 (SIGKILL, pid: 103)"));
  CHECK_THAT(text, Contains("Signal 9 (SIGKILL) received by PID 103"));
}

TEST_CASE(
    "a hang: the culprit is the root cause whatever order the ranks died in, and the "
    "agent's error file reads back",
    "[report][hang]") {
  WorkerFailure victim;
  victim.rank = 0;
  victim.status = ExitStatus{0, 15};
  victim.observed = std::chrono::system_clock::now() - std::chrono::seconds(1);
  victim.hang = "rank 1: no progress for 60 s in step 3; rank 0 waits in all_reduce #9";
  WorkerFailure culprit = victim;
  culprit.rank = 1;
  culprit.status = ExitStatus{0, 6};
  culprit.observed = std::chrono::system_clock::now();
  culprit.culprit = true;
  culprit.output_tail = {"Fatal Python error: Aborted", "  File \"x.py\", line 3 in stuck"};
  const std::vector<WorkerFailure> failures{victim, culprit};
  CHECK(root_cause_index(failures) == 1);
  const auto summary = format_failure_summary("train.py", "node-a", failures);
  CHECK_THAT(summary, Catch::Contains("the rank named as the culprit of a hang") &&
                          Catch::Contains("hang      : rank 1: no progress") &&
                          Catch::Contains("    Fatal Python error: Aborted"));

  const auto path = write_temp("agent_error", "");
  REQUIRE(write_error_file(path, "hang: rank 1 stuck", "frame 1\nframe 2\n"));
  const auto content = read_error_file(path);
  REQUIRE(content);
  CHECK(content->message == "hang: rank 1 stuck");
  CHECK(content->traceback == "frame 1\nframe 2\n");
  CHECK(content->timestamp.has_value());
  std::filesystem::remove(path);
}
