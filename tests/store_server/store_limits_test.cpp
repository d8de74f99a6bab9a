// The store server's limits without sockets (docs/security.md ("Limits")): how ServerLimits are
// resolved from options, DDPLAUNCH_STORE_* and defaults; connections per address; the bytes
// and keys ServerState holds, counted through every command that changes them, and writes
// refused before they run; per-request back-pressure and the slow-loris clock of a session.
#include <catch2/catch.hpp>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "rendezvous/store/server/frame_deadlines.hpp"
#include "rendezvous/store/server/input_budget.hpp"
#include "rendezvous/store/server/peer_connections.hpp"
#include "rendezvous/store/server/server_limits.hpp"
#include "rendezvous/store/server/server_state.hpp"
#include "rendezvous/store/server/store_session.hpp"
#include "rendezvous/store/wire_codec.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/support/stderr_capture.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;
namespace wire = ddp::rendezvous::wire;

namespace {

class FakeTransport final : public ByteTransport {
 public:
  void write(std::string_view bytes) override { queued += bytes; }
  void flush() override {
    if (socket_full) return;
    sent += queued.size();
    queued.clear();
  }
  [[nodiscard]] size_t queued_bytes() const override { return queued.size(); }
  void set_reading(bool on) override { reading.push_back(on); }
  void close() override { ++closes; }

  size_t sent = 0;
  std::string queued;
  bool socket_full = false;
  std::vector<bool> reading;
  int closes = 0;
};

class Channel final : public ReplyChannel {
 public:
  void send(std::string_view bytes) override { out += bytes; }
  [[nodiscard]] const std::string& peer() const override { return name; }
  std::string out;
  std::string name = "10.0.0.5:1234";
};

wire::Request req(wire::Command c, std::vector<std::string> keys = {},
                  std::vector<std::string> values = {}, int64_t delta = 0) {
  wire::Request r;
  r.command = c;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.delta = delta;
  return r;
}

std::string frame(const wire::Request& r) {
  return wire::encode_request(r, wire::Dialect::kV2);
}

std::string handshake() {
  wire::Request r;
  r.command = wire::Command::kValidate;
  r.nonce = wire::kValidationMagic;
  return frame(r);
}

}  // namespace

TEST_CASE("limits: 0 takes the variable, else the default, code wins, a bad value is named",
          "[limits]") {
  const ddp::test::ScopedEnv a(ddp::env::kStoreMaxConnsPerPeer, nullptr);
  const ddp::test::ScopedEnv b(ddp::env::kStoreMaxBytes, "4096");
  const ddp::test::ScopedEnv c(ddp::env::kStoreMaxKeys, nullptr);
  const ddp::test::ScopedEnv d(ddp::env::kStoreFrameTimeoutMs, "250");
  ServerLimits given;
  given.max_keys = 7;
  const ServerLimits l = resolve_limits(given);
  CHECK(l.max_conns_per_peer == kDefaultMaxConnsPerPeer);
  CHECK(l.max_bytes == 4096);
  CHECK(l.max_keys == 7);
  CHECK(l.frame_timeout == 250ms);
  const ddp::test::ScopedEnv bad(ddp::env::kStoreMaxConnsPerPeer, "many");
  CHECK_THROWS_AS(resolve_limits({}), ddp::ConfigError);
  CHECK_THROWS_WITH(resolve_limits({}), Catch::Contains("DDPLAUNCH_STORE_MAX_CONNS_PER_PEER") &&
                                            Catch::Contains("many"));
  const ddp::test::ScopedEnv zero(ddp::env::kStoreMaxConnsPerPeer, "0");
  CHECK_THROWS_AS(resolve_limits({}), ddp::ConfigError);
}

TEST_CASE("limits: connections per address, IPv4 and IPv6, one line per streak", "[limits]") {
  CHECK(peer_address("10.0.0.5:41234") == "10.0.0.5");
  CHECK(peer_address("[fd00::5]:41234") == "fd00::5");
  ddp::test::StderrCapture log;
  PeerConnections peers(2);
  CHECK(peers.admit("10.0.0.5:1"));
  CHECK(peers.admit("10.0.0.5:2"));
  CHECK(peers.admit("[fd00::5]:1"));
  CHECK_FALSE(peers.admit("10.0.0.5:3"));
  CHECK_FALSE(peers.admit("10.0.0.5:4"));
  CHECK(peers.open_from("10.0.0.5:9") == 2);
  peers.release("10.0.0.5:1");
  CHECK(peers.admit("10.0.0.5:5"));
  const auto lines = log.wait_lines(2);
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Catch::Contains("refusing connections from 10.0.0.5: 2 connections") &&
                           Catch::Contains("DDPLAUNCH_STORE_MAX_CONNS_PER_PEER"));
  CHECK_THAT(lines[1], Catch::Contains("10.0.0.5 again after refusing 2"));
}

