// SocketConn: connect with retries, sends and exact reads bounded by deadlines, a peer that
// closes, IPv4 and IPv6 loopback (bare and bracketed literals).
#include "common/socket_io.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "common/host_address.hpp"

using Catch::Contains;
using ddp::Deadline;
using ddp::Fd;
using ddp::SocketConn;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// A listening socket on loopback (127.0.0.1 or ::1), port chosen by the kernel.
struct Listener {
  explicit Listener(bool v6 = false) {
    fd.reset(::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(fd);
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (v6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
      in6->sin6_family = AF_INET6;
      in6->sin6_addr = in6addr_loopback;
      len = sizeof(sockaddr_in6);
    } else {
      auto* in = reinterpret_cast<sockaddr_in*>(&addr);
      in->sin_family = AF_INET;
      in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof(sockaddr_in);
    }
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0);
    REQUIRE(::listen(fd.get(), 8) == 0);
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  // The next connection (the kernel completed its handshake already).
  SocketConn accept() const {
    Fd conn(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(conn);
    return SocketConn(std::move(conn));
  }
  Fd fd;
  uint16_t port = 0;
};

// A port nothing listens on (bound once, then released).
uint16_t closed_port() {
  const Listener gone;
  return gone.port;
}

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

}  // namespace

TEST_CASE("socket_io: bytes go both ways over IPv4 loopback", "[socket_io]") {
  const Listener server;
  SocketConn client = SocketConn::connect("127.0.0.1", server.port, 5s);
  SocketConn peer = server.accept();
  CHECK(client.is_open());
  CHECK_FALSE(client.readable_now());
  client.send_all("hello", Deadline::after(5s));
  CHECK(peer.recv_exact(5, Deadline::after(5s)) == "hello");
  peer.send_all(std::string("\x03\0\0\0\0\0\0\0abc", 11), Deadline::after(5s));
  CHECK(client.recv_string(Deadline::after(5s)) == "abc");
  CHECK(client.recv_exact(0, Deadline::after(0ms)).empty());
}

TEST_CASE("socket_io: IPv6 loopback, bare and bracketed", "[socket_io][ipv6]") {
  if (!ddp::ipv6_available()) {
    WARN("no IPv6 on this machine: skipped");
    return;
  }
  const Listener server(/*v6=*/true);
  for (const char* host : {"::1", "[::1]", "0:0:0:0:0:0:0:1"}) {
    INFO(host);
    SocketConn client = SocketConn::connect(host, server.port, 5s);
    SocketConn peer = server.accept();
    peer.send_all("v6", Deadline::after(5s));
    CHECK(client.recv_exact(2, Deadline::after(5s)) == "v6");
  }
}

TEST_CASE("socket_io: a read with nothing to read times out at its deadline", "[socket_io]") {
  const Listener server;
  SocketConn client = SocketConn::connect("127.0.0.1", server.port, 5s);
  const SocketConn peer = server.accept();
  const auto start = Clock::now();
  CHECK_THROWS_AS(client.recv_exact(1, Deadline::after(150ms)), ddp::SocketTimeout);
  CHECK(since(start) >= 150ms);
  CHECK(since(start) < 3s);
  CHECK(client.is_open());  // a timeout leaves the connection to the caller
}

TEST_CASE("socket_io: a peer that closes fails the read at once, not at the deadline",
          "[socket_io]") {
  const Listener server;
  SocketConn client = SocketConn::connect("127.0.0.1", server.port, 5s);
  {
    SocketConn peer = server.accept();
    peer.send_all("ab", Deadline::after(5s));
  }                              // closed here
  CHECK(client.readable_now());  // EOF is readable
  const auto start = Clock::now();
  try {
    client.recv_exact(3, Deadline::after(10s));  // 2 bytes arrive, then EOF
    FAIL("no error");
  } catch (const ddp::SocketTimeout&) {
    FAIL("a closed peer was waited out");
  } catch (const ddp::SocketError& e) {
    CHECK_THAT(e.what(), Contains("connection closed by the peer"));
  }
  CHECK(since(start) < 2s);
}

TEST_CASE("socket_io: a send the peer never reads times out", "[socket_io]") {
  const Listener server;
  SocketConn client = SocketConn::connect("127.0.0.1", server.port, 5s);
  const SocketConn peer = server.accept();  // never reads
  const std::string big(64 << 20, 'x');     // more than both socket buffers hold
  const auto start = Clock::now();
  CHECK_THROWS_AS(client.send_all(big, Deadline::after(200ms)), ddp::SocketTimeout);
  CHECK(since(start) >= 200ms);
  CHECK(since(start) < 5s);
}

TEST_CASE("socket_io: a refused connect retries until its timeout and names what it tried",
          "[socket_io]") {
  const uint16_t port = closed_port();
  const auto start = Clock::now();
  try {
    SocketConn::connect("127.0.0.1", port, 200ms, "store");
    FAIL("connected to a closed port");
  } catch (const ddp::SocketError& e) {
    const std::string endpoint = "127.0.0.1:" + std::to_string(port);
    CHECK_THAT(e.what(),
               Contains("cannot connect to store at tcp://" + endpoint + " within 200 ms") &&
                   Contains("attempts; tried " + endpoint) && Contains("Connection refused"));
  }
  CHECK(since(start) >= 200ms);
  CHECK(since(start) < 3s);
}

TEST_CASE("socket_io: an IPv6 endpoint is bracketed in errors", "[socket_io][ipv6]") {
  if (!ddp::ipv6_available()) {
    WARN("no IPv6 on this machine: skipped");
    return;
  }
  const uint16_t port = Listener(/*v6=*/true).port;
  CHECK_THROWS_WITH(SocketConn::connect("[::1]", port, 50ms, "rank 1"),
                    Contains("cannot connect to rank 1 at tcp://[::1]:" + std::to_string(port)) &&
                        Contains("tried [::1]:" + std::to_string(port)));
}

TEST_CASE("socket_io: a length over the limit is a protocol error", "[socket_io]") {
  const Listener server;
  SocketConn client = SocketConn::connect("127.0.0.1", server.port, 5s);
  SocketConn peer = server.accept();
  peer.send_all(std::string("\x10\0\0\0\0\0\0\0", 8), Deadline::after(5s));  // 16 bytes follow
  CHECK_THROWS_AS(client.recv_string(Deadline::after(5s), 8), ddp::ProtocolError);
}

TEST_CASE("socket_io: a closed or moved-from connection says it is not connected", "[socket_io]") {
  const Listener server;
  SocketConn client = SocketConn::connect("127.0.0.1", server.port, 5s);
  SocketConn moved = std::move(client);
  CHECK(moved.is_open());
  CHECK_FALSE(client.is_open());  // NOLINT(bugprone-use-after-move): the moved-from state
  CHECK_THROWS_WITH(client.send_all("x", Deadline::after(1s)), Contains("not connected"));
  moved.close();
  CHECK_FALSE(moved.is_open());
  CHECK_THROWS_AS(moved.recv_exact(1, Deadline::after(1s)), ddp::SocketError);
}

TEST_CASE("socket_io: poll_until reports readiness or the deadline", "[socket_io]") {
  const Listener server;
  SocketConn client = SocketConn::connect("127.0.0.1", server.port, 5s);
  SocketConn peer = server.accept();
  CHECK_FALSE(ddp::poll_until(client.fd(), POLLIN, Deadline::after(50ms)));
  CHECK(ddp::poll_until(client.fd(), POLLOUT, Deadline::after(50ms)));
  peer.send_all("x", Deadline::after(1s));
  CHECK(ddp::poll_until(client.fd(), POLLIN, Deadline::after(5s)));
}

TEST_CASE("socket_io: a refused connect ends at once when asked (a server that was there is gone)",
          "[socket_io]") {
  const uint16_t port = closed_port();
  try {
    SocketConn::connect("127.0.0.1", port, 30s, "store", /*give_up_when_refused=*/true);
    FAIL("connected to a closed port");
  } catch (const ddp::SocketError& e) {
    // One attempt, not the ~20 a 30 s timeout's back-off would make.
    CHECK_THAT(e.what(), Contains("(1 attempts;") && Contains("Connection refused"));
  }
}
