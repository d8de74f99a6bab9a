// The worker group on its own, over the fake spawner: slots, exits reported once and only for
// the current group, signals, and the stop: the signal, SIGKILL after the grace, then the
// unkillable given up on.
#include "launcher/process/worker_group.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "tests/launcher/agent/fake_workers.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::FakeSpawner;
using namespace std::chrono_literals;

namespace {

// The group, its fake processes and what came back.
struct Bench {
  boost::asio::io_context io;
  FakeSpawner spawner{io};
  std::vector<std::string> lines;  // log lines
  ddp::log::ScopedSink sink{
      [this](ddp::log::Level, std::string_view line) { lines.emplace_back(line); }};
  WorkerGroup group;
  std::vector<std::pair<size_t, ExitStatus>> exits;
  std::optional<std::vector<UnkillableWorker>> unkillable;

  explicit Bench(std::chrono::milliseconds stop_timeout = 50ms)
      : group(io, spawner, options(stop_timeout)) {}

  static WorkerGroupOptions options(std::chrono::milliseconds stop_timeout) {
    WorkerGroupOptions o;
    o.stop_timeout = stop_timeout;
    o.unkillable_grace = 20ms;
    o.read_proc = [](int pid) {
      ProcStatus status;
      status.pid = pid;
      status.state = 'D';
      return std::optional<ProcStatus>(status);
    };
    return o;
  }
  int start(size_t index) {
    WorkerProcessSpec spec;
    spec.local_rank = static_cast<int>(index);
    WorkerCallbacks callbacks;
    callbacks.on_output = [](int, std::string_view) {};
    callbacks.on_exit = [this, index](ExitStatus status) { exits.emplace_back(index, status); };
    return group.start(index, spec, std::move(callbacks));
  }
  void stop(int sig) {
    group.stop(sig, [this](const std::vector<UnkillableWorker>& gone) { unkillable = gone; });
  }
  // Runs the loop until done() or the guard runs out.
  template <typename Done>
  bool run_until(Done done, std::chrono::milliseconds guard = 5000ms) {
    const auto end = std::chrono::steady_clock::now() + guard;
    while (!done() && std::chrono::steady_clock::now() < end) {
      io.restart();
      io.run_for(5ms);
    }
    return done();
  }
  [[nodiscard]] bool sent(size_t worker, int sig) const {
    const auto& signals = spawner.workers.at(worker).signals;
    return std::find(signals.begin(), signals.end(), sig) != signals.end();
  }
};

}  // namespace

TEST_CASE("worker group: slots start, run, and report each exit once", "[worker_group]") {
  Bench b;
  b.group.reset(3);
  CHECK(b.group.size() == 3);
  CHECK(b.group.running_pids() == "none running");
  for (size_t i = 0; i < 3; ++i) CHECK(b.start(i) == 1000 + static_cast<int>(i));
  CHECK(b.group.running_count() == 3);
  CHECK(b.group.running_pids() == "1000, 1001, 1002");

  b.spawner.exit(1, ExitStatus{3, 0});
  REQUIRE(b.exits.size() == 1);
  CHECK(b.exits[0].first == 1);
  CHECK(b.exits[0].second.exit_code == 3);
  CHECK_FALSE(b.group.running(1));
  CHECK(b.group.pid(1) == 1001);  // still named after it ended
  CHECK(b.group.running_count() == 2);
  CHECK(b.group.running_pids() == "1000, 1002");

  // The same process reported twice (a late duplicate) is not an exit of the slot's new life.
  b.spawner.workers[1].exited = false;
  b.spawner.exit(1, ExitStatus{0, 9});
  CHECK(b.exits.size() == 1);

  // A slot started afresh runs again, under a new pid.
  CHECK(b.start(1) == 1003);
  CHECK(b.group.running(1));
  CHECK(b.group.running_count() == 3);
}

TEST_CASE("worker group: exits of the previous group are ignored after reset", "[worker_group]") {
  Bench b;
  b.group.reset(1);
  b.start(0);
  b.group.reset(1);
  CHECK(b.group.running_count() == 0);
  CHECK(b.group.pid(0) == 0);
  b.spawner.exit(0, ExitStatus{1, 0});
  CHECK(b.exits.empty());
  CHECK(b.group.running_count() == 0);
}

TEST_CASE("worker group: a worker that cannot be started leaves its slot empty", "[worker_group]") {
  Bench b;
  b.spawner.fail_spawn = [](size_t n) { return n == 1; };
  b.group.reset(2);
  b.start(0);
  CHECK_THROWS_AS(b.start(1), ddp::Error);
  CHECK_FALSE(b.group.running(1));
  CHECK(b.group.running_count() == 1);
}

