// The agent's answer to a hang (hang_response.hpp), on its own over a real HangWatch, a real
// WorkerGroup of fake workers and a fake /proc: the culprit here asked for its stack and the
// group stopped after the dump grace unless it ends first, a node with only victims waiting
// for the culprit's node, and torch's file timer naming the rank it killed.
#include "launcher/agent/hang_response.hpp"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "launcher/hang/progress_board.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "tests/launcher/agent/captures.hpp"
#include "tests/launcher/agent/fake_workers.hpp"
#include "tests/launcher/hang/fifo_test_support.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using ddp::launcher::testing::FakeSpawner;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::RecordedEvents;
using ddp::progress::Phase;
using ddp::test::progress_line;
using ddp::test::run_for;
using ddp::test::run_until;
using ddp::test::TempDir;
using ddp::test::timer_request;
using ddp::test::wall_now;
using ddp::test::write_fifo;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 10s;

// One node's hang response over its fake workers, and what it asked of the agent.
struct Bench : RecordedEvents, LoggedLines {
  explicit Bench(HangResponseOptions o)
      : response(io, with_bench(std::move(o)), log, group, slots, hooks()) {}

  HangResponseOptions with_bench(HangResponseOptions o) {
    o.run_dir = dir.path() / "run";
    o.read_proc = [this](int pid) -> std::optional<ProcStatus> {
      ProcStatus status;
      status.pid = pid;
      status.state = states.count(pid) != 0 ? states.at(pid) : 'S';
      return status;
    };
    return o;
  }
  HangResponse::Hooks hooks() {
    HangResponse::Hooks h;
    h.stop_group = [this] { ++stops; };
    h.note_hang = [this](int rank) { noted.push_back(rank); };
    h.healthy = [this] { return healthy; };
    return h;
  }

  // Starts count workers, ranks rank_offset.., and watches them as group rank node of nodes
  // (connect: the job's store; null: one node).
  void start(size_t count, int rank_offset = 0, ProgressBoard::Connector connect = nullptr,
             int node = 0, int nodes = 1) {
    group.reset(count);
    slots.assign(count, WorkerSlot{});
    for (size_t i = 0; i < count; ++i) {
      slots[i].local_rank = static_cast<int>(i);
      slots[i].rank = rank_offset + static_cast<int>(i);
      WorkerProcessSpec spec;
      spec.local_rank = slots[i].local_rank;
      WorkerCallbacks callbacks;
      callbacks.on_output = [](int, std::string_view) {};
      callbacks.on_exit = [this, i](ExitStatus) { response.worker_exited(group.pid(i)); };
      group.start(i, spec, std::move(callbacks));
    }
    response.begin(std::move(connect), 0, node, nodes);
  }
  // One worker watched as node 0 of 2 on store, its rank entering all_reduce #3 of step 5,
  // until the hang of a rank on the other node is found (store_with_rank_behind()).
  void wait_as_victim(const std::shared_ptr<ddp::rendezvous::Store>& store) {
    start(
        1, 0, [store] { return store; }, 0, 2);
    progress(0, 5, 3, Phase::kEnter);
    REQUIRE(run_until(
        io, [&] { return logged("the hung rank is on another node"); }, kGuard));
  }
  // The value of NAME in what every worker gets ("" when absent).
  [[nodiscard]] std::string env(const std::string& name) const {
    for (const auto& entry : response.worker_env()) {
      if (entry.starts_with(name + "=")) return entry.substr(name.size() + 1);
    }
    return "";
  }
  // Worker i's progress line, as the worker writes it to the progress FIFO.
  void progress(size_t i, int64_t step, int64_t seq, Phase phase) {
    REQUIRE(write_fifo(env("DDPLAUNCH_PROGRESS_FILE"),
                       progress_line(slots.at(i).rank, group.pid(i), step, seq, phase)));
  }

  TempDir dir;
  boost::asio::io_context io;
  FakeSpawner spawner{io};
  WorkerGroup group{io, spawner, WorkerGroupOptions{}};
  std::map<int, char> states;  // the fake /proc: each pid's state ('S' when not set)
  std::vector<WorkerSlot> slots;
  bool healthy = true;
  int stops = 0;
  std::vector<int> noted;
  HangResponse response;  // last: its hooks use the members above
};

HangResponseOptions watching_progress() {
  HangResponseOptions o;
  o.hang_timeout = 200ms;
  o.stop_timeout = 100ms;  // caps the dump and victim graces
  return o;
}

// A job store holding node 1's view of its rank 1: it left all_reduce #2 of step 5 long ago
// and never entered #3, where this node's rank 0 waits.
std::shared_ptr<ddp::rendezvous::MemoryStore> store_with_rank_behind() {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>(10s);
  RankSnapshot behind;
  behind.rank = 1;
  behind.has_source = true;
  behind.last.rank = 1;
  behind.last.step = 5;
  behind.last.op = "all_reduce";
  behind.last.seq = 2;
  behind.last.phase = Phase::kExit;
  behind.silent_s = 30;
  behind.hung = true;
  store->set("hang/0/1", encode_snapshots({behind}, static_cast<int64_t>(wall_now() * 1000)));
  return store;
}

