// What the agent says when an attempt ends (attempt_report.hpp), pure: a worker failure's
// record for the job, the store-loss phrases, the restart line and its event, and the lines,
// summary and exit status of a node that gives up.
#include "launcher/agent/attempt_report.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <string>
#include <vector>

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using ddp::rendezvous::FailureRecord;
using namespace std::chrono_literals;

namespace {

// A failure seen seconds_after a fixed instant (the earliest is the root cause).
WorkerFailure failure(int rank, ExitStatus status, int seconds_after = 0) {
  WorkerFailure f;
  f.rank = rank;
  f.local_rank = rank % 2;
  f.pid = 100 + rank;
  f.status = status;
  f.observed = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000)) +
               std::chrono::seconds(seconds_after);
  return f;
}

// Another node's worker failure, as the job's record holds it.
FailureRecord record_elsewhere(int exit_code, int signal = 0) {
  FailureRecord r;
  r.kind = "worker";
  r.attempt = 2;
  r.group_rank = 1;
  r.host = "10.0.0.2";
  r.rank = 4;
  r.local_rank = 0;
  r.pid = 77;
  r.exit_code = exit_code;
  r.signal = signal;
  r.time = 1700000000;
  r.message = "CUDA error: an illegal memory access";
  r.traceback = "Traceback (most recent call last):\n  File \"train.py\"";
  return r;
}

}  // namespace

TEST_CASE("attempt report: a worker failure's record carries its exit and error file",
          "[attempt_report]") {
  auto f = failure(3, ExitStatus{7, 0});
  f.error = ErrorFileContent{"ValueError: bad batch", "Traceback: here", std::nullopt};
  const auto record = record_of(f);
  CHECK(record.kind == "worker");
  CHECK(record.rank == 3);
  CHECK(record.local_rank == 1);
  CHECK(record.pid == 103);
  CHECK(record.exit_code == 7);
  CHECK(record.signal == 0);
  CHECK(record.message == "ValueError: bad batch");
  CHECK(record.traceback == "Traceback: here");
  // What the link fills in is left for it.
  CHECK(record.group_rank == -1);
  CHECK(record.host.empty());

  const auto killed = record_of(failure(0, ExitStatus{0, SIGKILL}));
  CHECK(killed.signal == SIGKILL);
  CHECK(killed.message.empty());
}

TEST_CASE("attempt report: a hang's record says hang, with what detection said when no file did",
          "[attempt_report]") {
  auto f = failure(1, ExitStatus{0, SIGABRT});
  f.hang = "rank 1: no progress for 60 s in step 12";
  auto record = record_of(f);
  CHECK(record.kind == "hang");
  CHECK(record.message == "hang: rank 1: no progress for 60 s in step 12");
  // The error file (the agent's own for a culprit, or the worker's) speaks first.
  f.error = ErrorFileContent{"hang: as written", "stack", std::nullopt};
  record = record_of(f);
  CHECK(record.kind == "hang");
  CHECK(record.message == "hang: as written");
  CHECK(record.traceback == "stack");
}

TEST_CASE("attempt report: a local failure in one phrase", "[attempt_report]") {
  CHECK(describe_local(failure(1, ExitStatus{7, 0})) == "rank 1: exit code 7");
  auto hung = failure(2, ExitStatus{0, SIGABRT});
  hung.hang = "no progress";
  CHECK(describe_local(hung) == "rank 2: hung, signal 6 (SIGABRT)");
}

TEST_CASE("attempt report: the store's loss says silence, death or just a failure",
          "[attempt_report]") {
  CHECK(store_loss_text(ddp::PeerLoss::kSilence, 15s) ==
        "the rendezvous store, silent for longer than the peer tolerance (15 s)");
  CHECK(store_loss_text(ddp::PeerLoss::kSilence, 2500ms) ==
        "the rendezvous store, silent for longer than the peer tolerance (2.5 s)");
  CHECK(store_loss_text(ddp::PeerLoss::kDeath, 15s) ==
        "the rendezvous store, its host closed, reset or refused the connection");
  CHECK(store_loss_text(ddp::PeerLoss::kUnknown, 15s) ==
        "the rendezvous store, its connection failed");
  CHECK_THAT(store_loss_advice(true, false), Contains("a static job cannot replace a node"));
  CHECK_THAT(store_loss_advice(false, false),
             Contains("a static job cannot replace a node") && Contains("--nnodes MIN:MAX"));
  CHECK_THAT(store_loss_advice(false, true),
             Contains("store_succession=false") && Contains("run a standalone store (ddpstore)"));
}

