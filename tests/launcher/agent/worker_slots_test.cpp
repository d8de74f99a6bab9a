// A worker's exit made a failure, on its own (worker_slots.hpp): what the slot and the error
// file say, the stderr tail of a signal, the error file the agent writes for a hung culprit,
// and which exits during a stop count as failures of their own.
#include "launcher/agent/worker_slots.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using ddp::test::TempDir;

namespace {

WorkerSlot slot_in(const TempDir& dir, int local_rank, int rank) {
  WorkerSlot slot;
  slot.local_rank = local_rank;
  slot.rank = rank;
  slot.error_file = dir.file("error_" + std::to_string(local_rank) + ".json");
  return slot;
}

const std::vector<std::string> kTail = {
    "Fatal Python error: Aborted",
    "Thread 0x7f (most recent call first):", "  File \"train.py\", line 12 in step"};

}  // namespace

TEST_CASE("worker slots: a failure names the slot's ranks, the exit and its error file",
          "[worker_slots]") {
  TempDir dir;
  const WorkerSlot slot = slot_in(dir, 1, 5);
  REQUIRE(write_error_file(slot.error_file, "RuntimeError: boom", "Traceback: x"));
  const auto before = std::chrono::system_clock::now();
  const auto failure = assemble_failure(slot, 4242, ExitStatus{3, 0}, kTail);
  CHECK(failure.rank == 5);
  CHECK(failure.local_rank == 1);
  CHECK(failure.pid == 4242);
  CHECK(failure.status.exit_code == 3);
  CHECK(failure.status.signal == 0);
  CHECK(failure.observed >= before);
  CHECK(failure.error_file == slot.error_file);
  REQUIRE(failure.error);
  CHECK(failure.error->message == "RuntimeError: boom");
  CHECK(failure.error->traceback == "Traceback: x");
  CHECK(failure.hang.empty());
  CHECK_FALSE(failure.culprit);
  // An exit code says why on its own: the stderr tail is kept for deaths by signal only.
  CHECK(failure.output_tail.empty());
}

TEST_CASE("worker slots: a worker killed by a signal keeps its last stderr lines",
          "[worker_slots]") {
  TempDir dir;
  const auto failure = assemble_failure(slot_in(dir, 0, 0), 7, ExitStatus{0, SIGSEGV}, kTail);
  CHECK(failure.status.signal == SIGSEGV);
  CHECK_FALSE(failure.error);  // it left no error file
  CHECK(failure.output_tail == kTail);
  CHECK_FALSE(std::filesystem::exists(failure.error_file));  // nor was one written for it
}

TEST_CASE("worker slots: a hung culprit that left no error file gets the agent's, with its stack",
          "[worker_slots]") {
  TempDir dir;
  WorkerSlot slot = slot_in(dir, 2, 6);
  slot.hang = "rank 6: no progress for 60 s in all_reduce #3";
  slot.culprit = true;
  const auto failure = assemble_failure(slot, 99, ExitStatus{0, SIGABRT}, kTail);
  CHECK(failure.hang == slot.hang);
  CHECK(failure.culprit);
  REQUIRE(failure.error);
  CHECK(failure.error->message == "hang: rank 6: no progress for 60 s in all_reduce #3");
  for (const auto& line : kTail) CHECK_THAT(failure.error->traceback, Contains(line));
  // The stack is the error file's traceback now, not said twice.
  CHECK(failure.output_tail.empty());
  REQUIRE(std::filesystem::exists(slot.error_file));
  CHECK(read_error_file(slot.error_file)->message == failure.error->message);
}

TEST_CASE("worker slots: a hung culprit's own error file is kept as it wrote it",
          "[worker_slots]") {
  TempDir dir;
  WorkerSlot slot = slot_in(dir, 0, 0);
  slot.hang = "rank 0: no progress for 60 s";
  slot.culprit = true;
  REQUIRE(write_error_file(slot.error_file, "TimeoutError: the watchdog fired", "tb"));
  const auto failure = assemble_failure(slot, 99, ExitStatus{0, SIGABRT}, kTail);
  REQUIRE(failure.error);
  CHECK(failure.error->message == "TimeoutError: the watchdog fired");
  CHECK(failure.output_tail == kTail);
}

TEST_CASE("worker slots: a victim of a hang carries what was said of it, no error file",
          "[worker_slots]") {
  TempDir dir;
  WorkerSlot slot = slot_in(dir, 1, 1);
  slot.hang = "waiting on a hung rank: rank 0: no progress for 60 s";
  const auto failure = assemble_failure(slot, 99, ExitStatus{0, SIGTERM}, kTail);
  CHECK(failure.hang == slot.hang);
  CHECK_FALSE(failure.culprit);
  CHECK_FALSE(failure.error);
  CHECK_FALSE(std::filesystem::exists(slot.error_file));
  CHECK(failure.output_tail == kTail);
}

TEST_CASE("worker slots: a culprit's error file that cannot be written leaves its stderr tail",
          "[worker_slots]") {
  TempDir dir;
  WorkerSlot slot = slot_in(dir, 0, 0);
  slot.error_file = dir.file("no_such_dir/error.json");
  slot.hang = "rank 0: stopped (T) for 60 s";
  slot.culprit = true;
  const auto failure = assemble_failure(slot, 99, ExitStatus{0, SIGKILL}, kTail);
  CHECK_FALSE(failure.error);
  CHECK(failure.output_tail == kTail);
}

TEST_CASE("worker slots: during a stop only exits that say something else are failures",
          "[worker_slots]") {
  struct Row {
    const char* what;
    ExitStatus status;
    bool error_file;
    const char* hang;
    bool failed;
  };
  const std::vector<Row> table = {
      {"died of the stop signal", {0, SIGTERM}, false, "", false},
      {"SIGKILL after the grace", {0, SIGKILL}, false, "", false},
      {"a shell that exited 128+SIGTERM", {128 + SIGTERM, 0}, false, "", false},
      {"exit code 1", {1, 0}, false, "", true},
      {"another signal", {0, SIGSEGV}, false, "", true},
      {"128 + another signal", {128 + SIGKILL, 0}, false, "", true},
      {"the stop signal, but an error file", {0, SIGTERM}, true, "", true},
      {"the stop signal, but hung", {0, SIGTERM}, false, "rank 0: no progress", true},
  };
  for (const auto& row : table) {
    INFO(row.what);
    WorkerFailure failure;
    failure.status = row.status;
    if (row.error_file) failure.error = ErrorFileContent{"boom", "", std::nullopt};
    failure.hang = row.hang;
    CHECK(failed_on_its_own(failure, SIGTERM) == row.failed);
  }
}

TEST_CASE("worker slots: a new worker starts with nothing said of it and no error file",
          "[worker_slots]") {
  TempDir dir;
  WorkerSlot slot;
  slot.local_rank = 1;
  slot.hang = "stuck";
  slot.culprit = true;
  slot.dumping = true;
  const auto rank_dir = dir.path() / "attempt_2" / "1";
  std::filesystem::create_directories(rank_dir);
  { std::ofstream(rank_dir / "error.json") << "{}"; }
  slot.begin(5, rank_dir);
  CHECK(slot.rank == 5);
  CHECK(slot.hang.empty());
  CHECK_FALSE(slot.culprit);
  CHECK_FALSE(slot.dumping);
  CHECK(slot.error_file == (rank_dir / "error.json").string());
  CHECK_FALSE(std::filesystem::exists(slot.error_file));
  slot.begin(6, dir.path() / "attempt_3" / "1");  // a directory that does not exist yet
  CHECK(std::filesystem::is_directory(dir.path() / "attempt_3" / "1"));
}
