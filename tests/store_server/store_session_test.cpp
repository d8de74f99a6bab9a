// StoreSession without sockets: a fake transport records what the session writes, when it
// flushes, stops or resumes reading, and closes. Framing, batching, back-pressure and the
// close/log rules are the same whichever backend (epoll, io_uring) moves the bytes.
#include "rendezvous/store/server/store_session.hpp"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/store/server/byte_transport.hpp"
#include "rendezvous/store/server/server_state.hpp"
#include "rendezvous/store/wire_codec.hpp"
#include "tests/support/stderr_capture.hpp"

using namespace ddp::rendezvous;
namespace wire = ddp::rendezvous::wire;

namespace {

class FakeTransport final : public ByteTransport {
 public:
  void write(std::string_view bytes) override { queued += bytes; }
  void flush() override {
    ++flushes;
    if (socket_full) return;
    sent += queued;
    queued.clear();
  }
  [[nodiscard]] size_t queued_bytes() const override { return queued.size(); }
  void set_reading(bool on) override { reading.push_back(on); }
  void close() override { ++closes; }

  std::string sent;    // what the "kernel" took, in order
  std::string queued;  // written, not yet taken
  bool socket_full = false;
  int flushes = 0;
  std::vector<bool> reading;  // every set_reading() call
  int closes = 0;
};

struct Fixture {
  ServerState state;
  SessionConfig config;
  FakeTransport transport;
  std::shared_ptr<StoreSession> session =
      std::make_shared<StoreSession>("10.1.2.3:4567", state, config, transport);
};

std::string frame(wire::Command command, std::vector<std::string> keys = {},
                  std::vector<std::string> values = {}, int64_t delta = 0) {
  wire::Request r;
  r.command = command;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.delta = delta;
  if (command == wire::Command::kPing) r.nonce = 0xABCD;
  return wire::encode_request(r, wire::Dialect::kV2);
}

std::string handshake() {
  wire::Request r;
  r.command = wire::Command::kValidate;
  r.nonce = wire::kValidationMagic;
  return wire::encode_request(r, wire::Dialect::kV2);
}

std::string string_reply(const std::string& value) {
  std::string out;
  wire::put_string(out, value);
  return out;
}

}  // namespace

TEST_CASE("a request split at every byte is answered once, whole", "[session]") {
  Fixture f;
  const std::string bytes = handshake() + frame(wire::Command::kSet, {"k"}, {"value"}) +
                            frame(wire::Command::kGet, {"k"});
  for (char c : bytes) f.session->received(std::string_view(&c, 1));
  CHECK(f.transport.sent == string_reply("value"));
  CHECK(f.transport.closes == 0);
  CHECK_FALSE(f.session->closed());
}

TEST_CASE("a handshake cut in two is followed by a one-byte request", "[session]") {
  Fixture f;
  const std::string hello = handshake();
  f.session->received(hello.substr(0, 2));
  f.session->received(hello.substr(2));
  f.session->received(frame(wire::Command::kGetNumKeys));  // GETNUMKEYS is one byte
  std::string expected;
  wire::put_i64(expected, 0);
  CHECK(f.transport.sent == expected);
}

TEST_CASE("every request of one read is answered in one flush", "[session]") {
  Fixture f;
  f.session->received(handshake());
  const int before = f.transport.flushes;
  f.session->received(frame(wire::Command::kAdd, {"n"}, {}, 5) +
                      frame(wire::Command::kAdd, {"n"}, {}, 2) + frame(wire::Command::kPing) +
                      frame(wire::Command::kGetNumKeys));
  std::string expected;
  wire::put_i64(expected, 5);
  wire::put_i64(expected, 7);
  wire::put_u32(expected, 0xABCD);
  wire::put_i64(expected, 1);
  CHECK(f.transport.sent == expected);
  CHECK(f.transport.flushes == before + 1);
}

