// FileTimerServer, in process: torch's FileTimerClient requests through a real FIFO; timers
// acquired, replaced, released, cleared and expired. These timers ask for signal 0, which
// (as in torch) reports the expiry without a kill, so no process is harmed; the kills are in
// file_timer_process_test.cpp.
#include "launcher/hang/file_timer_server.hpp"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/launcher/hang/fifo_test_support.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::launcher;
using ddp::test::run_for;
using ddp::test::run_until;
using ddp::test::TempDir;
using ddp::test::timer_release;
using ddp::test::timer_request;
using ddp::test::wall_now;
using ddp::test::write_fifo;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  Fixture()
      : server(io, dir.path() / "timer", [this](const ExpiredTimer& timer) {
          expired.push_back(timer);
          expired_at.push_back(wall_now());
        }) {
    server.set_warning_sink([this](const std::string& message) { warnings.push_back(message); });
  }
  void send(const std::string& line) { REQUIRE(write_fifo(server.path(), line)); }
  // Runs the loop until the server has read n requests in all.
  void read_requests(uint64_t n) {
    REQUIRE(run_until(
        io, [&] { return server.requests() >= n; }, 10s));
  }
  bool wait_expired(size_t n, std::chrono::milliseconds timeout = 10s) {
    return run_until(
        io, [&] { return expired.size() >= n; }, timeout);
  }

  TempDir dir;
  boost::asio::io_context io;
  std::vector<ExpiredTimer> expired;
  std::vector<double> expired_at;
  std::vector<std::string> warnings;
  FileTimerServer server;
};

// Pids no live process has (above any pid_max), for timers that never signal anyone.
constexpr int kPidA = 2000000001;
constexpr int kPidB = 2000000002;

}  // namespace

TEST_CASE("FileTimerServer reports an expired timer with its pid and scope, after its deadline",
          "[file_timer_server]") {
  Fixture f;
  double deadline = wall_now() + 0.3;
  f.send(timer_request(kPidA, "step", deadline, 0));
  REQUIRE(f.wait_expired(1));
  CHECK(f.expired[0].pid == kPidA);
  CHECK(f.expired[0].scope == "step");
  CHECK(f.expired[0].expiration_time == deadline);
  CHECK(f.expired[0].signal == 0);  // none asked: no kill
  CHECK(f.expired[0].kill_error == 0);
  CHECK(f.expired_at[0] >= deadline);
  CHECK(f.expired_at[0] < deadline + 2.0);  // 100 ms, with slack for a busy machine
  CHECK(f.server.active_timers() == 0);
  CHECK(f.server.requests() == 1);
  CHECK(f.warnings.empty());
}

TEST_CASE("FileTimerServer expires the earliest deadline first, each once", "[file_timer_server]") {
  Fixture f;
  double now = wall_now();
  f.send(timer_request(kPidB, "late", now + 0.6, 0));
  f.send(timer_request(kPidA, "early", now + 0.2, 0));
  REQUIRE(f.wait_expired(2));
  run_for(f.io, 100ms);
  REQUIRE(f.expired.size() == 2);
  CHECK(f.expired[0].pid == kPidA);
  CHECK(f.expired[0].scope == "early");
  CHECK(f.expired[1].pid == kPidB);
  CHECK(f.expired[1].scope == "late");
  CHECK(f.expired_at[1] >= now + 0.6);
}

TEST_CASE("FileTimerServer: a released timer never expires", "[file_timer_server]") {
  Fixture f;
  f.send(timer_request(kPidA, "step", wall_now() + 0.3, 0));
  f.send(timer_release(kPidA, "step"));
  f.send(timer_release(kPidA, "never_acquired"));  // harmless
  f.read_requests(3);
  CHECK(f.server.active_timers() == 0);
  run_for(f.io, 600ms);
  CHECK(f.expired.empty());
  CHECK(f.warnings.empty());
}

