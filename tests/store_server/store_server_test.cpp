// The store server over real sockets (port 0): both dialects byte for byte, waiter wake-ups,
// concurrency, and stop() while clients are blocked.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "tests/store/raw_client.hpp"

using namespace ddp::rendezvous;
using namespace ddp::test;
using namespace std::chrono_literals;

TEST_CASE("2.x dialect: handshake, ping echo, append, multi_set/multi_get", "[server]") {
  StoreServer server(loopback());
  Raw c(server.port());
  c.send(std::string("\x0D\x78\x56\x34\x12", 5));  // PING 0x12345678
  CHECK(c.recv(4) == std::string("\x78\x56\x34\x12", 4));

  c.send(req(wire::Command::kAppend, {"log"}, {"ab"}));  // creates
  c.send(req(wire::Command::kAppend, {"log"}, {"cd"}));  // appends; neither replies
  c.send(req(wire::Command::kMultiSet, {"x", "y"}, {"1", std::string("\0\1", 2)}));
  c.send(req(wire::Command::kMultiGet, {"log", "x", "y"}));
  CHECK(c.recv_string() == "abcd");
  CHECK(c.recv_string() == "1");
  CHECK(c.recv_string() == std::string("\0\1", 2));
  c.send(req(wire::Command::kGetNumKeys));
  CHECK(c.recv_i64() == 3);
  c.send(req(wire::Command::kDeleteKey, {"x"}));
  CHECK(c.recv_i64() == 1);
  c.send(req(wire::Command::kDeleteKey, {"x"}));
  CHECK(c.recv_i64() == 0);
  c.send(req(wire::Command::kCheck, {"log", "x"}));
  CHECK(c.recv_u8() == wire::kCheckNotReady);
}

TEST_CASE("2.x dialect: CANCEL_WAIT answers 1 and drops the wait", "[server]") {
  StoreServer server(loopback());
  Raw waiter(server.port());
  waiter.send(req(wire::Command::kWait, {"late"}));
  CHECK(waiter.silent());
  waiter.send(req(wire::Command::kCancelWait));
  CHECK(waiter.recv_u8() == wire::kWaitCanceled);
  Raw setter(server.port());
  setter.send(req(wire::Command::kSet, {"late"}, {"v"}));
  // The cancelled wait must not answer when its key arrives later.
  CHECK(waiter.silent());
  waiter.send(req(wire::Command::kWait, {"late"}));
  CHECK(waiter.recv_u8() == wire::kWaitStopWaiting);
}

TEST_CASE("legacy dialect: 1.13 numbering, ADD as decimal ASCII, WATCH_KEY", "[server]") {
  StoreServer server(loopback());
  Raw c(server.port(), /*v2=*/false);
  const auto L = wire::Dialect::kLegacy;
  wire::Request add = req(wire::Command::kAdd, {"n"});
  add.delta = 41;
  c.send(add, L);
  CHECK(c.recv_i64() == 41);
  add.delta = 1;
  c.send(add, L);
  CHECK(c.recv_i64() == 42);
  c.send(req(wire::Command::kGet, {"n"}), L);
  CHECK(c.recv_string() == "42");

  Raw watcher(server.port(), false);
  watcher.send(req(wire::Command::kWatchKey, {"w"}), L);
  CHECK(watcher.recv_u8() == wire::kWatchCallbackRegistered);
  c.send(req(wire::Command::kSet, {"w"}, {"v1"}), L);
  CHECK(watcher.recv_u8() == wire::kWatchKeyCreated);
  CHECK(watcher.recv_string() == "w");
  CHECK(watcher.recv_string().empty());
  CHECK(watcher.recv_string() == "v1");
  c.send(req(wire::Command::kCompareSet, {"w"}, {"v1", "v2"}), L);
  CHECK(c.recv_string() == "v2");
  CHECK(watcher.recv_u8() == wire::kWatchKeyUpdated);
  CHECK(watcher.recv_string() == "w");
  CHECK(watcher.recv_string() == "v1");
  CHECK(watcher.recv_string() == "v2");
}

