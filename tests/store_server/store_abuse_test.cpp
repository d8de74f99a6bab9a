// The store server under abuse (docs/security.md ("Limits")): a scanner, slow-loris clients,
// endless WAITs, one address holding too many connections, a flood of bytes or keys. Each
// case runs ddpstore as a child, so its resident memory can be read before and after, while
// good clients keep doing set/get/wait from another loopback address; every case asserts that
// none of their requests failed and that the server's memory stayed bounded. Distinct client
// addresses are 127.0.0.x (all of 127/8 is loopback on Linux), bound before connect.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "rendezvous/store/tcp_store.hpp"
#include "rendezvous/store/wire_codec.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;
namespace wire = ddp::rendezvous::wire;

namespace {

// Under AddressSanitizer (scripts/sanitize.sh) the server's RSS is mostly shadow memory and
// the quarantine of freed blocks, so the memory bounds below are checked in normal builds
// only; everything else (good requests failed: 0, the server alive) is checked in both.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kRssBounds = false;
#else
constexpr bool kRssBounds = true;
#endif

const std::string kDdpstore = ddp::test::build_path("ddpstore");
using Clock = std::chrono::steady_clock;

// Resident memory of a process in KiB (VmRSS), 0 if unreadable.
long rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

// ddpstore on 127.0.0.1, port 0, with extra flags; stderr merged into the captured output.
struct Daemon {
  explicit Daemon(std::vector<std::string> flags) : child(options(std::move(flags))) {
    port = static_cast<uint16_t>(std::stoi(child.first_line(10s)));
  }
  static ddp::test::ChildOptions options(std::vector<std::string> flags) {
    ddp::test::ChildOptions o;
    o.argv = {kDdpstore, "--host", "127.0.0.1", "--port", "0"};
    o.argv.insert(o.argv.end(), flags.begin(), flags.end());
    o.merge_stderr = true;
    return o;
  }
  [[nodiscard]] long rss() const { return rss_kib(child.pid()); }
  // Lines of its log containing text.
  [[nodiscard]] size_t count(const std::string& text) const {
    const std::string out = child.out();
    size_t n = 0;
    for (auto at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) ++n;
    return n;
  }
  ddp::test::ChildProcess child;
  uint16_t port = 0;
};

// A raw TCP connection to 127.0.0.1:port from source (127.0.0.x); -1 when refused.
int connect_from(const std::string& source, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  // The port is picked at connect, not bind: thousands of connects from one address then do
  // not search the ephemeral range for a port free of every destination.
  int one = 1;
  ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server closed it; the caller checks
    sent += static_cast<size_t>(n);
  }
}

// True when the server has closed fd (end of stream or reset) within timeout.
bool closed_within(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;  // 0: end of stream; < 0: reset
  }
}

const std::string kHandshake("\x00\xCE\xF7\x85\x3C", 5);

std::string encode(wire::Command command, std::vector<std::string> keys,
                   std::vector<std::string> values = {}) {
  wire::Request r;
  r.command = command;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return wire::encode_request(r, wire::Dialect::kV2);
}

// Clients doing set/get/wait in a loop from 127.0.0.1 while a case abuses the server; every
// failed request is counted and its message kept. Keys cycle, so they never grow the store.
class GoodClients {
 public:
  GoodClients(uint16_t port, int n) {
    for (int t = 0; t < n; ++t) {
      threads_.emplace_back([this, port, t] {
        try {
          TcpStoreOptions o;
          o.port = port;
          o.timeout = 10s;
          o.connect_timeout = 10s;
          TcpStore store(o);
          for (uint64_t i = 0; !stop_; ++i) {
            const std::string key = "good/" + std::to_string(t) + "/" + std::to_string(i % 16);
            one([&] {
              store.set(key, "value " + std::to_string(i));
              if (store.get(key) != "value " + std::to_string(i)) throw ddp::Error("wrong value");
              store.wait({key}, 10s);
            });
            // Steady, not flat out: the abuse, not the good clients, should load the server.
            std::this_thread::sleep_for(200us);
          }
        } catch (const std::exception& e) {
          fail(e.what());
        }
      });
    }
  }
  ~GoodClients() { stop(); }
  GoodClients(const GoodClients&) = delete;
  GoodClients& operator=(const GoodClients&) = delete;

  void stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  [[nodiscard]] uint64_t ok() const { return ok_; }
  [[nodiscard]] uint64_t failed() const { return failed_; }
  [[nodiscard]] std::string first_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }

 private:
  template <class F>
  void one(F&& f) {
    try {
      f();
      ++ok_;
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
  void fail(const std::string& what) {
    ++failed_;
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.empty()) first_error_ = what;
  }

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> ok_{0};
  std::atomic<uint64_t> failed_{0};
  mutable std::mutex mu_;
  std::string first_error_;
  std::vector<std::thread> threads_;
};