TEST_CASE("FileTimerServer: acquiring a held scope again replaces its deadline",
          "[file_timer_server]") {
  Fixture f;
  double now = wall_now();
  f.send(timer_request(kPidA, "step", now + 0.2, 0));
  f.send(timer_request(kPidA, "step", now + 0.9, 0));
  f.read_requests(2);
  CHECK(f.server.active_timers() == 1);
  run_for(f.io, 500ms);
  CHECK(f.expired.empty());
  REQUIRE(f.wait_expired(1));
  CHECK(f.expired[0].expiration_time == now + 0.9);
  CHECK(f.expired_at[0] >= now + 0.9);

  // And an earlier deadline replaces a later one.
  now = wall_now();
  f.send(timer_request(kPidA, "step", now + 30, 0));
  f.send(timer_request(kPidA, "step", now + 0.2, 0));
  REQUIRE(f.wait_expired(2, 5s));
  CHECK(f.expired[1].expiration_time == now + 0.2);
}

TEST_CASE("FileTimerServer: clear(pid) forgets one worker's timers, clear_all() everyone's",
          "[file_timer_server]") {
  Fixture f;
  double now = wall_now();
  f.send(timer_request(kPidA, "step", now + 0.3, 0));
  f.send(timer_request(kPidA, "save", now + 0.3, 0));
  f.send(timer_request(kPidB, "step", now + 0.4, 0));
  f.read_requests(3);
  CHECK(f.server.active_timers() == 3);
  f.server.clear(kPidA);
  CHECK(f.server.active_timers() == 1);
  REQUIRE(f.wait_expired(1));
  run_for(f.io, 200ms);
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].pid == kPidB);

  f.send(timer_request(kPidA, "step", wall_now() + 0.2, 0));
  f.send(timer_request(kPidB, "step", wall_now() + 0.2, 0));
  f.read_requests(5);
  f.server.clear_all();
  CHECK(f.server.active_timers() == 0);
  run_for(f.io, 400ms);
  CHECK(f.expired.size() == 1);
}

TEST_CASE("FileTimerServer: a pid's timers expire together, the earliest scope is reported",
          "[file_timer_server]") {
  Fixture f;
  double now = wall_now();
  f.send(timer_request(kPidA, "outer", now + 0.25, 0));
  f.send(timer_request(kPidA, "inner", now + 0.2, 0));
  f.send(timer_request(kPidA, "later", now + 60, 0));  // not expired, but forgotten with its pid
  REQUIRE(f.wait_expired(1));
  run_for(f.io, 200ms);
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].scope == "inner");
  CHECK(f.server.active_timers() == 0);
}

TEST_CASE("FileTimerServer: a deadline already past expires at once", "[file_timer_server]") {
  Fixture f;
  f.send(timer_request(kPidA, "step", wall_now() - 5, 0));
  REQUIRE(f.wait_expired(1, 2s));
  CHECK(f.expired[0].scope == "step");
}

TEST_CASE("FileTimerServer ignores bad requests, warns naming them, and keeps serving",
          "[file_timer_server]") {
  Fixture f;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"not json at all", "not JSON"},
      {"[1, 2]", "not a JSON object"},
      {R"({"version": 2, "pid": 5, "scope_id": "s", "expiration_time": 1, "signal": 9})",
       "unknown version 2"},
      {R"({"version": 1, "pid": "5", "scope_id": "s", "expiration_time": 1, "signal": 9})",
       "\"pid\" missing or not an integer"},
      {R"({"version": 1, "pid": 0, "scope_id": "s", "expiration_time": 1, "signal": 9})",
       "\"pid\" = 0 out of range"},
      {R"({"version": 1, "pid": -1, "scope_id": "s", "expiration_time": 1, "signal": 9})",
       "\"pid\" = -1 out of range"},
      {R"({"version": 1, "pid": 18446744073709551615, "scope_id": "s", "expiration_time": 1,
           "signal": 9})",
       "\"pid\" out of range"},
      {R"({"version": 1, "pid": 5, "scope_id": 7, "expiration_time": 1, "signal": 9})",
       "\"scope_id\" missing or not a string"},
      {R"({"version": 1, "pid": 5, "scope_id": "s", "expiration_time": "soon", "signal": 9})",
       "\"expiration_time\" missing or not a number"},
      {R"({"version": 1, "pid": 5, "scope_id": "s", "expiration_time": 1})",
       "\"signal\" missing or not an integer"},
      {R"({"version": 1, "pid": 5, "scope_id": "s", "expiration_time": 1, "signal": 999})",
       "\"signal\" = 999 out of range"},
  };
  // One request per write, as clients do.
  for (const auto& entry : bad) {
    std::string line = entry.first;
    std::replace(line.begin(), line.end(), '\n', ' ');
    f.send(line + "\n");
  }
  f.send(timer_request(kPidA, "good", wall_now() + 0.1, 0));
  REQUIRE(f.wait_expired(1));
  CHECK(f.expired[0].scope == "good");
  CHECK(f.server.bad_requests() == bad.size());
  CHECK(f.server.requests() == bad.size() + 1);
  REQUIRE(f.warnings.size() == 10);  // the first 10 bad ones; then one per 100
  for (size_t i = 0; i < f.warnings.size(); ++i) {
    INFO(f.warnings[i]);
    CHECK_THAT(f.warnings[i], Catch::Contains("ignored a bad file-timer request") &&
                                  Catch::Contains(bad[i].second) &&
                                  Catch::Contains(f.server.path().string()));
  }
  CHECK_THAT(f.warnings[0], Catch::Contains("'not json at all'"));
}