TEST_CASE("a frame cut across reads keeps only its own bytes between them", "[session]") {
  Fixture f;
  const std::string big(100'000, 'v');
  const std::string set = frame(wire::Command::kSet, {"big"}, {big});
  const std::string get = frame(wire::Command::kGet, {"big"});
  // The handshake, a whole GET of a missing-then-set key later, and the SET in three pieces
  // whose cuts fall inside the length field and inside the value.
  f.session->received(handshake() + set.substr(0, 12));
  f.session->received(set.substr(12, 50'000));
  CHECK(f.transport.sent.empty());
  f.session->received(set.substr(50'012) + get);
  CHECK(f.transport.sent == string_reply(big));
  CHECK(f.state.num_keys() == 1);
}

TEST_CASE("a bad frame closes the session with one line naming the peer", "[session]") {
  Fixture f;
  ddp::test::StderrCapture log;
  f.session->received(handshake() + std::string("\x63", 1));  // command 99 does not exist
  CHECK(f.session->closed());
  CHECK(f.transport.closes == 1);
  const auto lines = log.lines();
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::StartsWith(ddp::log::program() +
                                         ": closing connection from 10.1.2.3:4567: bad request"));
  // Nothing more happens on a closed session.
  f.session->received(frame(wire::Command::kPing));
  CHECK(f.transport.sent.empty());
  CHECK(f.transport.closes == 1);
}

TEST_CASE("reading stops past 16 MiB of unsent replies and resumes once they drain", "[session]") {
  Fixture f;
  const std::string mib(size_t{1024} * 1024, 'm');
  f.session->received(handshake() + frame(wire::Command::kSet, {"m"}, {mib}));
  f.transport.socket_full = true;  // the client reads nothing
  std::string gets;
  for (int i = 0; i < 15; ++i) gets += frame(wire::Command::kGet, {"m"});
  f.session->received(gets);
  CHECK(f.transport.reading.empty());  // 15 MiB queued: under the limit
  f.session->received(frame(wire::Command::kGet, {"m"}) + frame(wire::Command::kGet, {"m"}));
  REQUIRE(f.transport.reading == std::vector<bool>{false});  // 17 MiB: stop reading
  // A client that catches up: everything goes out and reading resumes, once.
  f.transport.socket_full = false;
  f.transport.flush();
  f.session->drained();
  f.session->drained();
  CHECK(f.transport.reading == std::vector<bool>{false, true});
  CHECK(f.transport.sent.size() == size_t{17} * (mib.size() + 8));
}

TEST_CASE("end of stream: silent between requests, logged mid-frame and mid-wait", "[session]") {
  ddp::test::StderrCapture log;
  SECTION("a client that is done leaves without a line") {
    Fixture f;
    f.session->received(handshake() + frame(wire::Command::kPing));
    f.session->read_ended(0);
    CHECK(f.session->closed());
    CHECK(log.lines().empty());
  }
  SECTION("in the middle of a frame: the bytes it left behind") {
    Fixture f;
    f.session->received(handshake() + frame(wire::Command::kSet, {"k"}, {"vvvv"}).substr(0, 9));
    f.session->read_ended(0);
    const auto lines = log.lines();
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Catch::Contains("truncated frame") && Catch::Contains("end of stream") &&
                             Catch::Contains("9 bytes"));
  }
  SECTION("a clean end while a wait is parked: a client leaving, no line") {
    Fixture f;
    f.session->received(handshake() + frame(wire::Command::kWait, {"never"}));
    f.session->read_ended(0);
    CHECK(f.session->closed());
    CHECK(log.lines().empty());
    CHECK(f.state.num_waiters() == 0);
  }
  SECTION("a reset while a wait is parked") {
    Fixture f;
    f.session->received(handshake() + frame(wire::Command::kWait, {"never"}));
    f.session->read_ended(ECONNRESET);
    const auto lines = log.lines();
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Catch::Contains("in the middle of a wait") &&
                             Catch::Contains("Connection reset by peer"));
    CHECK(f.state.num_waiters() == 0);  // the parked wait went with it
  }
}

TEST_CASE("at the end of a stream, replies still queued go out before the close", "[session]") {
  ddp::test::StderrCapture log;
  Fixture f;
  f.transport.socket_full = true;
  f.session->received(handshake() + frame(wire::Command::kPing));
  f.session->read_ended(0);  // the client shut its write side; the reply is not out yet
  CHECK_FALSE(f.session->closed());
  CHECK(f.transport.reading == std::vector<bool>{false});
  f.session->read_ended(0);  // epoll reports the end of stream again: nothing changes
  CHECK_FALSE(f.session->closed());
  f.transport.socket_full = false;
  f.transport.flush();
  f.session->drained();
  CHECK(f.session->closed());
  CHECK(f.transport.closes == 1);
  CHECK(f.transport.sent.size() == 4);  // the PING echo
  CHECK(log.lines().empty());
}

TEST_CASE("a wait parked on one session is answered when another creates the key", "[session]") {
  Fixture waiter;
  FakeTransport setter_transport;
  auto setter =
      std::make_shared<StoreSession>("10.9.9.9:1", waiter.state, waiter.config, setter_transport);
  waiter.session->received(handshake() + frame(wire::Command::kWait, {"ready"}));
  CHECK(waiter.transport.sent.empty());
  setter->received(handshake() + frame(wire::Command::kSet, {"ready"}, {"1"}));
  // The waiter's reply is flushed at once, outside any read of its own.
  CHECK(waiter.transport.sent == std::string(1, static_cast<char>(wire::kWaitStopWaiting)));
  CHECK(setter_transport.sent.empty());  // SET has no reply
}
