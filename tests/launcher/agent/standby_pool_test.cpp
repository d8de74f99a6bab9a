// Standby workers on their own (standby_pool.hpp), over fake processes with real recovery
// channels: what a standby is started with, which one take() hands over and what it carries
// (its output, its channel, its exit), and when the pool gives up on them (a program that
// cannot stand by, one that never listens, deaths in a row) or kills them (the agent leaves).
#include "launcher/agent/standby_pool.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <map>
#include <memory>
#include <string>
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
using ddp::recovery::Message;
using ddp::test::run_until;
using ddp::test::TempDir;
using namespace std::chrono_literals;

namespace {

struct Bench : RecordedEvents, LoggedLines {
  explicit Bench(int count, std::chrono::milliseconds hello_timeout = 10s)
      : pool(io, spawner, log, count, hello_timeout, dir.path(), [](const std::string& error_file) {
          WorkerProcessSpec spec;
          spec.argv = {"/bin/train"};
          spec.env = {"DDPLAUNCH_SPARE=1", "DDPLAUNCH_STANDBY=1",
                      "TORCHELASTIC_ERROR_FILE=" + error_file};
          return spec;
        }) {}

  // Standby i says hello on its channel (as the runtime does once it waits for its place).
  void hello(size_t i) {
    auto& worker = spawner.workers.at(i);
    REQUIRE(worker.channel);
    channels[i] = std::make_unique<WorkerChannel>(
        io, *worker.channel, [this, i](const Message& m) { received[i].push_back(m); });
    channels[i]->send(make_message("hello", {{"pid", worker.pid}, {"local_rank", 0}}));
  }
  bool wait_for(const std::function<bool()>& pred) { return run_until(io, pred, 5s); }

  TempDir dir;
  boost::asio::io_context io;
  FakeSpawner spawner{io};
  StandbyPool pool;
  std::map<size_t, std::unique_ptr<WorkerChannel>> channels;
  std::map<size_t, std::vector<Message>> received;
};

}  // namespace

TEST_CASE("standby pool: fill() starts count standbys with their channel and error file",
          "[standby]") {
  Bench b(2);
  b.pool.fill();
  REQUIRE(b.spawner.workers.size() == 2);
  CHECK(b.pool.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(b.spawner.env(i, "DDPLAUNCH_RECOVERY_FD") == "3");
    CHECK(b.spawner.env(i, "DDPLAUNCH_STANDBY") == "1");
    CHECK(b.spawner.env(i, "TORCHELASTIC_ERROR_FILE") ==
          (b.dir.path() / ("standby_" + std::to_string(i)) / "error.json").string());
  }
  CHECK(b.named("standby_start").size() == 2);
  b.pool.fill();  // full: nothing more
  CHECK(b.spawner.workers.size() == 2);
}

TEST_CASE("standby pool: take() hands over the listening standby with its output and channel",
          "[standby]") {
  Bench b(2);
  b.pool.fill();
  b.hello(1);  // the second one listens first
  REQUIRE(b.wait_for([&] { return !b.named("standby_ready").empty(); }));
  CHECK(b.named("standby_ready")[0]["pid"] == b.spawner.workers[1].pid);
  // What it printed while it stood by is kept for the rank it becomes.
  b.spawner.workers[1].callbacks.on_output(1, "loaded the data set\n");
  b.spawner.workers[1].callbacks.on_output(2, "a warning\n");

  auto standby = b.pool.take();
  REQUIRE(standby);
  CHECK(standby->pid == b.spawner.workers[1].pid);
  CHECK(standby->hello);
  CHECK(standby->error_file == b.spawner.env(1, "TORCHELASTIC_ERROR_FILE"));
  CHECK(b.pool.size() == 1);

  std::vector<std::pair<int, std::string>> output;
  std::vector<ExitStatus> exits;
  std::vector<Message> messages;
  WorkerCallbacks callbacks;
  callbacks.on_output = [&](int stream, std::string_view bytes) {
    output.emplace_back(stream, std::string(bytes));
  };
  callbacks.on_exit = [&](ExitStatus status) { exits.push_back(status); };
  standby->connect(callbacks, [&](const Message& m) { messages.push_back(m); });
  REQUIRE(output.size() == 2);
  CHECK(output[0] == std::pair<int, std::string>{1, "loaded the data set\n"});
  CHECK(output[1] == std::pair<int, std::string>{2, "a warning\n"});
  // From now on its lines, messages and exit are the slot's.
  b.spawner.workers[1].callbacks.on_output(1, "step 1\n");
  CHECK(output.back().second == "step 1\n");
  b.channels[1]->send(make_message("built", {{"round", 4}}));
  REQUIRE(b.wait_for([&] { return !messages.empty(); }));
  CHECK(messages[0].type == "built");
  standby->link->send(make_message("round", {{"round", 4}}));
  REQUIRE(b.wait_for([&] { return !b.received[1].empty(); }));
  b.spawner.exit(1, ExitStatus{3, 0});
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].exit_code == 3);
  CHECK(b.named("standby_exit").empty());  // no longer the pool's

  // None listens: the one still starting is handed over.
  auto starting = b.pool.take();
  REQUIRE(starting);
  CHECK(starting->pid == b.spawner.workers[0].pid);
  CHECK_FALSE(starting->hello);
  CHECK_FALSE(b.pool.take());
}

