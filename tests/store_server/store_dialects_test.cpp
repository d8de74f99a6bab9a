// Every PyTorch release's commands on the real server (port 0), byte for byte: 2.1's own
// numbering told from 1.13/2.0's by what only 2.1 sends, the 2.8+ queues, LIST_KEYS and
// BARRIER, and attempt scopes as PyTorch clients see them (docs/store.md).
#include <catch2/catch.hpp>
#include <optional>
#include <set>
#include <string>

#include "tests/store/raw_client.hpp"

using namespace ddp::rendezvous;
using namespace ddp::test;
using namespace std::chrono_literals;
using wire::Command;

namespace {

// A 2.1 frame by its wire byte (the codec's kLegacy21 table).
std::string v21(const wire::Request& r) {
  return wire::encode_request(r, wire::Dialect::kLegacy21);
}

// The one reply byte that arrives within timeout, if any.
std::optional<uint8_t> reply_within(Raw& c, std::chrono::milliseconds timeout) {
  try {
    return static_cast<uint8_t>(c.conn.recv_exact(1, ddp::Deadline::after(timeout))[0]);
  } catch (const ddp::SocketTimeout&) {
    return std::nullopt;
  }
}

std::set<std::string> recv_key_list(Raw& c) {
  std::set<std::string> keys;
  const int64_t n = c.recv_i64();
  for (int64_t i = 0; i < n; ++i) keys.insert(c.recv_string());
  return keys;
}

}  // namespace

TEST_CASE("2.1 numbering: learnt from the first request only 2.1 sends", "[server][dialect]") {
  StoreServer server(loopback());
  Raw c(server.port(), /*v2=*/false);
  SECTION("MULTI_SET (10) first, then DELETE_KEY (7), APPEND (8), MULTI_GET (9)") {
    c.send(v21(req(Command::kMultiSet, {"a", "b"}, {"1", "2"})));
    c.send(v21(req(Command::kDeleteKey, {"a"})));
    CHECK(c.recv_i64() == 1);
    c.send(v21(req(Command::kAppend, {"b"}, {"3"})));
    c.send(v21(req(Command::kMultiGet, {"b"})));
    CHECK(c.recv_string() == "23");
  }
  SECTION("APPEND (8) first: key and value arrive together, as 2.1 sends them") {
    c.send(v21(req(Command::kAppend, {"log"}, {"x"})));
    c.send(v21(req(Command::kAppend, {"log"}, {"y"})));
    c.send(v21(req(Command::kGet, {"log"})));
    CHECK(c.recv_string() == "xy");
  }
  SECTION("DELETE_KEY (7) after a SET: a main connection, so not 1.13's WATCH_KEY") {
    c.send(v21(req(Command::kSet, {"k"}, {"v"})));
    c.send(v21(req(Command::kDeleteKey, {"k"})));
    CHECK(c.recv_i64() == 1);
  }
  SECTION("a timed-out wait: CANCEL_WAIT (11) answers WAIT_CANCELED, the connection goes on") {
    c.send(v21(req(Command::kWait, {"late"})));
    CHECK(c.silent());
    c.send(v21(req(Command::kCancelWait)));
    CHECK(c.recv_u8() == wire::kWaitCanceled);
    c.send(v21(req(Command::kSet, {"k"}, {"v"})));
    c.send(v21(req(Command::kGet, {"k"})));
    CHECK(c.recv_string() == "v");
  }
}

TEST_CASE("1.13/2.0 numbering: WATCH_KEY (7) on a watch connection, DELETE_KEY is 8",
          "[server][dialect]") {
  StoreServer server(loopback());
  const auto L = wire::Dialect::kLegacy;
  Raw main(server.port(), false);
  Raw watch(server.port(), false);
  watch.send(req(Command::kWatchKey, {"w"}), L);
  CHECK(watch.recv_u8() == wire::kWatchCallbackRegistered);
  main.send(req(Command::kSet, {"w"}, {"v"}), L);
  CHECK(watch.recv_u8() == wire::kWatchKeyCreated);
  CHECK(watch.recv_string() == "w");
  CHECK(watch.recv_string().empty());
  CHECK(watch.recv_string() == "v");
  // Byte 8 with nothing after its key: 2.0's DELETE_KEY, which waits for its reply.
  main.send(req(Command::kDeleteKey, {"w"}), L);
  CHECK(main.recv_i64() == 1);
  CHECK(watch.recv_u8() == wire::kWatchKeyDeleted);
  // 1.13/2.0 have nothing above 8: byte 12 is refused, not read as 2.0's "CANCEL_WAIT".
  main.send(std::string("\x0C", 1));
  CHECK(main.closed_by_server());
}

