// In-place recovery on its own (in_place_recovery.hpp), over a real WorkerGroup of fake
// workers whose recovery channels are the real socketpairs: who is told to abort, who gets the
// new round's notice, who is replaced and when (never twice per rank and round), what the
// recovery timeout kills, and the phase record with its event. The bench plays the agent: it
// starts a fresh worker where the recovery says so.
#include "launcher/agent/in_place_recovery.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "tests/launcher/agent/captures.hpp"
#include "tests/launcher/agent/fake_workers.hpp"
#include "tests/launcher/agent/worker_channel.hpp"
#include "tests/support/io_loop.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using ddp::launcher::testing::FakeSpawner;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::make_message;
using ddp::launcher::testing::RecordedEvents;
using ddp::launcher::testing::WorkerChannel;
using ddp::recovery::Message;
using ddp::test::run_for;
using ddp::test::run_until;
using Meaning = InPlaceRecovery::ExitMeaning;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 10s;

// The recovery, its group of fake workers, and the agent's part: starting a worker where the
// recovery says so, and what each worker heard on its channel.
struct Bench : RecordedEvents, LoggedLines {
  explicit Bench(size_t count, std::chrono::milliseconds timeout = 10s, bool enabled = true)
      : recovery(io, enabled, timeout, log, group, hooks()) {
    group.reset(count);
    recovery.reset(count);
    starts.assign(count, 0);
    for (size_t index = 0; index < count; ++index) start(index);
  }

  // Rank = 10 + slot index, so that messages naming a rank are told from ones naming a slot.
  static int rank_of(size_t index) { return 10 + static_cast<int>(index); }

  InPlaceRecovery::Hooks hooks() {
    InPlaceRecovery::Hooks h;
    h.start_worker = [this](size_t index) {
      if (start_fails) return false;
      start(index);
      return true;
    };
    h.notice = [this](size_t index) {
      return make_message("round", {{"round", round}, {"rank", rank_of(index)}});
    };
    h.rank_of = [](size_t index) { return rank_of(index); };
    h.healthy = [this] { return healthy; };
    h.read_proc = [this](int pid) {
      return std::optional<ddp::launcher::ProcStatus>(
          ddp::launcher::ProcStatus{pid, stopped_pids.count(pid) != 0 ? 'T' : 'S', {}});
    };
    h.parked_ready = [this] { ++parked_ready; };
    return h;
  }

  // Starts slot index's worker as the agent does: a fresh channel, the agent's copy of the
  // worker's end closed once it runs.
  void start(size_t index) {
    WorkerProcessSpec spec;
    spec.local_rank = static_cast<int>(index);
    spec.channel_fd = recovery.open_channel(
        index, [this, index](const Message& message) { recovery.on_message(index, message); });
    WorkerCallbacks callbacks;
    callbacks.on_output = [](int, std::string_view) {};
    callbacks.on_exit = [this, index](ExitStatus status) { on_exit(index, status); };
    group.start(index, spec, std::move(callbacks));
    recovery.worker_started(index);
    ++starts.at(index);
    channels[index].reset();
    if (const auto& end = spawner.workers.back().channel) {
      channels[index] = std::make_unique<WorkerChannel>(
          io, *end, [this, index](const Message& message) { received[index].push_back(message); });
    }
  }
  void on_exit(size_t index, ExitStatus status) {
    const Meaning meaning = recovery.on_exit(index, status, healthy, round);
    exits.emplace_back(index, meaning);
    if (meaning == Meaning::kReplacedNow) start(index);
  }