TEST_CASE("frames split across reads, pipelined and larger than a read are all answered",
          "[server]") {
  StoreServer server(loopback());
  Raw c(server.port());
  // A GET cut in two with a pause between: the first half is read alone and kept.
  c.send(req(wire::Command::kSet, {"k"}, {"v"}));
  const std::string get = wire::encode_request(req(wire::Command::kGet, {"k"}), wire::Dialect::kV2);
  for (size_t cut : {size_t{1}, get.size() / 2, get.size() - 1}) {
    c.send(get.substr(0, cut));
    std::this_thread::sleep_for(20ms);
    c.send(get.substr(cut));
    CHECK(c.recv_string() == "v");
  }
  // 200 requests in one write: 200 replies, in order.
  std::string batch;
  for (int i = 1; i <= 200; ++i) {
    wire::Request add = req(wire::Command::kAdd, {"n"});
    add.delta = 1;
    batch += wire::encode_request(add, wire::Dialect::kV2);
  }
  c.send(batch);
  for (int i = 1; i <= 200; ++i) REQUIRE(c.recv_i64() == i);
  // A 3 MiB value (many reads) followed in the same write by a GET of it and a PING.
  const std::string big(size_t{3} * 1024 * 1024 + 7, 'b');
  c.send(wire::encode_request(req(wire::Command::kSet, {"big"}, {big}), wire::Dialect::kV2) +
         wire::encode_request(req(wire::Command::kGet, {"big"}), wire::Dialect::kV2) +
         std::string("\x0D\x01\x02\x03\x04", 5));
  CHECK(c.conn.recv_string(ddp::Deadline::after(10s), big.size()) == big);
  CHECK(c.recv(4) == std::string("\x01\x02\x03\x04", 4));
  // And a small request right after the big one goes back to the shared read buffer.
  c.send(get);
  CHECK(c.recv_string() == "v");
}

TEST_CASE("waits wake on every kind of key creation", "[server]") {
  StoreServer server(loopback());
  auto writer = client(server.port());
  const std::vector<std::pair<std::string, std::function<void()>>> creators = {
      {"set", [&] { writer.set("k_set", "v"); }},
      {"add", [&] { writer.add("k_add", 1); }},
      {"compare_set", [&] { writer.compare_set("k_compare_set", "", "v"); }},
      {"append", [&] { writer.append("k_append", "v"); }},
      {"multi_set",
       [&] {
         writer.multi_set({"k_multi_set", "other"}, {"v", "w"});
       }},
  };
  for (const auto& [name, create] : creators) {
    SECTION(name) {
      auto waiter = client(server.port());
      auto done = std::async(std::launch::async, [&] { waiter.wait({"k_" + name}, 20s); });
      CHECK(done.wait_for(100ms) == std::future_status::timeout);
      create();
      REQUIRE(done.wait_for(10s) == std::future_status::ready);
      done.get();
    }
  }
}

TEST_CASE("wait timeout fires no earlier than its deadline and names the key", "[server]") {
  StoreServer server(loopback());
  auto store = client(server.port());
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THROWS_AS(store.wait({"absent", "present"}, 300ms), ddp::StoreTimeout);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 10s);  // generous: only catches a wait that ignores its deadline
  store.set("present", "1");
  try {
    store.wait({"absent", "present"}, 100ms);
    FAIL("no timeout");
  } catch (const ddp::StoreTimeout& e) {
    CHECK_THAT(e.what(), Catch::Contains("absent") && Catch::Contains("100 ms") &&
                             Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
  }
  // The connection survives a timed-out wait.
  CHECK(store.get("present") == "1");
}

