// The ddpstore binary: --port 0 prints the port first, clients work, SIGINT/SIGTERM stop it.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/socket_io.hpp"
#include "common/version.hpp"
#include "rendezvous/store/tcp_store.hpp"
#include "rendezvous/store/wire_codec.hpp"
#include "tests/support/files.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

using namespace ddp::rendezvous;
using ddp::SocketConn;
using namespace std::chrono_literals;
namespace wire = ddp::rendezvous::wire;

namespace {
const std::string kDdpstore = ddp::test::build_path("ddpstore");

// argv with stdout and stderr in one capture (stdout's first line is the port).
ddp::test::ChildOptions merged(std::vector<std::string> argv) {
  ddp::test::ChildOptions options;
  options.argv = std::move(argv);
  options.merge_stderr = true;
  return options;
}
}  // namespace

TEST_CASE("ddpstore serves on the port it prints and stops on SIGTERM/SIGINT", "[ddpstore]") {
  const int signo = GENERATE(SIGTERM, SIGINT);
  ddp::test::ChildProcess daemon(merged({kDdpstore, "--host", "127.0.0.1", "--port", "0"}));
  // stdout and stderr share one capture; stdout's first line is the port.
  const std::string line = daemon.first_line(10s);
  INFO(daemon.out());
  const int port = std::stoi(line);
  REQUIRE(port > 0);

  TcpStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.timeout = 30s;
  TcpStore store(o);
  store.set("k", "v");
  CHECK(store.get("k") == "v");
  auto blocked = std::async(std::launch::async, [&] { store.wait({"never"}, 30s); });
  CHECK(blocked.wait_for(100ms) == std::future_status::timeout);

  daemon.signal(signo);
  CHECK(daemon.wait(10s) == 0);
  // The client blocked in a wait learns at once that the server is gone.
  REQUIRE(blocked.wait_for(10s) == std::future_status::ready);
  CHECK_THROWS_AS(blocked.get(), ddp::StoreError);
  CHECK_THAT(daemon.out(), Catch::Contains(signo == SIGINT ? "SIGINT" : "SIGTERM"));
}

TEST_CASE("ddpstore --io picks the backend and says which one serves", "[ddpstore]") {
  ddp::test::ChildProcess daemon(
      merged({kDdpstore, "--host", "127.0.0.1", "--port", "0", "--io", "epoll"}));
  const int port = std::stoi(daemon.first_line(10s));
  TcpStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  TcpStore store(o);
  store.set("k", "v");
  CHECK(store.get("k") == "v");
  daemon.signal(SIGTERM);
  CHECK(daemon.wait(10s) == 0);
  CHECK_THAT(daemon.out(),
             Catch::Contains("serving on 127.0.0.1:" + std::to_string(port) + " with epoll\n"));
}

TEST_CASE("ddpstore --host ::1 or [::1] serves IPv6 loopback, by default IPv6 and IPv4",
          "[ddpstore][ipv6]") {
  const std::string host = GENERATE(as<std::string>{}, "::1", "[::1]", "");
  INFO("--host '" << host << "'");
  std::vector<std::string> argv{kDdpstore, "--port", "0"};
  if (!host.empty()) argv.insert(argv.end(), {"--host", host});
  ddp::test::ChildProcess daemon(merged(argv));
  const int port = std::stoi(daemon.first_line(10s));
  TcpStoreOptions o;
  o.host = "::1";
  o.port = static_cast<uint16_t>(port);
  TcpStore store(o);
  store.set("k", "v6");
  CHECK(store.get("k") == "v6");
  daemon.signal(SIGTERM);
  CHECK(daemon.wait(10s) == 0);
  const std::string listening = host.empty() ? "[::]:" + std::to_string(port) + " (IPv6 and IPv4)"
                                             : "[::1]:" + std::to_string(port);
  CHECK_THAT(daemon.out(), Catch::Contains("ddpstore: serving on " + listening + " with "));
}

TEST_CASE("ddpstore --version prints its name and version and exits 0", "[ddpstore]") {
  auto result = ddp::test::run_process(std::vector<std::string>{kDdpstore, "--version"}, 10s);
  CHECK(result.exit_code == 0);
  CHECK(result.output == std::string("ddpstore ") + ddp::kVersion + "\n");
}

TEST_CASE("ddpstore rejects a bad port, --io value and an address it cannot bind", "[ddpstore]") {
  {
    ddp::test::ChildProcess bad_port(merged({kDdpstore, "--port", "70000"}));
    CHECK(bad_port.wait(10s) != 0);
    CHECK_THAT(bad_port.out(), Catch::Contains("70000"));
  }
  {
    // 192.0.2.1 (TEST-NET-1) is never a local address: bind fails, nothing is sent anywhere.
    ddp::test::ChildProcess bad_host(merged({kDdpstore, "--host", "192.0.2.1", "--port", "0"}));
    CHECK(bad_host.wait(10s) == 1);
    CHECK_THAT(bad_host.out(), Catch::Contains("192.0.2.1") && Catch::Contains("bind"));
  }
  {
    ddp::test::ChildProcess bad_io(merged({kDdpstore, "--port", "0", "--io", "kqueue"}));
    CHECK(bad_io.wait(10s) != 0);
    CHECK_THAT(bad_io.out(), Catch::Contains("--io") && Catch::Contains("kqueue"));
  }
}

