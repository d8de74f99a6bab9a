// Starting a round's workers on its own (worker_launcher.hpp), over a real WorkerGroup of fake
// workers: each slot's rank and error file, the env contract in the spec, the start and
// workers_started events, exits handed back by slot, and a worker that cannot start.
#include "launcher/agent/worker_launcher.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/launcher/agent/captures.hpp"
#include "tests/launcher/agent/fake_workers.hpp"
#include "tests/launcher/agent/worker_channel.hpp"
#include "tests/support/io_loop.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using Catch::Matchers::Contains;
using ddp::launcher::testing::FakeSpawner;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::make_message;
using ddp::launcher::testing::RecordedEvents;
using ddp::launcher::testing::WorkerChannel;
using ddp::test::run_until;
using ddp::test::TempDir;
using namespace std::chrono_literals;

namespace {

// The launcher with the agent's parts around it; the round is attempt 3, ranks from 4.
struct Bench : RecordedEvents, LoggedLines {
  // in_place: --in_place_recovery (channels, notices) with `standby` standby workers.
  explicit Bench(bool in_place = false, int standby = 0)
      : recovery{io, in_place, 1s, log, group, recovery_hooks()},
        standbys{io, spawner, log, standby, 1s, dir.path(), [this](const std::string& error_file) {
                   return launcher.standby_spec(error_file);
                 }} {
    options.config.nproc_per_node = 2;
    options.config.program = "/bin/true";
    options.env = {{"PATH", "/usr/bin:/bin"}};
    options.run_dir = dir.path();
    round.attempt = 3;
    round.info.round = 3;
    round.info.rank_offset = 4;
    round.info.world_size = 6;
    round.info.master_addr = "127.0.0.1";
    round.info.master_port = 29999;
  }

  AttemptInfo attempt() const { return AttemptInfo{round.info, round.attempt, "run", true}; }
  InPlaceRecovery::Hooks recovery_hooks() {
    InPlaceRecovery::Hooks h;
    h.notice = [this](size_t index) {
      const auto id = worker_identity(options.config, attempt(), static_cast<int>(index));
      return round_notice(id, round.attempt).to_message();
    };
    h.rank_of = [this](size_t index) { return launcher.slot(index).rank; };
    return h;
  }

  WorkerLauncher::Hooks hooks() {
    return {[this] { return attempt(); }, [] { return std::vector<std::string>{"HANG_VAR=1"}; },
            [this](size_t index, ExitStatus status) { exits.emplace_back(index, status); },
            [this](const WorkerSlot& slot, const std::string& error) {
              failed.emplace_back(slot.rank, error);
            }};
  }

  TempDir dir;
  AgentOptions options;
  RoundHistory round;
  boost::asio::io_context io;
  FakeSpawner spawner{io};
  WorkerGroup group{io, spawner, WorkerGroupOptions{}};
  InPlaceRecovery recovery;
  StandbyPool standbys;
  LogRouter logs{LogRouterOptions{}};
  std::vector<std::pair<size_t, ExitStatus>> exits;
  std::vector<std::pair<int, std::string>> failed;
  WorkerLauncher launcher{options, round, group, recovery, standbys, logs, log, hooks()};
};

}  // namespace

TEST_CASE("worker launcher: each slot's worker starts with its ranks, error file and env",
          "[worker_launcher]") {
  Bench b;
  b.launcher.reset(2);
  REQUIRE(b.launcher.start_all());
  REQUIRE(b.spawner.workers.size() == 2);
  for (size_t index = 0; index < 2; ++index) {
    const WorkerSlot& slot = b.launcher.slot(index);
    CHECK(slot.local_rank == static_cast<int>(index));
    CHECK(slot.rank == 4 + static_cast<int>(index));
    CHECK(slot.error_file ==
          (b.dir.path() / "attempt_3" / std::to_string(index) / "error.json").string());
    CHECK(b.spawner.env(index, "RANK") == std::to_string(4 + index));
    CHECK(b.spawner.env(index, "LOCAL_RANK") == std::to_string(index));
    CHECK(b.spawner.env(index, "TORCHELASTIC_RESTART_COUNT") == "3");
    CHECK(b.spawner.env(index, "HANG_VAR") == "1");
  }
  REQUIRE(b.named("worker_start").size() == 2);
  CHECK(b.named("worker_start")[1]["rank"] == 5);
  REQUIRE(b.named("workers_started").size() == 1);
  CHECK(b.named("workers_started")[0]["count"] == 2);
  CHECK(b.named("workers_started")[0]["restart_count"] == 3);

  // An exit comes back as its slot's.
  b.spawner.exit(1, ExitStatus{7, 0});
  REQUIRE(run_until(
      b.io, [&] { return !b.exits.empty(); }, 10s));
  CHECK(b.exits[0].first == 1);
  CHECK(b.exits[0].second.exit_code == 7);
}