  // A recovery from the agent's current round begins; then the group resumes in the next.
  void begin(const std::string& reason) { recovery.begin(reason, round); }
  InPlaceRecovery::Resumed resume() { return recovery.resume(++round); }
  // Slot index's current worker says hello on its channel; returns once the recovery heard it.
  void hello(size_t index) {
    const size_t before = named("worker_channel").size();
    channels.at(index)->send(make_message(
        "hello", {{"pid", group.pid(index)}, {"local_rank", static_cast<int64_t>(index)}}));
    REQUIRE(run_until(
        io, [&] { return named("worker_channel").size() > before; }, kGuard));
  }
  // Slot index's worker sends a message of the recovery's (handed over as its link does).
  void say(size_t index, std::string_view type, const std::map<std::string, int64_t>& fields) {
    recovery.on_message(index, make_message(type, fields));
  }
  // Slot index's worker re-formed in in_round: its group is built and holds the state of step.
  void joined(size_t index, int64_t in_round, int64_t step, int64_t source = -1,
              int64_t state_bytes = 0) {
    say(index, "joined",
        {{"round", in_round},
         {"rank", rank_of(index)},
         {"step", step},
         {"source", source},
         {"state_bytes", state_bytes}});
  }
  // Runs the loop until slot index's workers heard n messages in all.
  void await_received(size_t index, size_t n) {
    REQUIRE(run_until(
        io, [&] { return received[index].size() >= n; }, kGuard));
  }

  boost::asio::io_context io;
  FakeSpawner spawner{io};
  WorkerGroup group{io, spawner, WorkerGroupOptions{}};
  bool healthy = true;  // what the agent's state says
  int64_t round = 0;    // the agent's current round
  bool start_fails = false;
  std::set<int> stopped_pids;  // read as state T by hooks.read_proc
  int parked_ready = 0;        // hooks.parked_ready calls
  std::vector<int> starts;     // workers started per slot
  std::vector<std::pair<size_t, Meaning>> exits;
  std::map<size_t, std::unique_ptr<WorkerChannel>> channels;  // each slot's current worker's end
  std::map<size_t, std::vector<Message>> received;            // what each slot's workers heard
  InPlaceRecovery recovery;  // last: its hooks use the members above
};

}  // namespace

TEST_CASE("in-place recovery: begin tells the running workers to abort, naming the round and why",
          "[in_place_recovery]") {
  Bench b(3);
  b.hello(0);
  b.hello(1);
  b.spawner.exit(2, ExitStatus{1, 0});  // before any recovery: the agent's to handle
  REQUIRE(b.exits.size() == 1);
  CHECK(b.exits[0].second == Meaning::kNone);
  CHECK_FALSE(b.recovery.under_way());
  b.begin("node_lost");
  CHECK(b.recovery.under_way());
  b.await_received(0, 1);
  b.await_received(1, 1);
  for (size_t i : {0, 1}) {
    const Message& abort = b.received[i].at(0);
    CHECK(abort.type == "abort");
    CHECK(abort.integer("round") == 0);
    CHECK(abort.text("reason") == "node_lost");
  }
  run_for(b.io, 20ms);
  CHECK(b.received[2].empty());  // it no longer runs
  CHECK(b.starts == std::vector<int>{1, 1, 1});
}

TEST_CASE("in-place recovery: a stopped worker (SIGSTOP) is not kept: killed and replaced",
          "[in_place_recovery]") {
  // It could not take the round notice, and its peers would wait --recovery_timeout for it.
  Bench b(2);
  b.hello(0);
  b.hello(1);
  b.stopped_pids.insert(b.group.pid(1));
  b.begin("node_lost");
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  CHECK(b.spawner.workers[1].signals == std::vector<int>{SIGKILL});
  CHECK(b.spawner.workers[0].signals.empty());
  CHECK(b.logged("rank 11 (pid 1001) is stopped (SIGSTOP); restarting it for the new round"));
  REQUIRE(run_until(
      b.io, [&] { return b.starts[1] == 2; }, kGuard));
  b.await_received(0, 2);
  CHECK(b.received[0][1].type == "round");  // the other one is kept
  const auto resumed = b.named("workers_resumed");
  REQUIRE(resumed.size() == 1);
  CHECK(resumed[0]["kept"] == 1);
  CHECK(resumed[0]["restarted"] == 1);
}