namespace {
// Resident memory of a process in KiB (VmRSS), 0 if unreadable.
long rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}
}  // namespace

TEST_CASE("ddpstore memory does not grow with garbage or with lengths it never receives",
          "[ddpstore][garbage]") {
  ddp::test::ChildProcess daemon(merged({kDdpstore, "--host", "127.0.0.1", "--port", "0"}));
  const int port = std::stoi(daemon.first_line(10s));
  REQUIRE(port > 0);
  TcpStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  TcpStore store(o);
  store.set("k", "v");
  const long before = rss_kib(daemon.pid());
  REQUIRE(before > 0);
  std::mt19937 rng(7);
  std::vector<SocketConn> open;  // held open while measuring: nothing is freed yet
  for (int i = 0; i < 200; ++i) {
    SocketConn c = SocketConn::connect("127.0.0.1", static_cast<uint16_t>(port), 5s);
    std::string frame("\x00\xCE\xF7\x85\x3C\x01", 6);  // 2.x SET ...
    wire::put_string(frame, "key");
    wire::put_u64(frame, 60u * 1024 * 1024);  // ... of a 60 MiB value (allowed) never sent
    frame += std::string(1000, 'x');
    if (i % 4 == 3) {  // or plain random bytes, which the server closes at once
      frame.resize(2000);
      for (auto& ch : frame) ch = static_cast<char>(rng());
    }
    c.send_all(frame, ddp::Deadline::after(5s));
    open.push_back(std::move(c));
  }
  CHECK(store.get("k") == "v");
  const long after = rss_kib(daemon.pid());
  INFO("VmRSS before " << before << " KiB, after " << after << " KiB");
  // 150 claimed 60 MiB values would be 9 GB if pre-allocated; 64 KiB buffers are ~10 MiB.
  CHECK(after - before < 32 * 1024);
  open.clear();  // every connection now ends mid-frame
  daemon.signal(SIGTERM);
  CHECK(daemon.wait(10s) == 0);
}

TEST_CASE("ddpstore out of file descriptors says so once and recovers", "[ddpstore]") {
  // Hard limit 64: more clients than descriptors.
  ddp::test::ChildProcess daemon(merged(
      {"/usr/bin/prlimit", "--nofile=64:64", kDdpstore, "--host", "127.0.0.1", "--port", "0"}));
  const int port = std::stoi(daemon.first_line(10s));
  REQUIRE(port > 0);
  {
    std::vector<SocketConn> crowd;  // the kernel completes these even when ddpstore cannot accept
    for (int i = 0; i < 100; ++i) {
      crowd.push_back(SocketConn::connect("127.0.0.1", static_cast<uint16_t>(port), 5s));
    }
    std::this_thread::sleep_for(300ms);
  }  // all closed: descriptors come back
  TcpStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.timeout = 20s;
  TcpStore store(o);
  store.set("k", "v");
  CHECK(store.get("k") == "v");
  daemon.signal(SIGTERM);
  CHECK(daemon.wait(10s) == 0);
  const std::string out = daemon.out();
  CHECK_THAT(out, Catch::Contains("accept failed") && Catch::Contains("Too many open files") &&
                      Catch::Contains("accepting again"));
  // One line per streak, not one per retry.
  size_t failures = 0;
  for (size_t pos = 0; (pos = out.find("accept failed", pos)) != std::string::npos; ++pos) {
    ++failures;
  }
  CHECK(failures <= 2);
}

TEST_CASE("ddpstore --secret_file: only clients with the secret get in, a loose file stops it",
          "[ddpstore][auth]") {
  ddp::test::TempDir dir;
  const std::string secret = dir.write("job.secret", "s3cret\n");
  REQUIRE(::chmod(secret.c_str(), 0600) == 0);
  ddp::test::ChildProcess daemon(
      merged({kDdpstore, "--host", "127.0.0.1", "--port", "0", "--secret_file", secret}));
  const int port = std::stoi(daemon.first_line(10s));
  TcpStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.timeout = 10s;
  o.connect_timeout = 5s;
  o.secret = "s3cret";
  TcpStore store(o);
  store.set("/rdzv/k", "v");
  CHECK(store.get("/rdzv/k") == "v");
  o.secret.clear();
  CHECK_THROWS_AS(TcpStore(o), ddp::AuthError);
  daemon.signal(SIGTERM);
  CHECK(daemon.wait(10s) == 0);
  CHECK_THAT(daemon.out(), Catch::Contains("(job secret required)"));
  CHECK_THAT(daemon.out(), Catch::Contains("without proving the job secret"));

  REQUIRE(::chmod(secret.c_str(), 0644) == 0);
  ddp::test::ChildProcess loose(
      merged({kDdpstore, "--host", "127.0.0.1", "--port", "0", "--secret_file", secret}));
  CHECK(loose.wait(10s) == 1);
  CHECK_THAT(loose.out(),
             Catch::Contains("secret file " + secret + " has mode 0644, expected 0600 (chmod 600 " +
                             secret + ")"));
}