TEST_CASE("2.8+ queues: push, len, pop, and a wait that a push wakes", "[server][dialect]") {
  StoreServer server(loopback());
  Raw c(server.port());
  c.send(req(Command::kQueueLen, {"q"}));
  CHECK(c.recv_i64() == 0);
  c.send(req(Command::kQueuePop, {"q"}));  // empty: the length only
  CHECK(c.recv_i64() == 0);
  c.send(req(Command::kQueuePush, {"q"}, {"one"}));  // no reply
  c.send(req(Command::kQueuePush, {"q"}, {"two"}));
  c.send(req(Command::kQueueLen, {"q"}));
  CHECK(c.recv_i64() == 2);
  c.send(req(Command::kCheck, {"q"}));  // a non-empty queue is there for CHECK and WAIT
  CHECK(c.recv_u8() == wire::kCheckReady);
  c.send(req(Command::kQueuePop, {"q"}));
  CHECK(c.recv_i64() == 2);  // the length before the pop, then the value
  CHECK(c.recv_string() == "one");
  c.send(req(Command::kQueuePop, {"q"}));
  CHECK(c.recv_i64() == 1);
  CHECK(c.recv_string() == "two");
  c.send(req(Command::kGetNumKeys));  // queues are not keys
  CHECK(c.recv_i64() == 0);

  // queue_pop(block=True) waits first: two waiters, one push wakes exactly one of them.
  Raw w1(server.port());
  Raw w2(server.port());
  w1.send(req(Command::kWait, {"jobs"}));
  w2.send(req(Command::kWait, {"jobs"}));
  CHECK(w1.silent());
  CHECK(w2.silent());
  c.send(req(Command::kQueuePush, {"jobs"}, {"j1"}));
  const auto first = reply_within(w1, 500ms);
  const auto second = reply_within(w2, 100ms);
  REQUIRE(first.has_value() != second.has_value());
  CHECK((first ? *first : *second) == wire::kWaitStopWaiting);
  Raw& other = first ? w2 : w1;
  c.send(req(Command::kQueuePush, {"jobs"}, {"j2"}));
  CHECK(other.recv_u8() == wire::kWaitStopWaiting);

  // A wait on a queue and a key: the item counts, the wait goes once the key is there too.
  w1.send(req(Command::kWait, {"q2", "other"}));
  c.send(req(Command::kQueuePush, {"q2"}, {"x"}));
  CHECK(w1.silent());
  c.send(req(Command::kSet, {"other"}, {"v"}));
  CHECK(w1.recv_u8() == wire::kWaitStopWaiting);
}

TEST_CASE("LIST_KEYS lists the store, or a scoped connection's own keys", "[server][dialect]") {
  StoreServer server(loopback());
  Raw c(server.port());
  c.send(req(Command::kMultiSet, {"a", "b"}, {"1", "2"}));
  c.send(req(Command::kListKeys));
  CHECK(recv_key_list(c) == std::set<std::string>{"a", "b"});

  server.set_worker_namespace("/worker/attempt_0/");
  Raw scoped(server.port());
  scoped.send(req(Command::kSet, {"/default_pg/0"}, {"id"}));
  scoped.send(req(Command::kListKeys));
  CHECK(recv_key_list(scoped) == std::set<std::string>{"/default_pg/0"});
  c.send(req(Command::kListKeys));  // opened before the namespace: not scoped
  CHECK(recv_key_list(c) == std::set<std::string>{"a", "b", "/worker/attempt_0//default_pg/0"});
}

TEST_CASE("BARRIER: parked until the world size is counted, then everyone goes",
          "[server][dialect]") {
  StoreServer server(loopback());
  Raw a(server.port());
  Raw b(server.port());
  Raw c(server.port());
  wire::Request barrier = req(Command::kBarrier, {"/b"});
  barrier.delta = 3;
  a.send(barrier);
  b.send(barrier);
  CHECK(a.silent());
  CHECK(b.silent());
  c.send(barrier);
  CHECK(c.recv_u8() == wire::kWaitStopWaiting);
  CHECK(a.recv_u8() == wire::kWaitStopWaiting);
  CHECK(b.recv_u8() == wire::kWaitStopWaiting);
  c.send(req(Command::kGet, {"/b"}));  // the counter, in decimal
  CHECK(c.recv_string() == "3");

  // A barrier that times out is cancelled like a wait, and the connection goes on.
  barrier.keys = {"/late"};
  a.send(barrier);
  CHECK(a.silent());
  a.send(req(Command::kCancelWait));
  CHECK(a.recv_u8() == wire::kWaitCanceled);
  a.send(req(Command::kGet, {"/late"}));
  CHECK(a.recv_string() == "1");
}