TEST_CASE("worker launcher: a worker that cannot start is reported and handed to the agent",
          "[worker_launcher]") {
  Bench b;
  b.spawner.fail_spawn = [](size_t n) { return n == 1; };
  b.launcher.reset(2);
  CHECK_FALSE(b.launcher.start_all());
  REQUIRE(b.failed.size() == 1);
  CHECK(b.failed[0].first == 5);
  CHECK_THAT(b.failed[0].second, Contains("cannot run the program"));
  REQUIRE(b.named("spawn_failed").size() == 1);
  CHECK(b.named("spawn_failed")[0]["local_rank"] == 1);
  CHECK(b.named("workers_started").empty());  // the rest of the group is not started
  CHECK(b.logged("cannot run the program"));
}

TEST_CASE("worker launcher: kept workers take their ranks in a round re-formed in place",
          "[worker_launcher]") {
  Bench b;
  b.launcher.reset(2);
  b.launcher.renumber(10);
  CHECK(b.launcher.slot(0).rank == 10);
  CHECK(b.launcher.slot(1).rank == 11);
  CHECK(b.launcher.slots().size() == 2);
}

TEST_CASE("worker launcher: a standby takes a dead worker's slot and gets its place",
          "[worker_launcher][standby]") {
  Bench b(/*in_place=*/true, /*standby=*/1);
  b.logs.begin_attempt(2, 4, std::nullopt);
  b.launcher.reset(2);
  REQUIRE(b.launcher.start_all());
  b.standbys.fill();
  REQUIRE(b.spawner.workers.size() == 3);
  // Started before anyone knows which place it takes: no round variables, no LOCAL_RANK.
  CHECK(b.spawner.env(2, "DDPLAUNCH_STANDBY") == "1");
  CHECK(b.spawner.env(2, "DDPLAUNCH_SPARE") == "1");
  CHECK(b.spawner.env(2, "LOCAL_RANK").empty());
  CHECK(b.spawner.env(2, "RANK").empty());
  CHECK(b.spawner.env(2, "MASTER_ADDR").empty());
  CHECK(b.spawner.env(2, "HANG_VAR") == "1");
  CHECK(b.spawner.env(2, "DDPLAUNCH_RECOVERY_FD") == "3");

  std::vector<ddp::recovery::Message> received;
  WorkerChannel channel(b.io, *b.spawner.workers[2].channel,
                        [&](const ddp::recovery::Message& m) { received.push_back(m); });
  channel.send(make_message("hello", {{"pid", b.spawner.workers[2].pid}, {"local_rank", 0}}));
  REQUIRE(run_until(
      b.io, [&] { return !b.named("standby_ready").empty(); }, 10s));
  b.spawner.workers[2].callbacks.on_output(1, "standing by\n");

  b.spawner.exit(1, ExitStatus{3, 0});  // local rank 1 dies
  REQUIRE(b.exits.size() == 1);
  REQUIRE(b.launcher.replace(1));
  CHECK(b.group.running(1));
  CHECK(b.group.pid(1) == b.spawner.workers[2].pid);
  CHECK(b.launcher.slot(1).rank == 5);
  CHECK(b.launcher.slot(1).error_file == b.spawner.env(2, "TORCHELASTIC_ERROR_FILE"));
  // Its place, local rank included, comes as the round notice.
  REQUIRE(run_until(
      b.io, [&] { return !received.empty(); }, 10s));
  CHECK(received[0].type == "round");
  CHECK(received[0].integer("rank") == 5);
  CHECK(received[0].integer("local_rank") == 1);
  CHECK(received[0].integer("round") == 3);
  // What it printed while it stood by is now rank 5's.
  b.logs.flush(1);
  const auto lines = b.logs.recent_lines(1);
  CHECK(std::find(lines.begin(), lines.end(), "standing by") != lines.end());
  REQUIRE(b.named("standby_promoted").size() == 1);
  CHECK(b.named("standby_promoted")[0]["local_rank"] == 1);
  CHECK(b.named("standby_promoted")[0]["listening"] == true);
  CHECK(b.named("worker_start").back()["pid"] == b.spawner.workers[2].pid);
  CHECK(b.logged("rank 5 (local_rank 1) is now standby worker pid 1002, parked"));
  // Another stands by in its place.
  REQUIRE(b.spawner.workers.size() == 4);
  CHECK(b.spawner.env(3, "DDPLAUNCH_STANDBY") == "1");
  // Its exit is the slot's.
  b.spawner.exit(2, ExitStatus{0, 0});
  REQUIRE(b.exits.size() == 2);
  CHECK(b.exits[1].first == 1);

  // No standby left (the pool was stopped): a fresh worker, as without standbys.
  b.standbys.stop_all();
  REQUIRE(b.launcher.replace(1));
  REQUIRE(b.spawner.workers.size() == 5);
  CHECK(b.group.pid(1) == b.spawner.workers[4].pid);
  CHECK(b.spawner.env(4, "LOCAL_RANK") == "1");
  CHECK(b.spawner.env(4, "RANK") == "5");
  CHECK(b.spawner.env(4, "DDPLAUNCH_STANDBY").empty());
}