TEST_CASE("limits: held bytes follow every command and return to zero", "[limits]") {
  ServerState state;
  auto conn = std::make_shared<Channel>();
  auto run = [&](wire::Request r) { state.execute(conn, std::move(r)); };
  run(req(wire::Command::kSet, {"k"}, {"12345"}));
  CHECK(state.held_bytes() == 6);
  run(req(wire::Command::kSet, {"k"}, {"1"}));
  CHECK(state.held_bytes() == 2);
  run(req(wire::Command::kAppend, {"k"}, {"23"}));
  CHECK(state.held_bytes() == 4);
  run(req(wire::Command::kAdd, {"k"}, {}, 1000));  // "123" + 1000 = "1123"
  CHECK(state.held_bytes() == 5);
  run(req(wire::Command::kCompareSet, {"k"}, {"1123", "x"}));
  CHECK(state.held_bytes() == 2);
  run(req(wire::Command::kMultiSet, {"a", "b"}, {"aa", "bbb"}));
  CHECK(state.held_bytes() == 2 + 3 + 4);
  run(req(wire::Command::kDeleteKey, {"a"}));
  run(req(wire::Command::kDeleteKey, {"b"}));
  run(req(wire::Command::kDeleteKey, {"k"}));
  CHECK(state.held_bytes() == 0);
  // ON_CLOSE records count while held; EPHEMERAL keys while they exist.
  run(req(wire::Command::kOnClose, {"gone"}, {"1"}));
  run(req(wire::Command::kEphemeral, {"alive"}, {"1"}));
  CHECK(state.held_bytes() == 5 + 6);
  state.disconnect(*conn);  // ephemeral deleted, ON_CLOSE carried out: "gone" = "1" stored
  CHECK(state.held_bytes() == 5);
  run(req(wire::Command::kDeleteKey, {"gone"}));
  run(req(wire::Command::kOnClose, {"x"}, {"1"}));
  run(req(wire::Command::kClearCloseActions));
  CHECK(state.held_bytes() == 0);
}

TEST_CASE("limits: a write past the bytes or keys held is refused before it runs", "[limits]") {
  ServerState state(StoreQuota(100, 3));
  auto conn = std::make_shared<Channel>();
  auto run = [&](wire::Request r) { state.execute(conn, std::move(r)); };
  run(req(wire::Command::kSet, {"a"}, {std::string(49, 'a')}));  // 50 bytes
  CHECK_THROWS_WITH(run(req(wire::Command::kSet, {"b"}, {std::string(50, 'b')})),
                    Catch::Contains("SET of 'b': the store would hold 101 bytes, over its limit "
                                    "of 100 (limit: ddpstore --max-bytes / "
                                    "DDPLAUNCH_STORE_MAX_BYTES)"));
  CHECK_THROWS_AS(run(req(wire::Command::kAppend, {"a"}, {std::string(51, 'a')})),
                  StoreLimitExceeded);
  CHECK_THROWS_AS(run(req(wire::Command::kOnClose, {"o"}, {std::string(60, 'o')})),
                  StoreLimitExceeded);
  run(req(wire::Command::kSet, {"a"}, {std::string(99, 'a')}));  // a replacement that fits
  CHECK(state.held_bytes() == 100);
  run(req(wire::Command::kSet, {"a"}, {"1"}));
  CHECK_THROWS_WITH(run(req(wire::Command::kMultiSet, {"b", "c", "d"}, {"1", "2", "3"})),
                    Catch::Contains("the store would hold 4 keys, over its limit of 3") &&
                        Catch::Contains("DDPLAUNCH_STORE_MAX_KEYS"));
  CHECK(state.num_keys() == 1);                 // nothing of the refused MULTI_SET was stored
  run(req(wire::Command::kAdd, {"a"}, {}, 1));  // room for the longest int64 is checked: fits
  CHECK(state.num_keys() == 1);
  run(req(wire::Command::kDeleteKey, {"a"}));
  CHECK(state.held_bytes() == 0);
  // Reads, waits and deletes are never refused.
  run(req(wire::Command::kGetNumKeys));
  run(req(wire::Command::kCheck, {"zz"}));
}

