// Departure (departure.hpp) on its own, over a fake rendezvous: a success leaves through the
// exit barrier and a failure without it, both off the loop (which serves other work while a
// barrier waits); the finish event carries the exit status and the restarts spent; a failure
// record heard while leaving after a success becomes the exit status (unless the job goes on
// without this node), a signal while leaving makes it 128+N, and the summary goes to the
// notice descriptor.
#include "launcher/agent/departure.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <csignal>
#include <string>

#include "tests/launcher/agent/captures.hpp"
#include "tests/launcher/agent/failure_elsewhere.hpp"
#include "tests/launcher/agent/fake_workers.hpp"
#include "tests/support/io_loop.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::failure_elsewhere;
using ddp::launcher::testing::FakeRendezvous;
using ddp::launcher::testing::FakeSpawner;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::RecordedEvents;
using ddp::test::run_until;
using namespace std::chrono_literals;

namespace {

constexpr auto kGuard = 10s;

// A departure with the collaborators it reads, and the loop it leaves from.
struct Bench : RecordedEvents, LoggedLines {
  // Leaves with status after restarts restarts; true once it left (on_left, the finish event
  // and the loop's stop come in one handler). Not io.stopped(): a loop out of work is stopped
  // too, before the leaving thread posts its end.
  bool leave(int status, int restarts) {
    departure.leave(status, restarts, [this] { left = true; });
    return run_until(
        io, [this] { return left; }, kGuard);
  }
  [[nodiscard]] nlohmann::json finish() const {
    const auto finished = named("finish");
    return finished.size() == 1 ? finished[0] : nlohmann::json();
  }
  ~Bench() { calls.join_threads(); }

  boost::asio::io_context io;
  FakeSpawner spawner{io};
  WorkerGroup group{io, spawner, WorkerGroupOptions{}};
  InPlaceRecovery recovery{io, false, 1s, log, group, InPlaceRecovery::Hooks{}};
  FakeRendezvous rendezvous{1};
  RendezvousCalls calls{io, rendezvous};
  JobWatch job{io, "10.0.0.1", 15s, log, JobWatch::Hooks{}};
  SignalWatch signals{io};
  AgentOptions options;
  Departure departure{io, options, calls, job, recovery, signals, log};
  bool left = false;
};

}  // namespace

TEST_CASE("departure: a success leaves through the exit barrier, finish has the status and count",
          "[departure]") {
  Bench b;
  REQUIRE(b.leave(0, 2));
  CHECK(b.left);
  CHECK(b.rendezvous.shut_down);
  CHECK_FALSE(b.rendezvous.after_failure);  // the barrier: shutdown(), not after a failure
  CHECK(b.departure.exit_status() == 0);
  CHECK(b.finish()["exit_code"] == 0);
  CHECK(b.finish()["restarts_spent"] == 2);
}

TEST_CASE("departure: a failure leaves without the exit barrier, its status in the finish event",
          "[departure]") {
  Bench b;
  REQUIRE(b.leave(3, 1));
  CHECK(b.rendezvous.after_failure);
  CHECK(b.departure.exit_status() == 3);
  CHECK(b.finish()["exit_code"] == 3);
  CHECK(b.finish()["restarts_spent"] == 1);
}

TEST_CASE("departure: the loop serves other work while the exit barrier waits", "[departure]") {
  // The store host's barrier waits for the other nodes; signals and exits must still be
  // served meanwhile.
  Bench b;
  b.rendezvous.block_exit_until_interrupt = true;
  b.departure.leave(0, 0, [&] { b.left = true; });
  bool served = false;
  boost::asio::post(b.io, [&] { served = true; });
  REQUIRE(run_until(
      b.io, [&] { return served && b.rendezvous.shut_down; }, kGuard));
  CHECK_FALSE(b.left);
  b.rendezvous.interrupt();  // what a signal while leaving does
  REQUIRE(run_until(
      b.io, [&] { return b.left; }, kGuard));
  CHECK(b.left);
}

TEST_CASE("departure: a failure heard while leaving after a success is the job's exit status",
          "[departure]") {
  SECTION("final: the exit says the job failed elsewhere") {
    Bench b;
    b.departure.leave(0, 0, [&] { b.left = true; });
    b.departure.heard_failure(failure_elsewhere(0, 5), /*final=*/true);
    REQUIRE(run_until(
        b.io, [&] { return b.left; }, kGuard));
    CHECK(b.departure.exit_status() == 5);
    CHECK(b.finish()["exit_code"] == 5);
  }
  SECTION("not final (an elastic job with a restart left goes on without this node): 0") {
    Bench b;
    b.departure.leave(0, 0, [&] { b.left = true; });
    b.departure.heard_failure(failure_elsewhere(0, 5), /*final=*/false);
    REQUIRE(run_until(
        b.io, [&] { return b.left; }, kGuard));
    CHECK(b.departure.exit_status() == 0);
  }
  SECTION("this node failed first: its own status stays") {
    Bench b;
    b.departure.leave(3, 0, [&] { b.left = true; });
    b.departure.heard_failure(failure_elsewhere(0, 5), /*final=*/true);
    REQUIRE(run_until(
        b.io, [&] { return b.left; }, kGuard));
    CHECK(b.departure.exit_status() == 3);
  }
}

TEST_CASE("departure: a signal while leaving makes the exit 128+N", "[departure]") {
  Bench b;
  b.departure.leave(0, 0, [&] { b.left = true; });
  b.departure.signalled(SIGTERM);
  REQUIRE(run_until(
      b.io, [&] { return b.left; }, kGuard));
  CHECK(b.departure.exit_status() == 128 + SIGTERM);
  CHECK(b.finish()["exit_code"] == 128 + SIGTERM);
}

TEST_CASE("departure: the summary goes to the notice descriptor when there is no console",
          "[departure]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  Bench b;
  b.options.notice_fd = fds[1];
  b.departure.emit("the job failed: rank 3 exited with 5\n");
  ::close(fds[1]);
  std::string text(256, '\0');
  const ssize_t n = ::read(fds[0], text.data(), text.size());
  ::close(fds[0]);
  REQUIRE(n > 0);
  text.resize(static_cast<size_t>(n));
  CHECK(text == "the job failed: rank 3 exited with 5\n");
}
