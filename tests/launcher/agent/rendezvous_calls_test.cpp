// RendezvousCalls (rendezvous_calls.hpp): the agent's blocking calls on the rendezvous run off
// the loop, which goes on serving meanwhile, and their results arrive on the loop.
#include "launcher/agent/rendezvous_calls.hpp"

#include <atomic>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <thread>

#include "tests/launcher/agent/fake_workers.hpp"
#include "tests/support/io_loop.hpp"

using namespace ddp::launcher;
using ddp::launcher::testing::FakeRendezvous;
using ddp::test::run_until;
using namespace std::chrono_literals;

TEST_CASE("a round is joined off the loop, which serves other work until it is done") {
  boost::asio::io_context io;
  FakeRendezvous rendezvous(2);
  rendezvous.block_until_shutdown = true;
  RendezvousCalls calls(io, rendezvous);
  const auto loop = std::this_thread::get_id();
  std::optional<std::thread::id> called_on;
  std::string error;
  calls.join([&](const ddp::rendezvous::RendezvousInfo&, JobConnections) { called_on = loop; },
             [&](const RendezvousCalls::RoundError& failed) {
               called_on = std::this_thread::get_id();
               error = failed.message;
             });
  bool served = false;
  boost::asio::post(io, [&] { served = true; });
  REQUIRE(run_until(
      io, [&] { return served; }, 2s));
  CHECK_FALSE(called_on);  // the round still waits
  rendezvous.shutdown();   // ends it: RendezvousClosed
  REQUIRE(run_until(
      io, [&] { return called_on.has_value(); }, 5s));
  CHECK(*called_on == loop);
  CHECK(error.find("closed") != std::string::npos);
}

TEST_CASE("a round's info and the job's connections arrive on the loop") {
  boost::asio::io_context io;
  FakeRendezvous rendezvous(3);
  RendezvousCalls calls(io, rendezvous);
  std::optional<ddp::rendezvous::RendezvousInfo> got;
  calls.join([&](const ddp::rendezvous::RendezvousInfo& info, JobConnections) { got = info; },
             [](const RendezvousCalls::RoundError&) {});
  REQUIRE(run_until(
      io, [&] { return got.has_value(); }, 5s));
  CHECK(got->world_size == 3);
  CHECK(got->master_port == 29999);
}

TEST_CASE("the restart check answers on the loop, and a failed check is no blocker") {
  boost::asio::io_context io;
  FakeRendezvous rendezvous(1);
  rendezvous.blocker = "node 1 finished";
  RendezvousCalls calls(io, rendezvous);
  std::optional<std::string> answer;
  calls.ask_restart_blocker([&](const std::string& blocker) { answer = blocker; });
  REQUIRE(run_until(
      io, [&] { return answer.has_value(); }, 5s));
  CHECK(*answer == "node 1 finished");

  rendezvous.on_restart_blocker = [] { throw std::runtime_error("store gone"); };
  answer.reset();
  calls.ask_restart_blocker([&](const std::string& blocker) { answer = blocker; });
  REQUIRE(run_until(
      io, [&] { return answer.has_value(); }, 5s));
  CHECK(answer->empty());
}

TEST_CASE("membership changes arrive on the loop until unwatched") {
  boost::asio::io_context io;
  FakeRendezvous rendezvous(1);
  RendezvousCalls calls(io, rendezvous);
  std::atomic<int> changes{0};
  calls.watch([&](ddp::rendezvous::MembershipChange) { ++changes; });
  std::thread other([&] { rendezvous.change(ddp::rendezvous::MembershipChange::kNodeLost); });
  other.join();
  CHECK(changes == 0);  // posted, not called on the handler's thread
  REQUIRE(run_until(
      io, [&] { return changes == 1; }, 2s));
  calls.unwatch();
  rendezvous.change(ddp::rendezvous::MembershipChange::kNodeLost);
  ddp::test::run_for(io, 50ms);
  CHECK(changes == 1);
}

TEST_CASE(
    "leaving: the exit barrier after success, closing after a failure, nothing when the "
    "store is gone") {
  boost::asio::io_context io;
  FakeRendezvous rendezvous(1);
  RendezvousCalls calls(io, rendezvous);
  bool left = false;
  RendezvousCalls::Leaving failed;
  calls.leave(
      std::move(failed), [](const ddp::rendezvous::FailureRecord&) {}, [&] { left = true; });
  REQUIRE(run_until(
      io, [&] { return left; }, 5s));
  CHECK(rendezvous.after_failure);

  FakeRendezvous gone(1);
  RendezvousCalls calls_gone(io, gone);
  left = false;
  RendezvousCalls::Leaving nothing;
  nothing.succeeded = true;
  nothing.store_gone = true;
  calls_gone.leave(
      std::move(nothing), [](const ddp::rendezvous::FailureRecord&) {}, [&] { left = true; });
  REQUIRE(run_until(
      io, [&] { return left; }, 5s));
  CHECK_FALSE(gone.shut_down);
}