HangResponseOptions file_timer_only() {
  HangResponseOptions o;
  o.file_timer = true;
  o.stop_timeout = 0ms;  // the scope's signal at once, no SIGABRT first
  return o;
}

}  // namespace

TEST_CASE("hang response: nothing is watched without --hang_timeout or the file timer",
          "[hang_response]") {
  Bench b{HangResponseOptions{}};
  CHECK_FALSE(b.response.enabled());
  CHECK(b.response.worker_env().empty());
  b.start(1);
  b.response.end();
  CHECK_FALSE(b.response.dumps_pending());
  CHECK_FALSE(std::filesystem::exists(b.dir.path() / "run"));
}

TEST_CASE("hang response: the workers are given the FIFOs of progress and of the file timer",
          "[hang_response]") {
  auto o = watching_progress();
  o.file_timer = true;
  SECTION("the timer file torch names") {
    o.timer_file = std::filesystem::temp_directory_path() /
                   ("hang_response_timer_" + std::to_string(::getpid()));
    Bench b{o};
    CHECK(b.response.enabled());
    CHECK(b.env("DDPLAUNCH_PROGRESS_FILE") == (b.dir.path() / "run" / "progress.fifo").string());
    CHECK(b.env("TORCHELASTIC_TIMER_FILE") == o.timer_file.string());
  }
  SECTION("one in the run directory") {
    Bench b{o};
    CHECK(b.env("TORCHELASTIC_TIMER_FILE") == (b.dir.path() / "run" / "timer.fifo").string());
  }
}

TEST_CASE(
    "hang response: the rank behind is asked for its stack, the one waiting on it is "
    "only marked",
    "[hang_response]") {
  Bench b{watching_progress()};
  b.spawner.on_signal = [](size_t, int) {};  // the test says who dies of what
  b.start(2);
  // Rank 0 waits inside all_reduce #3; rank 1 left #2 and never entered #3.
  b.progress(0, 5, 3, Phase::kEnter);
  b.progress(1, 5, 2, Phase::kExit);
  REQUIRE(run_until(
      b.io, [&] { return !b.noted.empty(); }, kGuard));
  CHECK(b.noted == std::vector<int>{1});
  CHECK(b.spawner.workers[1].signals == std::vector<int>{SIGABRT, SIGCONT});
  CHECK(b.spawner.workers[0].signals.empty());
  CHECK(b.slots[1].culprit);
  CHECK(b.slots[1].dumping);
  CHECK_THAT(b.slots[1].hang, StartsWith("rank 1: no progress for"));
  CHECK_FALSE(b.slots[0].culprit);
  CHECK_FALSE(b.slots[0].dumping);
  CHECK_THAT(b.slots[0].hang, StartsWith("waiting on a hung rank: rank 1: no progress for"));
  CHECK(b.response.dumps_pending());
  CHECK(b.logged("rank 1 (pid 1001) threads:"));
  CHECK(b.logged("rank 1 (pid 1001): asking for its stack (SIGABRT), then stopping the group"));
  const auto hangs = b.named("hang");
  REQUIRE(hangs.size() == 2);
  for (const auto& event : hangs) {
    const bool culprit = event["rank"] == 1;
    CHECK(event["culprit"] == culprit);
    CHECK(event["source"] == "progress");
    CHECK(event["step"] == 5);
    CHECK(event["scope"] == (culprit ? "all_reduce #2" : "all_reduce #3"));
    CHECK(event["seconds"].get<double>() >= 0.2);
  }
  SECTION("it dies of the dump: the agent stops the group, not the grace") {
    b.spawner.exit(1, ExitStatus{0, SIGABRT});
    CHECK_FALSE(b.response.dumps_pending());
    b.response.end();  // what the agent does as the group stops
    run_for(b.io, 300ms);
    CHECK(b.stops == 0);
  }
  SECTION("it does not die: the group is stopped after the grace") {
    REQUIRE(run_until(
        b.io, [&] { return b.stops == 1; }, kGuard));
    CHECK(
        b.logged("a hung rank did not exit after SIGABRT; stopping the workers (pids 1000, "
                 "1001)"));
    CHECK(b.noted.size() == 1);
  }
}

TEST_CASE(
    "hang response: with the hung rank on another node, this node's victims stop after a "
    "grace",
    "[hang_response]") {
  Bench b{watching_progress()};
  auto store = store_with_rank_behind();
  b.wait_as_victim(store);
  CHECK(b.logged("stopping this node's workers (pids 1000) if it is not gone first"));
  CHECK_THAT(b.slots[0].hang, StartsWith("waiting on a hung rank: rank 1:"));
  CHECK_FALSE(b.slots[0].culprit);
  CHECK(b.spawner.workers[0].signals.empty());
  CHECK_FALSE(b.response.dumps_pending());
  CHECK(b.noted.empty());  // not yet: the culprit's node may act first
  SECTION("its node does not act in time") {
    REQUIRE(run_until(
        b.io, [&] { return b.stops == 1; }, kGuard));
    CHECK(b.noted == std::vector<int>{-1});
  }
  SECTION("the group stops first (the culprit died, its collectives failed ours)") {
    b.healthy = false;
    run_for(b.io, 300ms);
    CHECK(b.stops == 0);
    CHECK(b.noted.empty());
  }
  SECTION("the group re-forms in place first: the kept worker starts the round afresh") {
    // What hang detection said of it is over: a later crash of this worker is a crash, not
    // "waiting on a hung rank" (docs/chaos.md, seed 7: a SIGKILL 16 s later was reported so).
    b.response.end();
    b.response.begin([store] { return store; }, 1, 0, 2);
    CHECK(b.slots[0].hang.empty());
    CHECK_FALSE(b.slots[0].culprit);
    run_for(b.io, 300ms);
    CHECK(b.stops == 0);
    b.response.end();
  }
}

