// Where the store server listens: IPv6 loopback, bracketed hosts, the dual-stack default,
// IPv4 only when asked; peer names and the program name in its log lines; bind errors; and
// the host agent's own connection failing at once where nothing listens. Loopback only.
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <memory>

#include "common/host_address.hpp"
#include "common/log.hpp"
#include "rendezvous/connect_store.hpp"
#include "rendezvous/store/server/listener.hpp"
#include "rendezvous/store/server/own_client.hpp"
#include "tests/store/raw_client.hpp"
#include "tests/support/stderr_capture.hpp"

using namespace ddp::rendezvous;
using ddp::ipv6_available;
using ddp::kAnyHost;
using namespace ddp::test;
using namespace std::chrono_literals;

namespace {

StoreServerOptions on(const std::string& host) {
  StoreServerOptions o;
  o.host = host;
  return o;
}

TcpStore client_at(const std::string& host, uint16_t port) {
  TcpStoreOptions o;
  o.host = host;
  o.port = port;
  o.timeout = 5s;
  o.connect_timeout = 5s;
  return TcpStore(o);
}

// True when a connection to host:port is refused (within a short retry window).
bool refused(const std::string& host, uint16_t port) {
  try {
    SocketConn::connect(host, port, 200ms);
    return false;
  } catch (const ddp::SocketError&) {
    return true;
  }
}

}  // namespace

TEST_CASE("a server on ::1 or [::1] serves IPv6 clients, and not IPv4 ones", "[server][ipv6]") {
  const std::string host = GENERATE(as<std::string>{}, "::1", "[::1]");
  INFO(host);
  StoreServer server(on(host));
  CHECK(server.address() == "[::1]:" + std::to_string(server.port()));
  auto a = client_at("::1", server.port());
  auto b = client_at("[::1]", server.port());
  a.set("k", "v6");
  CHECK(b.get("k") == "v6");
  CHECK_THAT(a.describe(), Catch::Contains("[::1]:" + std::to_string(server.port())));
  CHECK(refused("127.0.0.1", server.port()));
}

TEST_CASE("by default the server listens on every interface for IPv6 and IPv4", "[server][ipv6]") {
  StoreServer server(StoreServerOptions{});
  CHECK(server.host() == kAnyHost);
  const std::string port = std::to_string(server.port());
  if (!ipv6_available()) {
    CHECK(server.address() == "0.0.0.0:" + port + " (IPv4 only)");
    return;
  }
  CHECK(server.address() == "[::]:" + port + " (IPv6 and IPv4)");
  auto v4 = client_at("127.0.0.1", server.port());
  auto v6 = client_at("::1", server.port());
  auto named = client_at("localhost", server.port());
  v4.set("from", "v4");
  CHECK(v6.get("from") == "v4");
  v6.set("back", "v6");
  CHECK(v4.get("back") == "v6");
  CHECK(named.get("back") == "v6");
}

TEST_CASE("\"::\" is dual-stack, 0.0.0.0 stays IPv4 only", "[server][ipv6]") {
  {
    StoreServer any6(on("::"));
    CHECK_THAT(any6.address(), Catch::EndsWith("(IPv6 and IPv4)"));
    auto v4 = client_at("127.0.0.1", any6.port());
    v4.set("k", "v");
    CHECK(client_at("::1", any6.port()).get("k") == "v");
  }
  StoreServer any4(on("0.0.0.0"));
  CHECK(any4.address() == "0.0.0.0:" + std::to_string(any4.port()) + " (IPv4 only)");
  CHECK(refused("::1", any4.port()));
}

TEST_CASE("log lines name IPv4 peers of a dual-stack server as IPv4, IPv6 ones bracketed",
          "[server][ipv6]") {
  StoreServer server(StoreServerOptions{});
  StderrCapture log;
  for (const char* host : {"127.0.0.1", "::1"}) {
    auto conn = SocketConn::connect(host, server.port(), 5s);
    conn.send_all(std::string("\x00\xCE\xF7\x85\x3C\x63", 6), ddp::Deadline::after(5s));  // cmd 99
    CHECK_THROWS_AS(conn.recv_exact(1, ddp::Deadline::after(5s)), ddp::SocketError);      // closed
  }
  const auto lines = log.wait_lines(2);
  REQUIRE(lines.size() == 2);
  CHECK_THAT(lines[0], Catch::Contains("closing connection from 127.0.0.1:"));
  CHECK_THAT(lines[1], Catch::Contains("closing connection from [::1]:"));
}

TEST_CASE("log lines start with the program's name, whichever program hosts the store",
          "[server]") {
  // Until main names it, the program is this test binary; ddplaunch names itself, so the
  // store inside it does not call itself ddpstore.
  CHECK(ddp::log::program() == program_invocation_short_name);
  const std::string before = ddp::log::program();
  ddp::log::set_program("ddplaunch");
  StoreServer server(loopback());
  StderrCapture log;
  Raw bad(server.port());
  bad.send(std::string("\x63", 1));
  CHECK(bad.closed_by_server());
  const auto lines = log.wait_lines(1);
  ddp::log::set_program(before);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::StartsWith("ddplaunch: closing connection from 127.0.0.1:"));
}

TEST_CASE("bind errors name the bracketed address, the errno and what it means", "[server][ipv6]") {
  StoreServer first(on("::1"));
  const std::string where = "[::1]:" + std::to_string(first.port());
  try {
    StoreServerOptions again = on("[::1]");
    again.port = first.port();
    StoreServer second(again);
    FAIL("a second server bound " + where);
  } catch (const BindError& e) {
    CHECK(e.err() == EADDRINUSE);
    CHECK_THAT(e.what(), Catch::Contains("bind " + where) && Catch::Contains("in use"));
  }
  // 2001:db8::/32 is for documentation: never an address of this machine. Nothing is sent.
  CHECK_THROWS_WITH(StoreServer(on("2001:db8::1")),
                    Catch::Contains("[2001:db8::1]:0") &&
                        Catch::Contains("no interface of this machine has that address"));
}

TEST_CASE("the host's own connection fails at once where its store does not listen",
          "[server][ipv6]") {
  // A store bound to IPv4 loopback, dialled at ::1 as the workers would: an error naming
  // both addresses within the connect deadline, not a wait.
  StoreServer v4(loopback());
  const auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(connect_own_store("::1", v4, 500ms),
                    Catch::Contains("listens on 127.0.0.1:" + std::to_string(v4.port())) &&
                        Catch::Contains("does not answer at [::1]:" + std::to_string(v4.port())) &&
                        Catch::Contains("refused"));
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  // Where it does listen, the connection is ready to use.
  StoreServer v6(on("::1"));
  auto own = connect_own_store("[::1]", v6, 500ms);
  own->set("k", "v");
  CHECK(client_at("::1", v6.port()).get("k") == "v");
}