TEST_CASE(
    "in-place recovery: kept workers get the new round, one that never said hello is killed "
    "and replaced",
    "[in_place_recovery]") {
  Bench b(2);
  b.hello(0);  // slot 1's worker never speaks the protocol
  b.begin("node_waiting");
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  CHECK_FALSE(b.recovery.under_way());
  CHECK(b.spawner.workers[1].signals == std::vector<int>{SIGKILL});
  CHECK(b.logged("rank 11 (pid 1001) never spoke on its recovery channel; restarting it"));
  // Replaced once it is gone, not before.
  CHECK(b.starts[1] == 1);
  REQUIRE(run_until(
      b.io, [&] { return b.starts[1] == 2; }, kGuard));
  REQUIRE(b.exits.size() == 1);
  CHECK(b.exits[0] == std::make_pair(size_t{1}, Meaning::kReplacedNow));
  CHECK(b.spawner.workers[1].released);
  CHECK(b.group.running(1));
  CHECK(b.group.pid(1) == 1002);

  b.await_received(0, 2);
  CHECK(b.received[0][0].type == "abort");
  CHECK(b.received[0][1].type == "round");
  CHECK(b.received[0][1].integer("round") == 1);
  CHECK(b.received[0][1].integer("rank") == 10);
  CHECK(b.spawner.workers[0].signals.empty());
  CHECK(b.starts[0] == 1);

  const auto resumed = b.named("workers_resumed");
  REQUIRE(resumed.size() == 1);
  CHECK(resumed[0]["round"] == 1);
  CHECK(resumed[0]["kept"] == 1);
  CHECK(resumed[0]["restarted"] == 1);

  // The replacement fails before it re-formed: one fresh worker per rank and round, so this
  // one fails the group as it would without recovery.
  b.spawner.exit(2, ExitStatus{4, 0});
  REQUIRE(b.exits.size() == 2);
  CHECK(b.exits[1] == std::make_pair(size_t{1}, Meaning::kNone));
  CHECK(b.starts[1] == 2);
}

