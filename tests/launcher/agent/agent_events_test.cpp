// agent_events.hpp: what the agent records and logs as rounds, workers and the job's news come
// and go, each fact with its fields and its line.
#include "launcher/agent/agent_events.hpp"

#include <catch2/catch.hpp>

#include "tests/launcher/agent/captures.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::RecordedEvents;
using namespace std::chrono_literals;

namespace {

WorkerSlot slot_of(int rank, int local_rank) {
  WorkerSlot slot;
  slot.rank = rank;
  slot.local_rank = local_rank;
  return slot;
}

}  // namespace

TEST_CASE("a round, a worker's start and exit: their events carry the attempt") {
  RecordedEvents events;
  ddp::rendezvous::RendezvousInfo info;
  info.round = 2;
  info.group_world_size = 3;
  info.master_addr = "10.0.0.1";
  report_round(events.log, info, 2, 1);
  const auto round = events.named("rendezvous").at(0);
  CHECK(round["round"] == 2);
  CHECK(round["restart_count"] == 2);
  CHECK(round["restarts_spent"] == 1);
  CHECK(round["master_addr"] == "10.0.0.1");
  report_worker_start(events.log, slot_of(5, 1), 4242, 2);
  CHECK(events.named("worker_start").at(0)["pid"] == 4242);
  report_worker_exit(events.log, slot_of(5, 1), 4242, ExitStatus{0, 9}, 2);
  const auto exit = events.named("worker_exit").at(0);
  CHECK(exit["rank"] == 5);
  CHECK(exit["signal"] == 9);
  CHECK(exit["restart_count"] == 2);
}

TEST_CASE("an unkillable worker, escaped processes, a spawn failure: a line and an event each") {
  RecordedEvents events;
  LoggedLines lines;
  UnkillableWorker worker;
  worker.pid = 77;
  report_unkillable(events.log, slot_of(3, 0), worker);
  CHECK(lines.logged("rank 3 (pid 77) is unkillable"));
  CHECK(events.named("unkillable").at(0)["state"] == "");
  report_escaped(events.log, {}, 1);
  CHECK(events.named("escaped_killed").empty());
  report_escaped(events.log, {"12 (sleep)", "13 (sleep)"}, 1);
  CHECK(lines.logged("killed 2 process(es)"));
  CHECK(lines.logged("12 (sleep), 13 (sleep)"));
  report_spawn_failed(events.log, slot_of(0, 0), "no such program");
  CHECK(events.named("spawn_failed").at(0)["message"] == "no such program");
}

TEST_CASE("what a signal says in each state") {
  CHECK(signal_notice(AgentState::kHealthy, false, "SIGTERM", "1 2") ==
        "received SIGTERM; forwarding it to the workers (pids 1 2)");
  CHECK(signal_notice(AgentState::kRendezvous, false, "SIGINT", "") ==
        "received SIGINT during rendezvous; shutting down");
  CHECK(signal_notice(AgentState::kStopping, true, "SIGTERM", "1") ==
        "received SIGTERM again; killing the workers now (pids 1)");
  CHECK(signal_notice(AgentState::kExiting, false, "SIGTERM", "") ==
        "received SIGTERM while leaving the rendezvous; exiting now");
  CHECK(signal_notice(AgentState::kDone, false, "SIGTERM", "").empty());
}

TEST_CASE("the job's news: re-forms, restarts in place, failures elsewhere") {
  RecordedEvents events;
  LoggedLines lines;
  ddp::rendezvous::FailureRecord record;
  record.kind = "worker";
  record.rank = 4;
  record.group_rank = 1;
  record.exit_code = 3;
  report_in_place_restart(events.log, record, 1, 2);
  const auto restart = events.named("restart").at(0);
  CHECK(restart["failed_rank"] == 4);
  CHECK(restart["in_place"] == true);
  CHECK(lines.logged("re-forming in place, restart 1 of 2"));
  report_recovery_started(events.log, "node_lost", 3, "8 9");
  CHECK(events.named("recovery_started").at(0)["pids"] == "8 9");
  report_stepped_down(events.log, "lost the majority");
  CHECK(events.named("store_silent").at(0)["message"] == "lost the majority");
  report_failed_elsewhere(record, "8 9");
  CHECK(lines.logged("stopping this node's workers (pids 8 9)"));
  report_failed_after_finish(record, 3);
  CHECK(lines.logged("this node exits 3 once the other nodes are out"));
  report_own_connection_lost(15s);
  CHECK(lines.logged("the store lost this node's own connection"));
}
