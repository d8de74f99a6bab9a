// The ddpstore binary: --port 0 prints the port first, clients work, SIGINT/SIGTERM stop it.
#include <catch2/catch.hpp>
#include <csignal>
#include <future>

#include "child_process.hpp"
#include "common/error.hpp"
#include "rendezvous/tcp_store.hpp"

using namespace ddp::rendezvous;
using namespace std::chrono_literals;

namespace {
const std::string kDdpstore = std::string(DDP_BINARY_DIR) + "/ddpstore";
}

TEST_CASE("ddpstore serves on the port it prints and stops on SIGTERM/SIGINT", "[ddpstore]") {
  const int signo = GENERATE(SIGTERM, SIGINT);
  ddp::test::ChildProcess daemon({kDdpstore, "--host", "127.0.0.1", "--port", "0"}, {});
  // stdout and stderr share the pipe; stdout's first line is the port.
  const std::string line = daemon.first_line(10s);
  INFO(daemon.output());
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
  CHECK_THAT(daemon.output(), Catch::Contains(signo == SIGINT ? "SIGINT" : "SIGTERM"));
}

TEST_CASE("ddpstore rejects a bad port and an address it cannot bind", "[ddpstore]") {
  {
    ddp::test::ChildProcess bad_port({kDdpstore, "--port", "70000"}, {});
    CHECK(bad_port.wait(10s) != 0);
    CHECK_THAT(bad_port.output(), Catch::Contains("70000"));
  }
  {
    // 192.0.2.1 (TEST-NET-1) is never a local address: bind fails, nothing is sent anywhere.
    ddp::test::ChildProcess bad_host({kDdpstore, "--host", "192.0.2.1", "--port", "0"}, {});
    CHECK(bad_host.wait(10s) == 1);
    CHECK_THAT(bad_host.output(), Catch::Contains("192.0.2.1") && Catch::Contains("bind"));
  }
}