TEST_CASE(
    "in-place recovery: a worker that dies during the re-form is replaced in the new round, "
    "one that finishes is not",
    "[in_place_recovery]") {
  Bench b(3);
  for (size_t i = 0; i < 3; ++i) b.hello(i);
  b.begin("job_failure");
  b.spawner.exit(0, ExitStatus{1, 0});  // its collective failed it
  b.spawner.exit(1, ExitStatus{0, 0});  // its training was done
  REQUIRE(b.exits.size() == 2);
  CHECK(b.exits[0].second == Meaning::kReplacedLater);
  CHECK(b.exits[1].second == Meaning::kFinished);
  CHECK(b.spawner.workers[0].released);
  CHECK(b.spawner.workers[1].released);
  const auto lost = b.named("recovery_worker_lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["rank"] == 10);
  CHECK(lost[0]["exit_code"] == 1);
  // Nothing is started while the group re-forms: the new round is not known yet.
  CHECK(b.starts == std::vector<int>{1, 1, 1});

  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  CHECK(b.starts == std::vector<int>{2, 1, 1});
  CHECK_FALSE(b.group.running(1));
  b.await_received(2, 2);
  CHECK(b.received[2][1].type == "round");
  const auto resumed = b.named("workers_resumed");
  REQUIRE(resumed.size() == 1);
  CHECK(resumed[0]["kept"] == 1);
  CHECK(resumed[0]["restarted"] == 1);

  // The finished worker is not waited for: the recovery completes with the other two.
  for (size_t i : {0, 2}) {
    b.say(i, "built", {{"round", 1}});
    b.joined(i, 1, 3, 12);
  }
  for (size_t i : {0, 2}) b.say(i, "stepped", {{"round", 1}, {"step", 4}});
  const auto done = b.named("in_place_recovery");
  REQUIRE(done.size() == 1);
  CHECK(done[0]["kept"] == 1);
  CHECK(done[0]["restarted"] == 1);
}

TEST_CASE("in-place recovery: when every worker finished during the re-form nothing is resumed",
          "[in_place_recovery]") {
  Bench b(2);
  b.hello(0);
  b.hello(1);
  b.begin("node_lost");
  b.spawner.exit(0, ExitStatus{});
  b.spawner.exit(1, ExitStatus{});
  CHECK(b.resume() == InPlaceRecovery::Resumed::kAllFinished);
  CHECK(b.starts == std::vector<int>{1, 1});
  CHECK(b.named("workers_resumed").empty());
}

TEST_CASE("in-place recovery: a replacement that cannot start ends the resume",
          "[in_place_recovery]") {
  Bench b(2);
  b.hello(0);
  b.hello(1);
  b.begin("node_lost");
  b.spawner.exit(0, ExitStatus{0, SIGSEGV});
  b.start_fails = true;
  CHECK(b.resume() == InPlaceRecovery::Resumed::kStartFailed);
  CHECK(b.named("workers_resumed").empty());
}

TEST_CASE(
    "in-place recovery: a kept worker that dies after its round notice is a failure, never "
    "replaced in the same round",
    "[in_place_recovery]") {
  // It may have published its address for the round, which its peers then dial: a fresh
  // worker in the same round could not join them (docs/chaos.md, finding 4). The agent
  // treats the exit as a failure, and the group forms a new round.
  Bench b(2);
  b.hello(0);
  b.hello(1);
  b.begin("node_lost");
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  b.spawner.exit(0, ExitStatus{3, 0});  // before it re-formed
  b.joined(1, 1, 7);
  b.spawner.exit(1, ExitStatus{4, 0});  // after
  REQUIRE(b.exits.size() == 2);
  CHECK(b.exits[0].second == Meaning::kNone);
  CHECK(b.exits[1].second == Meaning::kNone);
  CHECK(b.starts == std::vector<int>{1, 1});
}

TEST_CASE("in-place recovery: exits after the group re-formed are the agent's",
          "[in_place_recovery]") {
  Bench b(1);
  b.hello(0);
  b.begin("node_lost");
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  SECTION("a kept worker that fails once it re-formed") {
    b.joined(0, 1, 3);
    b.spawner.exit(0, ExitStatus{3, 0});
  }
  SECTION("a worker that finishes in the new round") {
    b.spawner.exit(0, ExitStatus{});
  }
  SECTION("an exit while the group stops") {
    b.healthy = false;
    b.spawner.exit(0, ExitStatus{0, SIGTERM});
  }
  REQUIRE(b.exits.size() == 1);
  CHECK(b.exits[0].second == Meaning::kNone);
  CHECK(b.starts[0] == 1);
}

TEST_CASE(
    "in-place recovery: without --in_place_recovery no channel, and every exit is the "
    "agent's",
    "[in_place_recovery]") {
  Bench b(1, 10s, /*enabled=*/false);
  CHECK_FALSE(b.recovery.enabled());
  CHECK(b.spawner.workers[0].spec.channel_fd == -1);
  CHECK_FALSE(b.spawner.workers[0].channel);
  b.spawner.exit(0, ExitStatus{3, 0});
  REQUIRE(b.exits.size() == 1);
  CHECK(b.exits[0].second == Meaning::kNone);
}

TEST_CASE("in-place recovery: the timeout kills only the workers that did not build their group",
          "[in_place_recovery]") {
  Bench b(3, 100ms);
  for (size_t i = 0; i < 3; ++i) b.hello(i);
  b.begin("node_lost");
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  b.say(0, "built", {{"round", 1}});  // waits in the state agreement for a slower peer
  b.say(2, "built", {{"round", 0}});  // an old round's: not this one
  REQUIRE(run_until(
      b.io, [&] { return b.starts[1] == 2 && b.starts[2] == 2; }, kGuard));
  CHECK(b.spawner.workers[0].signals.empty());
  CHECK(b.spawner.workers[1].signals == std::vector<int>{SIGKILL});
  CHECK(b.spawner.workers[2].signals == std::vector<int>{SIGKILL});
  const auto timeouts = b.named("recovery_timeout");
  REQUIRE(timeouts.size() == 2);
  CHECK(timeouts[0]["rank"] == 11);
  CHECK(timeouts[1]["rank"] == 12);
  CHECK(
      b.logged("rank 11 (pid 1001) did not build its group of the new round within "
               "--recovery_timeout (100 ms); restarting it"));
  CHECK(b.exits == std::vector<std::pair<size_t, Meaning>>{{1, Meaning::kReplacedNow},
                                                           {2, Meaning::kReplacedNow}});
  CHECK(b.starts[0] == 1);
}

TEST_CASE(
    "in-place recovery: no timeout kill once every worker re-formed, or while the group "
    "stops",
    "[in_place_recovery]") {
  Bench b(1, 50ms);
  b.hello(0);
  b.begin("node_lost");
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  SECTION("it joined (without saying built)") {
    b.joined(0, 1, 3);
  }
  SECTION("the group stops meanwhile") {
    b.healthy = false;
  }
  run_for(b.io, 250ms);
  CHECK(b.spawner.workers[0].signals.empty());
  CHECK(b.named("recovery_timeout").empty());
  CHECK(b.starts[0] == 1);
}

TEST_CASE("in-place recovery: the phase record is reported once, with its times and the state",
          "[in_place_recovery]") {
  Bench b(2);
  b.hello(0);
  b.hello(1);
  b.begin("node_lost");
  b.say(0, "aborted", {{"round", 0}});
  b.say(1, "aborted", {{"round", 0}});
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  for (size_t i : {0, 1}) {
    b.say(i, "built", {{"round", 1}});
    b.joined(i, 1, 7, 10, 4096);
  }
  b.say(0, "stepped", {{"round", 1}, {"step", 8}});
  CHECK(b.named("in_place_recovery").empty());  // rank 11 has not stepped yet
  b.say(1, "stepped", {{"round", 1}, {"step", 8}});
  b.say(1, "stepped", {{"round", 1}, {"step", 8}});  // said twice: reported once
  const auto done = b.named("in_place_recovery");
  REQUIRE(done.size() == 1);
  const auto& e = done[0];
  CHECK(e["reason"] == "node_lost");
  CHECK(e["from_round"] == 0);
  CHECK(e["round"] == 1);
  CHECK(e["kept"] == 2);
  CHECK(e["restarted"] == 0);
  CHECK(e["step"] == 7);
  CHECK(e["source"] == 10);
  CHECK(e["state_bytes"] == 4096);
  // Each phase is timed from when the change was noticed, in the order they happened.
  CHECK(e["aborted_ms"].get<int64_t>() >= 0);
  CHECK(e["reformed_ms"] >= e["aborted_ms"]);
  CHECK(e["state_sent_ms"] >= e["reformed_ms"]);
  CHECK(e["first_step_ms"] >= e["state_sent_ms"]);
  CHECK(b.recovery.completed() == 1);
  CHECK_THAT(b.recovery.summary(), StartsWith("1 in-place recovery (phase times since noticed):\n"
                                              "  round 0 -> 1 (node_lost): aborted ") &&
                                       Contains("2 kept, 0 restarted, resumed at step 7\n"));
  CHECK(b.logged("in-place recovery round 0 -> 1 (node_lost): aborted "));
}

TEST_CASE(
    "in-place recovery: a phase not every worker reached stays untimed, stale rounds count "
    "for nothing",
    "[in_place_recovery]") {
  Bench b(2);
  b.hello(0);
  b.hello(1);
  b.round = 3;
  b.begin("node_waiting");
  b.say(0, "aborted", {{"round", 3}});
  b.say(1, "aborted", {{"round", 2}});  // another recovery's: the abort phase never completes
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  b.joined(1, 3, 5);  // the round it left
  b.joined(0, 4, 5);
  b.say(0, "stepped", {{"round", 4}, {"step", 6}});
  b.say(1, "stepped", {{"round", 5}, {"step", 6}});  // a round not resumed
  CHECK(b.named("in_place_recovery").empty());
  b.say(1, "stepped", {{"round", 4}, {"step", 6}});
  const auto done = b.named("in_place_recovery");
  REQUIRE(done.size() == 1);
  CHECK(done[0]["aborted_ms"] == -1);
  CHECK(done[0]["state_sent_ms"] == -1);  // rank 11 never said joined for round 4
  CHECK(done[0]["first_step_ms"].get<int64_t>() >= 0);
  CHECK(done[0]["from_round"] == 3);
  CHECK(done[0]["round"] == 4);
}

TEST_CASE("in-place recovery: a bad message is logged and ignored", "[in_place_recovery]") {
  Bench b(1);
  b.hello(0);
  b.begin("node_lost");
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  b.say(0, "joined", {{"rank", 10}});  // no round
  CHECK(b.logged("rank 10 sent a bad recovery message"));
  b.joined(0, 1, 1);
  b.say(0, "stepped", {{"round", 1}, {"step", 2}});
  CHECK(b.named("in_place_recovery").size() == 1);
}

TEST_CASE("in-place recovery: a fresh group forgets the recovery under way",
          "[in_place_recovery]") {
  Bench b(1);
  b.hello(0);
  b.begin("node_lost");
  REQUIRE(b.recovery.under_way());
  b.group.reset(1);
  b.recovery.reset(1);
  CHECK_FALSE(b.recovery.under_way());
  b.start(0);
  // A failure of the fresh group's worker is the agent's, not a death during a re-form.
  b.spawner.exit(1, ExitStatus{1, 0});
  CHECK(b.exits.back().second == Meaning::kNone);
  CHECK(b.named("recovery_worker_lost").empty());
}

TEST_CASE("in-place recovery: a recovery is described by its phase times", "[in_place_recovery]") {
  RecoveryRecord r;
  r.reason = "node_lost";
  r.from_round = 2;
  r.round = 3;
  r.noticed = std::chrono::steady_clock::time_point(std::chrono::seconds(100));
  r.aborted = r.noticed + 5ms;
  r.reformed = r.noticed + 1200ms;
  r.first_step = r.noticed + 2s;
  r.kept = 3;
  r.restarted = 1;
  r.step = 40;
  CHECK(describe_recovery(r) ==
        "round 2 -> 3 (node_lost): aborted 5 ms, re-formed 1200 ms, state sent -1 ms, first step "
        "2000 ms after it was noticed; 3 kept, 1 restarted, resumed at step 40");
}

TEST_CASE("in-place recovery: a spare's admission is described from the admission on",
          "[in_place_recovery][spare]") {
  RecoveryRecord r;
  r.reason = "spare_admitted";
  r.from_round = -1;
  r.round = 4;
  r.noticed = std::chrono::steady_clock::time_point(std::chrono::seconds(100));
  r.state_sent = r.noticed + 60ms;
  r.first_step = r.noticed + 130ms;
  r.kept = 2;
  r.step = 80;
  CHECK(describe_recovery(r) ==
        "admitted into round 4 (spare_admitted): state received 60 ms, first step 130 ms after "
        "admission; 2 worker(s) ready before, 0 started then, resumed at step 80");
}

TEST_CASE(
    "in-place recovery: a spare's parked workers are ready once all said hello, and each gets "
    "its notice at admission, one still starting once it says hello",
    "[in_place_recovery][spare]") {
  Bench b(3);
  b.recovery.park("spare_admitted");
  CHECK(b.recovery.parked());
  CHECK(b.recovery.under_way());
  b.hello(0);
  b.hello(1);
  CHECK(b.named("workers_parked").empty());   // slot 2 still starts (imports torch, say)
  b.spawner.exit(2, ExitStatus{0, SIGKILL});  // it died: started again once, parked
  REQUIRE(b.exits.size() == 1);
  CHECK(b.exits[0].second == Meaning::kReplacedNow);
  CHECK(b.starts == std::vector<int>{1, 1, 2});
  CHECK(
      b.logged("local rank 2 exited (signal 9 (SIGKILL)) while parked, before this node was "
               "admitted; starting it again"));
  b.hello(2);
  const auto ready = b.named("workers_parked");
  REQUIRE(ready.size() == 1);
  CHECK(b.parked_ready == 1);
  CHECK(ready[0]["count"] == 3);
  CHECK(b.logged("this node's 3 worker(s) are ready, parked before their first collective"));

  // Admission: every parked worker gets the round, none is killed or started again.
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  CHECK_FALSE(b.recovery.parked());
  CHECK_FALSE(b.recovery.under_way());
  for (size_t i = 0; i < 3; ++i) {
    b.await_received(i, 1);
    CHECK(b.received[i][0].type == "round");
    CHECK(b.received[i][0].integer("round") == 1);
  }
  for (const auto& worker : b.spawner.workers) CHECK(worker.signals.empty());
  const auto resumed = b.named("workers_resumed");
  REQUIRE(resumed.size() == 1);
  CHECK(resumed[0]["kept"] == 3);
  CHECK(resumed[0]["restarted"] == 0);
}

TEST_CASE("in-place recovery: a parked worker still starting at admission gets its notice on hello",
          "[in_place_recovery][spare]") {
  Bench b(2);
  b.recovery.park("spare_admitted");
  b.hello(0);
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  b.await_received(0, 1);
  run_for(b.io, 20ms);
  CHECK(b.received[1].empty());
  CHECK(b.spawner.workers[1].signals.empty());  // not killed for its silence: it starts
  b.hello(1);
  b.await_received(1, 1);
  CHECK(b.received[1][0].type == "round");
  CHECK(b.received[1][0].integer("rank") == 11);
  CHECK(b.named("workers_parked").empty());  // admitted already: nothing parked is left
}

TEST_CASE(
    "in-place recovery: a parked worker that dies twice is started at admission, not in a loop",
    "[in_place_recovery][spare]") {
  Bench b(1);
  b.recovery.park("spare_admitted");
  b.spawner.exit(0, ExitStatus{1, 0});
  b.spawner.exit(1, ExitStatus{1, 0});
  REQUIRE(b.exits.size() == 2);
  CHECK(b.exits[0].second == Meaning::kReplacedNow);
  CHECK(b.exits[1].second == Meaning::kReplacedLater);
  CHECK(b.starts == std::vector<int>{2});
  CHECK(
      b.logged("local rank 0 exited (exit code 1) while parked, before this node was admitted; "
               "it starts again when this node is admitted"));
  CHECK_FALSE(b.group.running(0));
  CHECK(b.parked_ready == 1);  // given up on: a joining node waits for it no longer
  REQUIRE(b.resume() == InPlaceRecovery::Resumed::kRunning);
  CHECK(b.starts == std::vector<int>{3});  // a fresh one, for the round
  CHECK_FALSE(b.recovery.parked());
}

TEST_CASE("in-place recovery: abandoning a spare's parking leaves its workers' exits to the agent",
          "[in_place_recovery][spare]") {
  Bench b(1);
  b.recovery.park("spare_admitted");
  b.recovery.abandon();  // the agent leaves (a signal, the job ended)
  CHECK_FALSE(b.recovery.parked());
  b.healthy = false;
  b.spawner.exit(0, ExitStatus{0, SIGTERM});
  REQUIRE(b.exits.size() == 1);
  CHECK(b.exits[0].second == Meaning::kNone);
  CHECK(b.starts == std::vector<int>{1});
}

TEST_CASE(
    "in-place recovery: parked workers silent past --recovery_timeout do not keep the node out",
    "[in_place_recovery][spare]") {
  // A script without the module under --in_place_recovery never says hello: a joining node
  // asks to join once --recovery_timeout passed, instead of waiting out its join_timeout.
  Bench b(2, 200ms);
  b.recovery.park("joined");
  b.hello(0);
  CHECK(b.parked_ready == 0);
  REQUIRE(run_until(
      b.io, [&] { return b.parked_ready == 1; }, kGuard));
  CHECK(
      b.logged("not every parked worker spoke on its recovery channel within "
               "--recovery_timeout (200 ms); asking to be admitted anyway"));
  CHECK(b.named("workers_parked").empty());
  for (const auto& worker : b.spawner.workers) CHECK(worker.signals.empty());
}