TEST_CASE("attempt report: cannot restart says how many restarts were left, none spent",
          "[attempt_report]") {
  CHECK(cannot_restart_line("the job failed (x)", 1, "node 2 is gone") ==
        "the job failed (x) and cannot restart (1 restart left, none spent): node 2 is gone");
  CHECK(cannot_restart_line("worker group failed", 3, "no store") ==
        "worker group failed and cannot restart (3 restarts left, none spent): no store");
}

TEST_CASE("attempt report: a restart follows the job's record when one holds, the same everywhere",
          "[attempt_report]") {
  // This node's own failure is left out: every node must say the same.
  const auto notice = restart_notice(record_elsewhere(5), {failure(0, ExitStatus{0, SIGTERM})},
                                     /*restarts_spent=*/1, /*max_restarts=*/3);
  CHECK(notice.line == "the job failed (" + record_elsewhere(5).describe() +
                           "); restarting every node, attempt 1 of 3");
  CHECK(notice.event["restarts_spent"] == 1);
  CHECK(notice.event["failed_rank"] == 4);
  CHECK(notice.event["failed_node"] == 1);
  CHECK(notice.event["exit_code"] == 5);
  CHECK(notice.event["signal"] == 0);
  CHECK_FALSE(notice.event.contains("reason"));
}

TEST_CASE("attempt report: without a record a restart names this node's root cause",
          "[attempt_report]") {
  // The earliest failure is the root cause, whatever the order it was noted in.
  const std::vector<WorkerFailure> failures = {failure(1, ExitStatus{0, SIGTERM}, 2),
                                               failure(0, ExitStatus{3, 0}, 1)};
  const auto notice = restart_notice(std::nullopt, failures, 2, 2);
  CHECK(notice.line == "worker group failed (rank 0: exit code 3); restarting, attempt 2 of 2");
  CHECK(notice.event["restarts_spent"] == 2);
  CHECK(notice.event["failed_rank"] == 0);
  CHECK(notice.event["exit_code"] == 3);
  CHECK(notice.event["signal"] == 0);
  CHECK_FALSE(notice.event.contains("failed_node"));
}

TEST_CASE("attempt report: hung ranks that ended on their own restart as a hang",
          "[attempt_report]") {
  const auto notice = restart_notice(std::nullopt, {}, 1, 5);
  CHECK(notice.line == "worker group stopped after a hang; restarting, attempt 1 of 5");
  CHECK(notice.event["reason"] == "hang");
  CHECK(notice.event["restarts_spent"] == 1);
}

TEST_CASE("attempt report: giving up on the job's record exits with its status, summary of both",
          "[attempt_report]") {
  GiveUpFacts facts;
  facts.root = record_elsewhere(0, SIGKILL);
  facts.failures = {failure(0, ExitStatus{0, SIGTERM})};
  facts.program = "train.py";
  facts.host = "node-a";
  SECTION("restarts spent: the summary says it all") {
    const auto report = give_up_report(facts);
    CHECK(report.errors.empty());
    CHECK(report.exit_status == 128 + SIGKILL);
    CHECK_THAT(report.summary, Contains("train.py FAILED") &&
                                   Contains("Failures on this node (node-a)") &&
                                   Contains("node      : 1 (10.0.0.2)") &&
                                   Contains("CUDA error: an illegal memory access"));
  }
  SECTION("restarts left that the job could not take") {
    facts.restart_impossible = true;
    facts.restarts_left = 2;
    facts.blocker = "node 2 left the job";
    const auto report = give_up_report(facts);
    REQUIRE(report.errors.size() == 1);
    CHECK(report.errors[0] == "the job failed (" + facts.root->describe() +
                                  ") and cannot restart (2 restarts left, none spent): node 2 "
                                  "left the job");
  }
}