TEST_CASE(
    "standby pool: a standby that dies standing by is started again; three in a row "
    "turn the pool off",
    "[standby]") {
  Bench b(1);
  b.pool.fill();
  b.hello(0);
  REQUIRE(b.wait_for([&] { return b.named("standby_ready").size() == 1; }));
  b.spawner.workers[0].callbacks.on_output(2, "Killed by the OOM killer\n");
  b.spawner.exit(0, ExitStatus{0, SIGKILL});
  CHECK(b.spawner.workers[0].released);
  REQUIRE(b.spawner.workers.size() == 2);  // another one
  CHECK(b.logged("standby worker pid 1000 exited"));
  CHECK(b.logged("Killed by the OOM killer"));
  CHECK(b.logged("starting another"));
  REQUIRE(b.named("standby_exit").size() == 1);
  CHECK(b.named("standby_exit")[0]["listening"] == true);
  CHECK(b.pool.on());

  for (size_t i = 1; i <= 2; ++i) {
    b.hello(i);
    REQUIRE(b.wait_for([&] { return b.named("standby_ready").size() == i + 1; }));
    b.spawner.exit(i, ExitStatus{0, SIGKILL});
  }
  CHECK_FALSE(b.pool.on());
  CHECK(b.spawner.workers.size() == 3);
  CHECK(b.logged("standby workers are off for this node"));
  CHECK(b.logged("3 standbys died in a row"));
  REQUIRE(b.named("standby_off").size() == 1);
  b.pool.fill();  // off stays off
  CHECK(b.spawner.workers.size() == 3);
  CHECK_FALSE(b.pool.available());
}

TEST_CASE("standby pool: a program that dies before it listens cannot stand by: the pool is off",
          "[standby]") {
  // A script without ddplaunch_recovery fails as a standby (no RANK, no MASTER_ADDR): it must
  // not be started again and again.
  Bench b(2);
  b.pool.fill();
  b.spawner.workers[0].callbacks.on_output(2, "Traceback (most recent call last):\n");
  b.spawner.workers[0].callbacks.on_output(2, "KeyError: 'RANK'\n");
  b.spawner.exit(0, ExitStatus{1, 0});
  CHECK_FALSE(b.pool.on());
  CHECK(b.logged("before it listened on its recovery channel: the program cannot stand by"));
  CHECK(b.logged("KeyError: 'RANK'"));
  CHECK(b.named("standby_off").size() == 1);
  // The other one goes too, and none is started again.
  CHECK(b.spawner.workers[1].signals == std::vector<int>{SIGKILL});
  CHECK(b.spawner.workers.size() == 2);
  CHECK_FALSE(b.pool.available());
}

TEST_CASE("standby pool: a standby that does not listen within the timeout is killed, pool off",
          "[standby]") {
  Bench b(1, 50ms);
  b.spawner.on_signal = [](size_t, int) {};  // the exit comes later
  b.pool.fill();
  REQUIRE(b.wait_for([&] { return !b.pool.on(); }));
  CHECK(b.spawner.workers[0].signals == std::vector<int>{SIGKILL});
  CHECK(b.logged("did not listen on its recovery channel within --recovery_timeout (50 ms)"));
  b.spawner.exit(0, ExitStatus{0, SIGKILL});
  CHECK(b.spawner.workers[0].released);  // released once it is gone
  CHECK(b.named("standby_exit").empty());
}

TEST_CASE("standby pool: stop_all() kills every standby and starts none after", "[standby]") {
  Bench b(2);
  b.pool.fill();
  b.pool.stop_all();
  for (size_t i = 0; i < 2; ++i) CHECK(b.spawner.workers[i].released);
  CHECK_FALSE(b.pool.available());
  b.spawner.exit(0, ExitStatus{0, SIGKILL});  // its exit means nothing now
  b.pool.fill();
  CHECK(b.spawner.workers.size() == 2);
  CHECK(b.named("standby_exit").empty());
}

TEST_CASE("standby pool: a standby that cannot be started turns the pool off", "[standby]") {
  Bench b(1);
  b.spawner.fail_spawn = [](size_t) { return true; };
  b.pool.fill();
  CHECK_FALSE(b.pool.on());
  CHECK(b.logged("a standby worker could not be started: fake spawn: cannot run the program"));
}