// Waits until good clients have done some work, so "before" is measured warm.
void warm_up(const GoodClients& good) {
  const auto deadline = Clock::now() + 5s;
  while (good.ok() < 200 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
}

void figures(const char* what, long before, long after, const GoodClients& good, double seconds) {
  std::printf(
      "[figures] %s: server VmRSS %ld -> %ld KiB (%+ld KiB); good requests %llu ok, "
      "%llu failed; %.2f s\n",
      what, before, after, after - before, static_cast<unsigned long long>(good.ok()),
      static_cast<unsigned long long>(good.failed()), seconds);
  std::fflush(stdout);
}

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("abuse: a scanner opening and closing 10,000 connections", "[abuse][scanner]") {
  Daemon daemon({});
  GoodClients good(daemon.port, 4);
  warm_up(good);
  const long before = daemon.rss();
  const auto start = Clock::now();
  int refused = 0;
  for (int i = 0; i < 10000; ++i) {
    const int fd = connect_from("127.0.0.2", daemon.port);
    if (fd < 0) {
      ++refused;
      continue;
    }
    if (i % 3 == 0) send_all(fd, "GET / HTTP/1.0\r\n\r\n");  // some say something
    // Reset, as scanners do (and so no TIME_WAIT piles up on the test's side).
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(fd);
  }
  const double seconds = since(start);
  std::this_thread::sleep_for(200ms);  // the last closes reach the server
  const long after = daemon.rss();
  good.stop();
  figures("scanner, 10000 connections", before, after, good, seconds);
  INFO(good.first_error());
  CHECK(refused == 0);
  CHECK(good.failed() == 0);
  CHECK(good.ok() > 0);
  CHECK(before > 0);
  if (kRssBounds) CHECK(after - before < 8 * 1024);  // nothing kept per closed connection
  TcpStoreOptions o;
  o.port = daemon.port;
  TcpStore store(o);
  CHECK(store.num_keys() > 0);  // alive and serving
}

TEST_CASE("abuse: slow-loris clients holding half a frame are closed after the frame timeout",
          "[abuse][slowloris]") {
  Daemon daemon({"--frame-timeout-ms", "500"});
  GoodClients good(daemon.port, 4);
  warm_up(good);
  const long before = daemon.rss();
  const auto start = Clock::now();
  std::vector<int> loris;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_from("127.0.0.3", daemon.port);
    REQUIRE(fd >= 0);
    std::string half;
    if (i % 3 == 0) {
      half = kHandshake.substr(0, 2);  // half the handshake
    } else {
      half = kHandshake + encode(wire::Command::kSet, {"loris"}, {std::string(4000, 'x')});
      half.resize(half.size() / 2);  // half a SET
    }
    send_all(fd, half);
    loris.push_back(fd);
  }
  // Not slow-loris: a client parked in a WAIT, and one that has sent nothing yet.
  const int waiter = connect_from("127.0.0.4", daemon.port);
  send_all(waiter, kHandshake + encode(wire::Command::kWait, {"never"}));
  const int silent = connect_from("127.0.0.4", daemon.port);

  int closed = 0;
  for (int fd : loris) {
    if (closed_within(fd, 5s)) ++closed;
  }
  const double seconds = since(start);
  const long after = daemon.rss();
  CHECK_FALSE(closed_within(waiter, 200ms));
  CHECK_FALSE(closed_within(silent, 10ms));
  good.stop();
  figures("300 slow-loris clients, 500 ms frame timeout", before, after, good, seconds);
  INFO(good.first_error());
  CHECK(closed == 300);
  CHECK(seconds < 4.0);  // closed at 0.5-0.7 s, not at some later cleanup
  CHECK(good.failed() == 0);
  if (kRssBounds) CHECK(after - before < 8 * 1024);
  CHECK(daemon.count("DDPLAUNCH_STORE_FRAME_TIMEOUT_MS") == 300);
  CHECK(daemon.count("(the handshake) have waited 500 ms") == 100);
  for (int fd : loris) ::close(fd);
  ::close(waiter);
  ::close(silent);
}