TEST_CASE("FileTimerServer quotes a huge bad request cut short", "[file_timer_server]") {
  Fixture f;
  f.send(std::string(3000, '{') + "\n");
  f.read_requests(1);
  REQUIRE(f.warnings.size() == 1);
  CHECK(f.warnings[0].size() < 400);
  CHECK_THAT(f.warnings[0], Catch::Contains("{{{...'"));
}

TEST_CASE("FileTimerServer accepts torch's variants: no version, integer times, extra keys",
          "[file_timer_server]") {
  Fixture f;
  auto deadline = static_cast<long long>(wall_now()) - 1;
  f.send(R"({"pid": )" + std::to_string(kPidA) + R"(, "scope_id": "a", "expiration_time": )" +
         std::to_string(deadline) + R"(, "signal": 0, "extra": [1]})" + "\n");
  REQUIRE(f.wait_expired(1, 2s));
  CHECK(f.expired[0].scope == "a");
  CHECK(f.expired[0].expiration_time == static_cast<double>(deadline));
  CHECK(f.server.bad_requests() == 0);
}

TEST_CASE("FileTimerServer serves only the pids its filter accepts", "[file_timer_server]") {
  Fixture f;
  f.server.set_pid_filter([](int pid) { return pid == kPidB; });
  f.send(timer_request(kPidA, "step", wall_now() - 1, 0));
  f.send(timer_request(kPidB, "step", wall_now() - 1, 0));
  REQUIRE(f.wait_expired(1, 2s));
  run_for(f.io, 100ms);
  REQUIRE(f.expired.size() == 1);
  CHECK(f.expired[0].pid == kPidB);
  CHECK(f.server.bad_requests() == 1);
  REQUIRE(f.warnings.size() == 1);
  CHECK_THAT(f.warnings[0], Catch::Contains("is not one of this agent's workers"));
}

TEST_CASE(
    "FileTimerServer: the expiry handler may clear timers, and destroying the server "
    "cancels what is pending",
    "[file_timer_server]") {
  TempDir dir;
  boost::asio::io_context io;
  std::vector<ExpiredTimer> expired;
  std::unique_ptr<FileTimerServer> server;
  server =
      std::make_unique<FileTimerServer>(io, dir.path() / "timer", [&](const ExpiredTimer& timer) {
        expired.push_back(timer);
        server->clear_all();
      });
  double now = wall_now();
  REQUIRE(write_fifo(server->path(), timer_request(kPidA, "a", now + 0.2, 0)));
  REQUIRE(write_fifo(server->path(), timer_request(kPidB, "b", now + 0.2, 0)));
  REQUIRE(write_fifo(server->path(), timer_request(kPidB + 1, "c", now + 0.5, 0)));
  REQUIRE(run_until(
      io, [&] { return !expired.empty(); }, 10s));
  run_for(io, 600ms);
  CHECK(expired.size() == 2);  // a and b together; c was cleared by the handler
  REQUIRE(write_fifo(server->path(), timer_request(kPidA, "d", wall_now() + 0.2, 0)));
  REQUIRE(run_until(
      io, [&] { return server->active_timers() == 1; }, 10s));
  auto path = server->path();
  server.reset();
  CHECK_FALSE(std::filesystem::exists(path));
  run_for(io, 400ms);
  CHECK(expired.size() == 2);
}
