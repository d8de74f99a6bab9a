// AttemptFailures (attempt_failures.hpp): this node's failures of one attempt, the attempt's
// one "failure" event, the root cause, and the window in which a loss claim takes the root
// failure for the loss's doing.
#include "launcher/agent/attempt_failures.hpp"

#include <catch2/catch.hpp>

#include "tests/launcher/agent/captures.hpp"
#include "tests/support/io_loop.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::LoggedLines;
using ddp::launcher::testing::RecordedEvents;
using ddp::test::run_for;
using ddp::test::run_until;
using namespace std::chrono_literals;

namespace {

WorkerFailure failure_of(int rank, int exit_code) {
  WorkerFailure f;
  f.rank = rank;
  f.status = ExitStatus{exit_code, 0};
  return f;
}

}  // namespace

TEST_CASE("an attempt records one failure event, whatever fails after") {
  boost::asio::io_context io;
  RecordedEvents events;
  AttemptFailures failures(io, events.log);
  failures.note("exit", 1, 3);
  failures.note("signal", 2, 3);
  const auto noted = events.named("failure");
  REQUIRE(noted.size() == 1);
  CHECK(noted[0]["kind"] == "exit");
  CHECK(noted[0]["rank"] == 1);
  CHECK(noted[0]["restart_count"] == 3);
  failures.reset();
  failures.note("hang", 0, 4);
  CHECK(events.named("failure").size() == 2);
}

TEST_CASE("the root cause is the failure marked, not the last one") {
  boost::asio::io_context io;
  RecordedEvents events;
  AttemptFailures failures(io, events.log);
  failures.add(failure_of(0, 7));
  failures.mark_root();
  failures.add(failure_of(1, 9));
  CHECK(failures.root().rank == 0);
  CHECK(failures.all().size() == 2);
}

TEST_CASE("a root failure that waits for a loss claim goes on when none comes") {
  boost::asio::io_context io;
  RecordedEvents events;
  AttemptFailures failures(io, events.log, 20ms);
  failures.add(failure_of(0, 7));
  failures.mark_root();
  bool expired = false;
  failures.wait_for_loss([&] { expired = true; });
  CHECK(failures.waiting_for_loss());
  REQUIRE(run_until(
      io, [&] { return expired; }, 2s));
  CHECK_FALSE(failures.waiting_for_loss());
  CHECK_FALSE(failures.absorb_loss());
  CHECK(failures.all().size() == 1);
}

TEST_CASE("a loss claimed within the window takes the window's failures for its doing") {
  boost::asio::io_context io;
  RecordedEvents events;
  LoggedLines lines;
  AttemptFailures failures(io, events.log, 50ms);
  failures.add(failure_of(0, 7));
  failures.mark_root();
  bool expired = false;
  failures.wait_for_loss([&] { expired = true; });
  failures.add(failure_of(1, 9));  // the second failure of the window
  CHECK(failures.absorb_loss());
  CHECK(failures.all().empty());
  const auto from_loss = events.named("failure_from_loss");
  REQUIRE(from_loss.size() == 1);
  CHECK(from_loss[0]["rank"] == 0);
  CHECK(lines.logged("just before another node was found lost"));
  run_for(io, 100ms);
  CHECK_FALSE(expired);
}

TEST_CASE("a closed window calls nothing back") {
  boost::asio::io_context io;
  RecordedEvents events;
  AttemptFailures failures(io, events.log, 10ms);
  failures.add(failure_of(0, 7));
  failures.mark_root();
  bool expired = false;
  failures.wait_for_loss([&] { expired = true; });
  failures.close_window();
  run_for(io, 60ms);
  CHECK_FALSE(expired);
  CHECK(failures.all().size() == 1);
}