TEST_CASE("abuse: endless WAITs and unread replies do not grow the server's memory",
          "[abuse][wait]") {
  Daemon daemon({});
  GoodClients good(daemon.port, 4);
  {
    TcpStoreOptions o;
    o.port = daemon.port;
    TcpStore store(o);
    store.set("big", std::string(64 * 1024, 'b'));
  }
  warm_up(good);
  const long before = daemon.rss();
  const auto start = Clock::now();

  // 1. 200,000 pipelined WAITs, each on a new missing key: each replaces the one parked.
  const int pipeliner = connect_from("127.0.0.5", daemon.port);
  std::string batch = kHandshake;
  for (int i = 0; i < 200000; ++i) {
    batch += encode(wire::Command::kWait, {"missing/" + std::to_string(i)});
    if (batch.size() > (1U << 20)) {
      send_all(pipeliner, batch);
      batch.clear();
    }
  }
  send_all(pipeliner, batch);

  // 2. WAITs of 50,000 missing keys each, 20 times over one connection.
  const int wide = connect_from("127.0.0.5", daemon.port);
  send_all(wide, kHandshake);
  std::vector<std::string> keys;
  for (int i = 0; i < 50000; ++i) keys.push_back("wide/" + std::to_string(i) + "/padding-pad");
  const std::string wide_wait = encode(wire::Command::kWait, keys);
  for (int round = 0; round < 20; ++round) send_all(wide, wide_wait);

  // 3. A client that asks for a 64 KiB value 4,000 times (250 MiB of replies) and reads none:
  //    the server stops reading it at 16 MiB queued. Sent from a thread: it blocks once the
  //    server stops reading.
  const int hog = connect_from("127.0.0.5", daemon.port);
  std::thread hog_sender([hog] {
    const std::string get = encode(wire::Command::kMultiGet, {"big"});
    std::string all = kHandshake;
    for (int i = 0; i < 4000; ++i) all += get;
    send_all(hog, all);  // returns early once the test shuts the socket
  });
  std::this_thread::sleep_for(1500ms);
  const long during = daemon.rss();
  const double seconds = since(start);

  CHECK_FALSE(closed_within(pipeliner, 10ms));  // still connected, still waiting
  ::shutdown(hog, SHUT_RDWR);
  hog_sender.join();
  good.stop();
  figures("200k pipelined WAITs + 20 WAITs of 50k keys + 250 MiB of unread replies", before, during,
          good, seconds);
  INFO(good.first_error());
  CHECK(good.failed() == 0);
  // One parked wait per connection (a 2.2 MB request at most here) and 16 MiB of queued
  // replies, plus the kernel's socket buffers: well under 64 MiB, where a server that kept
  // every wait or every reply would hold hundreds.
  if (kRssBounds) CHECK(during - before < 64 * 1024);
  ::close(pipeliner);
  ::close(wide);
  ::close(hog);
}

TEST_CASE("abuse: one address past its connection limit is refused, others are served",
          "[abuse][peer]") {
  Daemon daemon({"--max-conns-per-peer", "64"});
  GoodClients good(daemon.port, 2);
  warm_up(good);
  std::vector<int> held;
  for (int i = 0; i < 64; ++i) {
    const int fd = connect_from("127.0.0.6", daemon.port);
    REQUIRE(fd >= 0);
    held.push_back(fd);
  }
  // The 64th is served: PING answers.
  std::string ping = kHandshake;
  wire::Request p;
  p.command = wire::Command::kPing;
  p.nonce = 77;
  ping += wire::encode_request(p, wire::Dialect::kV2);
  send_all(held.back(), ping);
  pollfd pf{held.back(), POLLIN, 0};
  REQUIRE(::poll(&pf, 1, 5000) == 1);
  char reply[4];
  REQUIRE(::recv(held.back(), reply, 4, MSG_WAITALL) == 4);
  CHECK(wire::get_u32(reply) == 77);

  int refused = 0;
  for (int i = 0; i < 100; ++i) {
    const int fd = connect_from("127.0.0.6", daemon.port);
    if (fd < 0 || closed_within(fd, 2s)) ++refused;
    if (fd >= 0) ::close(fd);
  }
  CHECK(refused == 100);
  // Another address is not affected.
  const int other = connect_from("127.0.0.7", daemon.port);
  CHECK_FALSE(closed_within(other, 100ms));
  ::close(other);
  // Once 127.0.0.6 closes some, it is served again.
  for (int i = 0; i < 10; ++i) ::close(held[static_cast<size_t>(i)]);
  std::this_thread::sleep_for(200ms);
  const int again = connect_from("127.0.0.6", daemon.port);
  CHECK_FALSE(closed_within(again, 200ms));
  ::close(again);
  good.stop();
  INFO(good.first_error());
  CHECK(good.failed() == 0);
  INFO(daemon.child.out());
  // One line for the streak of 100 refusals, naming the limit, and one when served again.
  CHECK(daemon.count("refusing connections from 127.0.0.6: 64 connections") == 1);
  CHECK(daemon.count("DDPLAUNCH_STORE_MAX_CONNS_PER_PEER") == 1);
  CHECK(daemon.count("accepting connections from 127.0.0.6 again after refusing 100") == 1);
  for (size_t i = 10; i < held.size(); ++i) ::close(held[i]);
}