TEST_CASE("16 threads x 1000 adds on one key end at exactly 16000", "[server][concurrency]") {
  StoreServer server(loopback());
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([port = server.port()] {
      auto store = client(port);
      for (int i = 0; i < 1000; ++i) store.add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  auto store = client(server.port());
  CHECK(store.add("counter", 0) == 16000);
  CHECK(store.get("counter") == "16000");
}

TEST_CASE("one TcpStore shared by threads stays consistent", "[server][concurrency]") {
  StoreServer server(loopback());
  auto shared = client(server.port());
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};  // Catch2's CHECK is not thread-safe: count, check after
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&shared, &mismatches, t] {
      for (int i = 0; i < 250; ++i) {
        shared.add("n", 1);
        shared.set("t" + std::to_string(t), std::to_string(i));
        if (shared.get("t" + std::to_string(t)) != std::to_string(i)) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(mismatches == 0);
  CHECK(shared.get("n") == "1000");
}

TEST_CASE("stop() mid-wait gives the client an error at once, not a hang", "[server]") {
  auto server = std::make_unique<StoreServer>(loopback());
  auto store = client(server->port(), 60s);
  auto waiting = std::async(std::launch::async, [&] { store.wait({"never"}, 60s); });
  CHECK(waiting.wait_for(200ms) == std::future_status::timeout);
  server->stop();
  REQUIRE(waiting.wait_for(10s) == std::future_status::ready);
  try {
    waiting.get();
    FAIL("wait returned normally");
  } catch (const ddp::StoreTimeout&) {
    FAIL("a dead server must not look like a timeout");
  } catch (const ddp::StoreError& e) {
    CHECK_THAT(e.what(), Catch::Contains("never") && Catch::Contains("closed"));
  }
  server->stop();  // idempotent
}

TEST_CASE("connect retries until the server appears, then fails naming the endpoint", "[server]") {
  uint16_t port = 0;
  {
    StoreServer probe(loopback());
    port = probe.port();
  }
  TcpStoreOptions o;
  o.port = port;
  o.connect_timeout = 300ms;
  try {
    TcpStore store(o);
    FAIL("connected to nothing");
  } catch (const ddp::StoreError& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("127.0.0.1:" + std::to_string(port)) && Catch::Contains("refused"));
  }
}

TEST_CASE("a client survives a server restart on the same port without losing a set", "[server]") {
  auto first = std::make_unique<StoreServer>(loopback());
  const uint16_t port = first->port();
  auto store = client(port);
  store.set("before", "1");
  first->stop();
  first.reset();
  StoreServerOptions same = loopback();
  same.port = port;
  StoreServer second(same);
  // The old connection is closed; SET has no reply, so it must not vanish into it.
  store.set("after", "2");
  CHECK(store.get("after") == "2");
  CHECK_FALSE(store.check({"before"}));  // a new server starts empty
}

TEST_CASE("a reconnect the host refuses ends at once: the store that was there is gone",
          "[server]") {
  // A node leaving after the store host did (the end of a failed static job) must not wait
  // out connect_timeout here, retrying a refusal as if the store were not up yet.
  auto server = std::make_unique<StoreServer>(loopback());
  auto store = client(server->port(), 60s);
  store.set("before", "1");
  server->stop();
  server.reset();
  try {
    store.set("after", "2");
    FAIL("set on a store that is gone");
  } catch (const ddp::StoreError& e) {
    CHECK_THAT(e.what(), Catch::Contains("refused") && Catch::Contains("(1 attempts;"));
  }
}

TEST_CASE("a client that ends its stream right after its requests still gets every reply",
          "[server]") {
  // nc -N and short scripts do this: send, shut the write side, read. The requests and the
  // end of stream reach the server together (one io_uring turn), and the replies must still
  // go out before the server closes its side.
  StoreServer server(loopback());
  for (int i = 0; i < 200; ++i) {
    INFO("client " << i);
    Raw c(server.port());
    c.send(req(wire::Command::kAdd, {"n"}));
    c.send(req(wire::Command::kGetNumKeys));
    REQUIRE(::shutdown(c.conn.fd(), SHUT_WR) == 0);
    c.recv_i64();
    CHECK(c.recv_i64() == 1);
    CHECK(c.closed_by_server());
  }
}