TEST_CASE("hang response: victims whose ranks move on before the culprit's node acts are kept",
          "[hang_response]") {
  // The hang cleared within the victims' grace (the culprit's rank moved on, its node did
  // not act): nothing is stopped, and nothing said of the workers stays.
  auto o = watching_progress();
  o.stop_timeout = 3000ms;  // the victims' grace: far longer than a check (40 ms)
  Bench b{o};
  auto store = store_with_rank_behind();
  b.wait_as_victim(store);
  CHECK_FALSE(b.slots[0].hang.empty());
  b.progress(0, 5, 3, Phase::kExit);  // the all-reduce completed: rank 1 arrived after all
  REQUIRE(run_until(
      b.io, [&] { return b.logged("made progress again before the hung rank's node acted"); },
      kGuard));
  CHECK(b.slots[0].hang.empty());
  for (int64_t seq = 4; seq < 40; ++seq) {  // training goes on, past the grace
    b.progress(0, 5, seq, Phase::kExit);
    run_for(b.io, 100ms);
  }
  CHECK(b.stops == 0);
  CHECK(b.noted.empty());
  b.response.end();
}

TEST_CASE("hang response: a file-timer scope that killed its rank names that rank the culprit",
          "[hang_response]") {
  Bench b{file_timer_only()};
  // The timer signals the real pid: this test's own, with a signal that does nothing here.
  b.spawner.next_pid = ::getpid();
  b.start(1, 10);
  REQUIRE(write_fifo(b.env("TORCHELASTIC_TIMER_FILE"),
                     timer_request(::getpid(), "train_step", wall_now() - 1, SIGWINCH)));
  REQUIRE(run_until(
      b.io, [&] { return !b.named("hang").empty(); }, kGuard));
  const auto event = b.named("hang").at(0);
  CHECK(event["rank"] == 10);
  CHECK(event["pid"] == ::getpid());
  CHECK(event["source"] == "file_timer");
  CHECK(event["scope"] == "train_step");
  CHECK(event["culprit"] == true);
  CHECK(event["seconds_late"].get<double>() >= 1.0);
  CHECK(b.slots[0].culprit);
  CHECK_FALSE(b.slots[0].dumping);  // no stack was asked for
  CHECK_THAT(b.slots[0].hang, StartsWith("file timer scope 'train_step' expired; sent "));
  CHECK(b.logged("rank 10 (pid " + std::to_string(::getpid()) +
                 "): file timer scope 'train_step' expired; sent "));
  // The exit that follows is the failure; stopping is the agent's.
  CHECK(b.stops == 0);
}

TEST_CASE(
    "hang response: a file-timer scope that killed nobody, or expired as the group "
    "stops, is only reported",
    "[hang_response]") {
  Bench b{file_timer_only()};
  b.spawner.next_pid = ::getpid();
  b.start(1);
  int signal = 0;
  SECTION("it asked for no signal") {
    signal = 0;
  }
  SECTION("the group already stops") {
    signal = SIGWINCH;
    b.healthy = false;
  }
  REQUIRE(write_fifo(b.env("TORCHELASTIC_TIMER_FILE"),
                     timer_request(::getpid(), "eval", wall_now() - 1, signal)));
  REQUIRE(run_until(
      b.io, [&] { return !b.named("hang").empty(); }, kGuard));
  CHECK(b.named("hang").at(0)["culprit"] == false);
  CHECK_FALSE(b.slots[0].culprit);
  CHECK(b.slots[0].hang.empty());
}

TEST_CASE("hang response: a file timer of a process that is no worker is only logged",
          "[hang_response]") {
  Bench b{file_timer_only()};
  b.start(1);
  constexpr int kStranger = 2000000001;  // above any pid_max: nobody is signalled
  REQUIRE(write_fifo(b.env("TORCHELASTIC_TIMER_FILE"),
                     timer_request(kStranger, "eval", wall_now() - 1, 0)));
  REQUIRE(run_until(
      b.io,
      [&] {
        return b.logged(
            "pid 2000000001: file timer scope 'eval' expired; no signal was asked "
            "for (TORCHELASTIC_ENABLE_FILE_TIMER)");
      },
      kGuard));
  CHECK(b.named("hang").empty());
  CHECK_FALSE(b.slots[0].culprit);
}