TEST_CASE("back-pressure is per request: one read cannot queue more than the limit", "[limits]") {
  ServerState state;
  SessionConfig config;
  FakeTransport transport;
  auto session = std::make_shared<StoreSession>("10.1.2.3:4567", state, config, transport);
  const std::string mib(size_t{1024} * 1024, 'm');
  session->received(handshake() + frame(req(wire::Command::kSet, {"m"}, {mib})));
  transport.socket_full = true;  // the client reads nothing
  std::string gets;
  for (int i = 0; i < 100; ++i) gets += frame(req(wire::Command::kGet, {"m"}));
  session->received(gets);                                          // one read asking for 100 MiB
  CHECK(transport.queued.size() == size_t{16} * (mib.size() + 8));  // stopped past 16 MiB
  REQUIRE(transport.reading == std::vector<bool>{false});
  session->read_ended(0);  // the client shuts its write side: the kept requests still run
  CHECK(transport.closes == 0);
  transport.socket_full = false;
  transport.flush();
  session->drained();  // runs the other 84, sends them as they go, then the end is handled
  CHECK(transport.sent == size_t{100} * (mib.size() + 8));
  CHECK(transport.closes == 1);
}

TEST_CASE("slow-loris: half a frame past the timeout closes, progress restarts the clock",
          "[limits]") {
  ServerState state;
  FrameDeadlines frames(100ms);
  SessionConfig config;
  config.frames = &frames;
  FakeTransport transport;
  auto session = std::make_shared<StoreSession>("10.1.2.3:4567", state, config, transport);
  auto waiter_transport = std::make_unique<FakeTransport>();
  auto waiter = std::make_shared<StoreSession>("10.1.2.4:1", state, config, *waiter_transport);
  waiter->received(handshake() + frame(req(wire::Command::kWait, {"never"})));
  CHECK(frames.size() == 0);  // a parked wait is not an incomplete frame

  const auto t0 = FrameDeadlines::Clock::now();
  const std::string set = frame(req(wire::Command::kSet, {"k"}, {"value"}));
  session->received(handshake() + set.substr(0, 5));
  CHECK(frames.size() == 1);
  CHECK(frames.sweep(t0 + 50ms) == 0);
  // The rest of that frame and half of the next: progress, so the clock starts again.
  session->received(set.substr(5) + set.substr(0, 5));
  CHECK(frames.sweep(t0 + 50ms) == 0);
  ddp::test::StderrCapture log;
  CHECK(frames.sweep(FrameDeadlines::Clock::now() + 150ms) == 1);
  CHECK(session->closed());
  CHECK_FALSE(waiter->closed());
  CHECK(frames.size() == 0);
  const auto lines = log.wait_lines(1);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains("10.1.2.3:4567") &&
                           Catch::Contains("5 bytes of a request (a frame) have waited 100 ms") &&
                           Catch::Contains("DDPLAUNCH_STORE_FRAME_TIMEOUT_MS"));
}

TEST_CASE("slow-loris: the largest frame timeout a variable accepts never expires", "[limits]") {
  // DDPLAUNCH_STORE_FRAME_TIMEOUT_MS takes up to INT64_MAX ("never"): in nanoseconds that
  // overflowed, and every half-sent frame timed out at the first sweep.
  ServerState state;
  FrameDeadlines frames(std::chrono::milliseconds(std::numeric_limits<int64_t>::max()));
  SessionConfig config;
  config.frames = &frames;
  FakeTransport transport;
  auto session = std::make_shared<StoreSession>("10.1.2.3:4567", state, config, transport);
  session->received(handshake() + frame(req(wire::Command::kSet, {"k"}, {"v"})).substr(0, 5));
  REQUIRE(frames.size() == 1);
  CHECK(frames.sweep(FrameDeadlines::Clock::now() + 1s) == 0);
  CHECK_FALSE(session->closed());
}

TEST_CASE("limits: requests still arriving on all sessions share one budget", "[limits]") {
  ServerState state;
  InputBudget input(100);
  SessionConfig config;
  config.input = &input;
  FakeTransport ta;
  FakeTransport tb;
  auto a = std::make_shared<StoreSession>("10.0.0.1:1", state, config, ta);
  auto b = std::make_shared<StoreSession>("10.0.0.2:1", state, config, tb);
  const std::string set =
      handshake() + frame(req(wire::Command::kSet, {"k"}, {std::string(200, 'v')}));
  a->received(set.substr(0, 65));  // 60 bytes of the SET held
  CHECK(input.held() == 60);
  ddp::test::StderrCapture log;
  b->received(set.substr(0, 65));  // 120 > 100: b is closed, a is not
  CHECK(b->closed());
  CHECK_FALSE(a->closed());
  CHECK(input.held() == 60);
  a->received(set.substr(65));  // the SET completes: nothing held any more
  CHECK(input.held() == 0);
  const auto lines = log.wait_lines(1);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains("10.0.0.2:1") &&
                           Catch::Contains("120 bytes of requests still arriving") &&
                           Catch::Contains("DDPLAUNCH_STORE_MAX_BYTES"));
}

