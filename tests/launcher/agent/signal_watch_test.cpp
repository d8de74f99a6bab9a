// SignalWatch (signal_watch.hpp): the signals handled arrive on the loop, one after another,
// until stopped; a signal ignored at start stays ignored.
#include "launcher/agent/signal_watch.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <vector>

#include "tests/support/io_loop.hpp"

using namespace ddp::launcher;
using ddp::test::run_for;
using ddp::test::run_until;
using namespace std::chrono_literals;

TEST_CASE("handled signals arrive on the loop until the watch stops") {
  boost::asio::io_context io;
  SignalWatch watch(io);
  std::vector<int> got;
  watch.start({SIGUSR2}, [&](int sig) { got.push_back(sig); });
  ::raise(SIGUSR2);
  REQUIRE(run_until(
      io, [&] { return got.size() == 1; }, 2s));
  ::raise(SIGUSR2);  // re-armed after the first
  REQUIRE(run_until(
      io, [&] { return got.size() == 2; }, 2s));
  CHECK(got == std::vector<int>{SIGUSR2, SIGUSR2});
  watch.stop();
  run_for(io, 20ms);
}

TEST_CASE("a signal ignored when the watch starts stays ignored") {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction before {};
  ::sigaction(SIGUSR1, &ignore, &before);
  CHECK(ignored_now(SIGUSR1));
  {
    boost::asio::io_context io;
    SignalWatch watch(io);
    std::vector<int> got;
    watch.start({SIGUSR1}, [&](int sig) { got.push_back(sig); });
    ::raise(SIGUSR1);  // ignored: the process goes on, nothing arrives
    run_for(io, 50ms);
    CHECK(got.empty());
    watch.stop();
  }
  ::sigaction(SIGUSR1, &before, nullptr);
}