TEST_CASE("attempt report: a lost static node is said first, and exits 1", "[attempt_report]") {
  GiveUpFacts facts;
  FailureRecord lost;
  lost.kind = "node_lost";
  lost.group_rank = 2;
  lost.host = "10.0.0.3";
  lost.message = "its store connection closed";
  facts.root = lost;
  facts.restart_impossible = true;
  facts.restarts_left = 1;
  facts.blocker = "a static job";
  const auto report = give_up_report(facts);
  REQUIRE(report.errors.size() == 2);
  CHECK_THAT(report.errors[0],
             StartsWith("the job cannot go on: node 2 is gone and a static job cannot replace it"));
  CHECK_THAT(report.errors[1], Contains("cannot restart (1 restart left, none spent)"));
  CHECK(report.exit_status == 1);
  CHECK_THAT(report.summary, Contains("<NONE: its workers were stopped"));
}

TEST_CASE("attempt report: giving up on this node's failures exits with the root cause's status",
          "[attempt_report]") {
  GiveUpFacts facts;
  facts.failures = {failure(1, ExitStatus{0, SIGTERM}, 5), failure(3, ExitStatus{2, 0}, 1)};
  facts.program = "train.py";
  facts.host = "node-a";
  facts.restart_impossible = true;
  facts.restarts_left = 1;
  facts.blocker = "the store is gone";
  const auto report = give_up_report(facts);
  CHECK(report.exit_status == 2);
  REQUIRE(report.errors.size() == 1);
  CHECK(report.errors[0] ==
        "worker group failed (rank 3: exit code 2) and cannot restart (1 restart left, none "
        "spent): the store is gone");
  CHECK_THAT(report.summary, Contains("train.py FAILED") && !Contains("Root Cause (the first"));
}

TEST_CASE("attempt report: a hang with no failure left gives up with status 1, no summary",
          "[attempt_report]") {
  GiveUpFacts facts;
  auto report = give_up_report(facts);
  CHECK(report.errors.empty());
  CHECK(report.summary.empty());
  CHECK(report.exit_status == 1);
  facts.restart_impossible = true;
  facts.restarts_left = 1;
  facts.blocker = "b";
  report = give_up_report(facts);
  CHECK(report.errors == std::vector<std::string>{
                             "the worker group stopped after a hang and cannot restart (1 restart "
                             "left, none spent): b"});
}

TEST_CASE("attempt report: the summary's root cause is the record's", "[attempt_report]") {
  const auto record = record_elsewhere(0, SIGSEGV);
  const auto root = root_cause_of(record);
  CHECK(root.attempt == 2);
  CHECK(root.node == 1);
  CHECK(root.host == "10.0.0.2");
  CHECK(root.what == record.describe());
  CHECK(root.rank == 4);
  CHECK(root.local_rank == 0);
  CHECK(root.pid == 77);
  CHECK(root.exit_status == 128 + SIGSEGV);
  CHECK(root.time == 1700000000);
  CHECK(root.message == record.message);
  CHECK(root.traceback == record.traceback);
}

TEST_CASE("attempt report: the records of a spawn failure, an unkillable worker, a signal",
          "[attempt_report]") {
  WorkerSlot slot;
  slot.rank = 6;
  slot.local_rank = 2;
  slot.hang = "unkillable: still there after SIGKILL";
  const FailureRecord spawn = spawn_failure_record(slot, "no such file");
  CHECK(spawn.kind == "worker");
  CHECK(spawn.exit_code == 127);
  CHECK(spawn.final);
  CHECK(spawn.rank == 6);
  CHECK(spawn.message == "no such file");
  const FailureRecord unkillable = unkillable_record(slot, 99);
  CHECK(unkillable.kind == "unkillable");
  CHECK(unkillable.signal == SIGKILL);
  CHECK(unkillable.pid == 99);
  CHECK(unkillable.message == slot.hang);
  const FailureRecord signal = signal_record(SIGTERM, 5, "SIGTERM");
  CHECK(signal.kind == "agent_signal");
  CHECK(signal.signal == SIGTERM);
  CHECK(signal.message == "SIGTERM");
}

TEST_CASE("attempt report: the failure event's kind of another node's record", "[attempt_report]") {
  FailureRecord record;
  record.kind = "worker";
  CHECK(failure_kind(record) == "exit");
  record.signal = SIGSEGV;
  CHECK(failure_kind(record) == "signal");
  record.kind = "node_lost";
  CHECK(failure_kind(record) == "node_lost");
}