TEST_CASE("limits: the keys of a parked wait count as held until it is answered", "[limits]") {
  ServerState state(StoreQuota(100, 10));
  auto a = std::make_shared<Channel>();
  auto b = std::make_shared<Channel>();
  state.execute(a, req(wire::Command::kWait, {std::string(60, 'w')}));
  CHECK(state.held_bytes() == 60);
  CHECK_THROWS_WITH(state.execute(b, req(wire::Command::kWait, {std::string(50, 'x')})),
                    Catch::Contains("parking it until its keys exist would hold 110 bytes") &&
                        Catch::Contains("DDPLAUNCH_STORE_MAX_BYTES"));
  // A wait whose keys exist is answered at once and holds nothing.
  state.execute(b, req(wire::Command::kSet, {"k"}, {"v"}));
  state.execute(b, req(wire::Command::kWait, {"k"}));
  CHECK(state.held_bytes() == 60 + 2);
  state.execute(a, req(wire::Command::kCancelWait));
  CHECK(state.held_bytes() == 2);
  state.execute(a, req(wire::Command::kWait, {"later"}));
  CHECK(state.held_bytes() == 2 + 5);
  state.execute(b, req(wire::Command::kSet, {"later"}, {"1"}));  // answers it
  CHECK(state.held_bytes() == 2 + 6);
  state.execute(a, req(wire::Command::kWait, {"gone"}));
  state.disconnect(*a);
  CHECK(state.held_bytes() == 2 + 6);
}

TEST_CASE("limits: a legacy watch holds its key until its connection closes", "[limits]") {
  ServerState state(StoreQuota(100, 10));
  auto a = std::make_shared<Channel>();
  auto b = std::make_shared<Channel>();
  state.execute(a, req(wire::Command::kWatchKey, {std::string(60, 'w')}));
  state.execute(a, req(wire::Command::kWatchKey, {std::string(60, 'w')}));  // once
  CHECK(state.held_bytes() == 60);
  CHECK_THROWS_AS(state.execute(b, req(wire::Command::kWatchKey, {std::string(50, 'x')})),
                  StoreLimitExceeded);
  state.execute(b, req(wire::Command::kWatchKey, {"k"}));
  CHECK(state.held_bytes() == 61);
  state.disconnect(*a);  // its watch (never notified) and its bytes go with it
  CHECK(state.held_bytes() == 1);
  b->out.clear();
  state.execute(a, req(wire::Command::kSet, {"k"}, {"v"}));  // b still watches k
  CHECK(b->out.size() > 1);
  CHECK(b->out[0] == static_cast<char>(wire::kWatchKeyCreated));
  state.disconnect(*b);
  state.execute(a, req(wire::Command::kDeleteKey, {"k"}));
  CHECK(state.held_bytes() == 0);
}

TEST_CASE("replies pushed to a client that does not read stop at the limit, it then closes",
          "[limits]") {
  ServerState state;
  SessionConfig config;
  FrameDeadlines frames(1000ms);
  config.frames = &frames;
  FakeTransport watcher_transport;
  FakeTransport writer_transport;
  auto watcher = std::make_shared<StoreSession>("10.1.2.3:4567", state, config, watcher_transport);
  auto writer = std::make_shared<StoreSession>("10.1.2.4:4567", state, config, writer_transport);
  // A legacy watcher (no handshake) that never reads its notifications.
  watcher->received(
      wire::encode_request(req(wire::Command::kWatchKey, {"k"}), wire::Dialect::kLegacy));
  watcher_transport.socket_full = true;
  writer->received(handshake());
  const std::string mib(size_t{1024} * 1024, 'm');
  ddp::test::StderrCapture log;
  for (int i = 0; i < 40; ++i) writer->received(frame(req(wire::Command::kSet, {"k"}, {mib})));
  // Each SET queues old + new value for the watcher: without a bound, 80 MiB by now.
  CHECK(watcher_transport.queued.size() < size_t{16} * 1024 * 1024 + 3 * mib.size());
  CHECK(writer_transport.closes == 0);
  CHECK(frames.sweep(FrameDeadlines::Clock::now()) == 1);
  CHECK(watcher_transport.closes == 1);
  const auto lines = log.wait_lines(1);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains("closing connection from 10.1.2.3:4567: not reading its "
                                       "replies"));
}
