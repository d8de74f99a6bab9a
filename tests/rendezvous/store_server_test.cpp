// The store server over real sockets (port 0): both dialects byte for byte, waiter wake-ups,
// bad input, and stop() while clients are blocked.
#include "rendezvous/store_server.hpp"

#include <fcntl.h>
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

#include "common/error.hpp"
#include "rendezvous/socket_io.hpp"
#include "rendezvous/tcp_store.hpp"
#include "rendezvous/wire_codec.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;
namespace wire = ddp::rendezvous::wire;

namespace {

StoreServerOptions loopback() {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  return o;
}

// A raw connection that speaks bytes, for checking the wire format exactly.
struct Raw {
  explicit Raw(uint16_t port, bool v2 = true) : conn(SocketConn::connect("127.0.0.1", port, 5s)) {
    if (v2) send(std::string("\x00\xCE\xF7\x85\x3C", 5));
  }
  void send(const std::string& bytes) { conn.send_all(bytes, deadline_after(5s)); }
  void send(const wire::Request& r, wire::Dialect d = wire::Dialect::kV2) {
    send(wire::encode_request(r, d));
  }
  std::string recv(size_t n) { return conn.recv_exact(n, deadline_after(5s)); }
  std::string recv_string() { return conn.recv_string(deadline_after(5s)); }
  uint8_t recv_u8() { return static_cast<uint8_t>(recv(1)[0]); }
  int64_t recv_i64() { return static_cast<int64_t>(wire::get_u64(recv(8).data())); }
  // True when nothing arrives within a short while (the reply is parked).
  bool silent() {
    try {
      conn.recv_exact(1, deadline_after(100ms));
      return false;
    } catch (const ddp::StoreTimeout&) {
      return true;
    }
  }
  // True when the server closed this connection.
  bool closed_by_server() {
    try {
      conn.recv_exact(1, deadline_after(5s));
      return false;
    } catch (const ddp::StoreTimeout&) {
      return false;
    } catch (const ddp::StoreError&) {
      return true;
    }
  }
  SocketConn conn;
};

wire::Request req(wire::Command c, std::vector<std::string> keys = {},
                  std::vector<std::string> values = {}) {
  wire::Request r;
  r.command = c;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

TcpStore client(uint16_t port, Duration timeout = 5s) {
  TcpStoreOptions o;
  o.port = port;
  o.timeout = timeout;
  o.connect_timeout = 5s;
  return TcpStore(o);
}

}  // namespace

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
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&shared, t] {
      for (int i = 0; i < 250; ++i) {
        shared.add("n", 1);
        shared.set("t" + std::to_string(t), std::to_string(i));
        CHECK(shared.get("t" + std::to_string(t)) == std::to_string(i));
      }
    });
  }
  for (auto& t : threads) t.join();
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

namespace {
// Sends this process's stderr to a file for the scope's duration (the server logs there).
class StderrCapture {
 public:
  StderrCapture() : path_("/tmp/ddp_store_log_" + std::to_string(::getpid())) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    int fd = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    ::unlink(path_.c_str());
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  // The lines logged so far.
  [[nodiscard]] std::vector<std::string> lines() const {
    std::ifstream in(path_);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  // Waits (bounded) until at least n lines were logged, then a little longer for extras.
  std::vector<std::string> wait_lines(size_t n) const {
    for (int i = 0; i < 250 && lines().size() < n; ++i) std::this_thread::sleep_for(20ms);
    std::this_thread::sleep_for(100ms);
    return lines();
  }

 private:
  std::string path_;
  int saved_ = -1;
};
}  // namespace

TEST_CASE("bad frames close only their own connection, one log line each", "[server][garbage]") {
  StoreServer server(loopback());
  auto good = client(server.port());
  good.set("k", "v");
  StderrCapture log;

  Raw unknown(server.port());
  unknown.send(std::string("\x63", 1));  // 2.x command 99
  CHECK(unknown.closed_by_server());

  Raw oversize(server.port());
  std::string frame("\x01", 1);  // SET with a 1 TB key
  wire::put_u64(frame, 1ULL << 40);
  oversize.send(frame);
  CHECK(oversize.closed_by_server());

  {
    Raw truncated(server.port());
    truncated.send(std::string("\x01\x05\x00", 3));  // SET, half a key length, then gone
  }
  Raw waiter(server.port());
  waiter.send(req(wire::Command::kWait, {"gone"}));
  CHECK(waiter.silent());
  waiter.conn.close();  // reset mid-wait: its wait is dropped

  {
    Raw polite(server.port());  // a clean close between requests is not worth a line
    polite.send(req(wire::Command::kGetNumKeys));
    polite.recv_i64();
  }

  good.set("gone", "now");  // wakes nobody; must not touch the closed waiter
  CHECK(good.get("k") == "v");
  CHECK(good.get("gone") == "now");

  const auto lines = log.wait_lines(4);
  REQUIRE(lines.size() == 4);
  const std::vector<std::string> reasons = {"unknown command byte 99", "exceeds the limit",
                                            "truncated frame", "in the middle of a wait"};
  for (const auto& reason : reasons) {
    const auto n = std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(reason) != std::string::npos &&
             l.find("closing connection from 127.0.0.1:") != std::string::npos;
    });
    INFO(reason);
    CHECK(n == 1);
  }
}

TEST_CASE("100 garbage connections while a well-behaved client keeps working",
          "[server][garbage]") {
  StoreServer server(loopback());
  auto good = client(server.port());
  std::atomic<bool> stop{false};
  std::thread noise([&] {
    std::mt19937 rng(1234);
    for (int i = 0; i < 100; ++i) {
      try {
        Raw c(server.port(), /*v2=*/(i % 2) == 0);
        std::string junk(1 + rng() % 4096, '\0');
        for (auto& ch : junk) ch = static_cast<char>(rng());
        c.send(junk);
      } catch (const ddp::StoreError&) {
        // the server may close on the first bad byte while we are still sending
      }
    }
    stop = true;
  });
  int64_t ops = 0;
  while (!stop) {
    good.set("key", std::to_string(ops));
    CHECK(good.get("key") == std::to_string(ops));
    CHECK(good.add("ops", 1) == ops + 1);
    ++ops;
  }
  noise.join();
  good.ping();
  CHECK(good.num_keys() >= 2);
  // Garbage connections are gone again (the good one remains).
  for (int i = 0; i < 100 && server.num_connections() > 1; ++i) std::this_thread::sleep_for(20ms);
  CHECK(server.num_connections() == 1);
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

TEST_CASE("a client that does not read its replies is paused, then served in full", "[server]") {
  StoreServer server(loopback());
  const std::string big(1024 * 1024, 'b');
  auto good = client(server.port());
  good.set("big", big);
  REQUIRE(good.check({"big"}));  // SET has no reply: make sure it landed before the burst
  Raw greedy(server.port());
  std::string burst;
  for (int i = 0; i < 40; ++i)
    burst += wire::encode_request(req(wire::Command::kGet, {"big"}), wire::Dialect::kV2);
  greedy.send(burst);  // 40 MiB of replies, none read yet
  // Everyone else is served meanwhile.
  for (int i = 0; i < 50; ++i) CHECK(good.add("others", 1) == i + 1);
  for (int i = 0; i < 40; ++i) {
    INFO("reply " << i);
    REQUIRE(greedy.recv_string() == big);
  }
  greedy.send(req(wire::Command::kGetNumKeys));
  CHECK(greedy.recv_i64() == 2);
}