TEST_CASE("abuse: past the byte or key limit a write is refused and the server goes on",
          "[abuse][quota]") {
  Daemon daemon({"--max-bytes", "1048576", "--max-keys", "100"});
  GoodClients good(daemon.port, 2);  // 2 x 16 keys of ~20 bytes
  warm_up(good);

  SECTION("bytes") {
    const int fd = connect_from("127.0.0.8", daemon.port);
    // 600 KiB fits; another 600 KiB would not.
    send_all(fd, kHandshake + encode(wire::Command::kSet, {"a"}, {std::string(600 * 1024, 'a')}));
    CHECK_FALSE(closed_within(fd, 200ms));
    send_all(fd, encode(wire::Command::kSet, {"b"}, {std::string(600 * 1024, 'b')}));
    CHECK(closed_within(fd, 5s));
    ::close(fd);
    CHECK(daemon.count("SET of 'b': the store would hold") == 1);
    CHECK(daemon.count("over its limit of 1048576 (limit: ddpstore --max-bytes / "
                       "DDPLAUNCH_STORE_MAX_BYTES)") == 1);
    // APPEND growing a value past the limit is refused the same way.
    const int appender = connect_from("127.0.0.8", daemon.port);
    send_all(appender,
             kHandshake + encode(wire::Command::kAppend, {"a"}, {std::string(500 * 1024, 'c')}));
    CHECK(closed_within(appender, 5s));
    ::close(appender);
    // Deleting frees the space again.
    TcpStoreOptions o;
    o.port = daemon.port;
    TcpStore store(o);
    CHECK(store.delete_key("a"));
    store.set("b", std::string(600 * 1024, 'b'));
    CHECK(store.get("b").size() == 600 * 1024);
  }
  SECTION("one request larger than the store may hold is refused while it arrives") {
    const int fd = connect_from("127.0.0.8", daemon.port);
    std::string frame = kHandshake + std::string("\x01", 1);  // SET
    wire::put_string(frame, "huge");
    wire::put_u64(frame, 4U << 20);  // a 4 MiB value (under --max-value-bytes' 64 MiB) ...
    send_all(fd, frame);
    send_all(fd, std::string(2U << 20, 'h'));  // ... closed once 1 MiB of it has arrived
    CHECK(closed_within(fd, 5s));
    ::close(fd);
    CHECK(daemon.count("bytes of one request arrived, more than the store may hold") == 1);
  }
  SECTION("requests arriving on many connections at once share one budget") {
    std::vector<int> fds;
    int closed = 0;
    for (int i = 0; i < 4; ++i) {
      const int fd = connect_from("127.0.0.8", daemon.port);
      std::string frame = kHandshake + std::string("\x01", 1);  // SET
      wire::put_string(frame, "part" + std::to_string(i));
      wire::put_u64(frame, 900U << 10);       // 900 KiB claimed (under the byte limit) ...
      frame += std::string(400U << 10, 'p');  // ... 400 KiB of it sent, the rest never
      send_all(fd, frame);
      if (closed_within(fd, 300ms)) ++closed;
      fds.push_back(fd);
    }
    // 2 x 400 KiB fit in 1 MiB; the third and fourth would not.
    CHECK(closed == 2);
    CHECK(daemon.count("bytes of requests still arriving on all connections") == 2);
    for (int fd : fds) ::close(fd);
  }
  SECTION("keys") {
    std::vector<std::string> keys;
    std::vector<std::string> values;
    for (int i = 0; i < 100; ++i) {
      keys.push_back("flood/" + std::to_string(i));
      values.emplace_back("v");
    }
    // 100 more keys beside the good clients' 32: past the limit of 100.
    const int fd = connect_from("127.0.0.8", daemon.port);
    send_all(fd, kHandshake + encode(wire::Command::kMultiSet, keys, values));
    CHECK(closed_within(fd, 5s));
    ::close(fd);
    CHECK(daemon.count("MULTI_SET of 'flood/0'") == 1);
    CHECK(daemon.count("(limit: ddpstore --max-keys / DDPLAUNCH_STORE_MAX_KEYS)") == 1);
    TcpStoreOptions o;
    o.port = daemon.port;
    TcpStore fresh(o);
    CHECK(fresh.num_keys() <= 100);
    CHECK_FALSE(fresh.check({"flood/0"}));  // refused as a whole, before anything was stored
  }
  good.stop();
  INFO(good.first_error());
  CHECK(good.failed() == 0);
  CHECK(good.ok() > 0);
}