TEST_CASE("worker group: signals reach running workers only", "[worker_group]") {
  Bench b;
  b.spawner.on_signal = [](size_t, int) {};  // nobody dies of them
  b.group.reset(2);
  b.start(0);
  b.start(1);
  b.spawner.exit(1, ExitStatus{0, 0});
  b.group.signal_all(SIGUSR1);
  b.group.signal(0, SIGUSR2);
  b.group.signal(1, SIGUSR2);
  b.group.signal_process(0, SIGABRT);
  CHECK(b.spawner.workers[0].signals == std::vector<int>{SIGUSR1, SIGUSR2, SIGABRT});
  CHECK(b.spawner.workers[1].signals.empty());
}

TEST_CASE("worker group: stop sends the signal, and no SIGKILL when they go", "[worker_group]") {
  Bench b;
  b.group.reset(2);
  b.start(0);
  b.start(1);
  b.stop(SIGTERM);
  REQUIRE(b.run_until([&] { return b.group.running_count() == 0; }));
  CHECK(b.exits.size() == 2);
  b.group.cancel_stop();  // what the agent does once all are gone
  b.io.restart();
  b.io.run_for(150ms);
  CHECK_FALSE(b.sent(0, SIGKILL));
  CHECK_FALSE(b.sent(1, SIGKILL));
  CHECK_FALSE(b.unkillable);
}

TEST_CASE("worker group: stop with nothing running arms nothing", "[worker_group]") {
  Bench b;
  b.group.reset(1);
  b.stop(SIGTERM);
  b.io.restart();
  b.io.run_for(150ms);
  CHECK_FALSE(b.unkillable);
  CHECK(b.lines.empty());
}

TEST_CASE("worker group: workers ignoring the signal get SIGKILL after the grace",
          "[worker_group]") {
  Bench b;
  b.spawner.on_signal = [&](size_t index, int sig) {
    if (sig == SIGKILL) b.spawner.exit(index, ExitStatus{0, SIGKILL});
  };
  b.group.reset(2);
  b.start(0);
  b.start(1);
  b.stop(SIGTERM);
  REQUIRE(b.run_until([&] { return b.group.running_count() == 0; }));
  CHECK(b.sent(0, SIGTERM));
  CHECK(b.sent(0, SIGKILL));
  CHECK(b.exits.size() == 2);
  REQUIRE(b.lines.size() == 1);
  CHECK(b.lines[0].find("workers still running 50 ms after SIGTERM; sending SIGKILL") !=
        std::string::npos);
  b.group.cancel_stop();
  b.io.restart();
  b.io.run_for(100ms);
  CHECK_FALSE(b.unkillable);
}

TEST_CASE("worker group: workers still there after SIGKILL are given up on, named",
          "[worker_group]") {
  Bench b;
  b.spawner.on_signal = [&](size_t index, int sig) {
    if (index == 0 && sig == SIGKILL) b.spawner.exit(0, ExitStatus{0, SIGKILL});
  };
  b.group.reset(2);
  b.start(0);
  b.start(1);  // state D: nothing ends it
  b.stop(SIGINT);
  REQUIRE(b.run_until([&] { return b.unkillable.has_value(); }));
  REQUIRE(b.unkillable->size() == 1);
  const auto& gone = b.unkillable->front();
  CHECK(gone.index == 1);
  CHECK(gone.pid == 1001);
  REQUIRE(gone.status);
  CHECK(gone.status->state == 'D');
  CHECK(b.group.running_count() == 0);
  CHECK_FALSE(b.group.running(1));
  // Given up on, not exited: no exit is reported for it, even if it ends later.
  CHECK(b.exits.size() == 1);
  b.spawner.exit(1, ExitStatus{0, SIGKILL});
  CHECK(b.exits.size() == 1);
}

TEST_CASE("worker group: a cancelled stop sends no SIGKILL", "[worker_group]") {
  Bench b;
  b.spawner.on_signal = [](size_t, int) {};
  b.group.reset(1);
  b.start(0);
  b.stop(SIGTERM);
  b.group.cancel_stop();
  b.io.restart();
  b.io.run_for(200ms);
  CHECK(b.sent(0, SIGTERM));
  CHECK_FALSE(b.sent(0, SIGKILL));
  CHECK_FALSE(b.unkillable);
}

TEST_CASE("worker group: release forgets every worker that was started", "[worker_group]") {
  Bench b;
  b.group.reset(3);
  b.start(0);
  b.start(2);
  b.spawner.exit(0, ExitStatus{0, 0});
  b.group.release(0);
  CHECK(b.spawner.workers[0].released);
  CHECK_FALSE(b.spawner.workers[1].released);
  b.group.release_all();
  CHECK(b.spawner.workers[1].released);  // slot 2's worker
}
