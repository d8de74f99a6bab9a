// The health endpoint's HTTP transport on a real loopback socket (port 0), its loop in a
// thread: requests reach the handler, and bad, slow, oversized or too many clients are cut
// off without stopping anyone else from being served.
#include "launcher/health/health_server.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/wait_until.hpp"

using namespace ddp::launcher;
using namespace ddp::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using namespace std::chrono_literals;

namespace {

// A server whose handler echoes the method and target, its loop on a thread of its own.
class Served {
 public:
  explicit Served(HealthServerOptions options = {}) {
    server_ = std::make_unique<HealthServer>(
        io_, options, [](std::string_view method, std::string_view target) {
          HttpReply reply;
          reply.body = std::string(method) + " " + std::string(target) + "\n";
          return reply;
        });
    port_ = server_->port();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Served() {
    boost::asio::post(io_, [this] { server_.reset(); });
    io_.stop();
    thread_.join();
    server_.reset();
  }
  Served(const Served&) = delete;
  Served& operator=(const Served&) = delete;
  [[nodiscard]] uint16_t port() const { return port_; }

 private:
  boost::asio::io_context io_;
  std::unique_ptr<HealthServer> server_;
  std::thread thread_;
  uint16_t port_ = 0;
};

// A raw client connection to 127.0.0.1:port.
class RawClient {
 public:
  explicit RawClient(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void send(const std::string& bytes) const {
    REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  // Reads until text has arrived (true) or guard passes.
  bool read_until(const std::string& text, std::chrono::milliseconds guard) {
    return wait_until([&] { return poll_read(10) && received_.find(text) != std::string::npos; },
                      guard) ||
           received_.find(text) != std::string::npos;
  }
  // Reads until the server closes the connection (true) or guard passes.
  bool closed_within(std::chrono::milliseconds guard) {
    return wait_until([&] { return !poll_read(10) && eof_; }, guard);
  }
  [[nodiscard]] const std::string& received() const { return received_; }

 private:
  // Reads what is there; false once the peer closed (or on error).
  bool poll_read(int timeout_ms) {
    if (eof_) return false;
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return true;
    char buffer[4096];
    const auto n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    received_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  std::string received_;
  bool eof_ = false;
};

}  // namespace

TEST_CASE("health server: a GET reaches the handler and its reply comes back", "[health]") {
  Served served;
  auto reply = http_get(served.port(), "/health?verbose=1");
  CHECK(reply.status == 200);
  CHECK(reply.body == "GET /health?verbose=1\n");
  CHECK_THAT(reply.headers, Contains("Content-Type: text/plain; charset=utf-8"));
  CHECK_THAT(reply.headers, Contains("Server: ddplaunch"));
}

TEST_CASE("health server: keep-alive serves several requests on one connection", "[health]") {
  Served served;
  RawClient client(served.port());
  client.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  REQUIRE(client.read_until("GET /b", 10s));
  CHECK_THAT(client.received(), Contains("GET /a"));
  client.send("GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(client.closed_within(10s));
  CHECK_THAT(client.received(), Contains("GET /c"));
}

TEST_CASE("health server: a malformed request gets 400 and others are still served", "[health]") {
  Served served;
  const auto reply = http_exchange(served.port(), "NOT HTTP AT ALL\r\n\r\n");
  CHECK_THAT(reply, StartsWith("HTTP/1.1 400"));
  const auto binary = http_exchange(served.port(), std::string("\x00\x01\x02\xff\r\n\r\n", 8));
  CHECK_THAT(binary, StartsWith("HTTP/1.1 400"));
  CHECK(http_get(served.port(), "/health").status == 200);
}

TEST_CASE("health server: oversized headers get 431, an oversized body 413", "[health]") {
  HealthServerOptions options;
  options.max_request_bytes = 1024;
  Served served(options);
  const auto big_header = http_exchange(
      served.port(), "GET / HTTP/1.1\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n");
  CHECK_THAT(big_header, StartsWith("HTTP/1.1 431"));
  const auto big_body = http_exchange(
      served.port(), "POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n" + std::string(2048, 'b'));
  CHECK_THAT(big_body, StartsWith("HTTP/1.1 413"));
  CHECK(http_get(served.port(), "/health").status == 200);
}

TEST_CASE("health server: a silent client is dropped at the deadline, others are served meanwhile",
          "[health]") {
  HealthServerOptions options;
  options.request_timeout = 300ms;
  Served served(options);
  RawClient silent(served.port());
  RawClient half(served.port());
  half.send("GET /health HTTP/1.1\r\nHost: x\r\n");  // never finishes its headers
  CHECK(http_get(served.port(), "/health").status == 200);
  CHECK(silent.closed_within(20s));
  CHECK(half.closed_within(20s));
  CHECK(silent.received().empty());
}

TEST_CASE("health server: connections beyond the limit are closed, the open ones go on",
          "[health]") {
  HealthServerOptions options;
  options.max_connections = 2;
  Served served(options);
  auto a = std::make_unique<RawClient>(served.port());
  RawClient b(served.port());
  // Both accepted and served (kept alive): the server holds two connections now.
  a->send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  REQUIRE(a->read_until("GET /a", 10s));
  REQUIRE(b.read_until("GET /b", 10s));
  RawClient third(served.port());
  third.send("GET /c HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(third.closed_within(10s));
  CHECK(third.received().empty());
  // The two served ones still are.
  b.send("GET /b2 HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(b.read_until("GET /b2", 10s));
  // One going away makes room again.
  a.reset();
  CHECK(wait_until([&] { return http_get(served.port(), "/again").status == 200; }, 10s));
}

TEST_CASE("health server: a port in use is an error naming it", "[health]") {
  Served first;
  boost::asio::io_context io;
  HealthServerOptions options;
  options.port = first.port();
  try {
    HealthServer second(io, options,
                        [](std::string_view, std::string_view) { return HttpReply{}; });
    FAIL("a second server bound the same port");
  } catch (const ddp::ConfigError& e) {
    const std::string port = std::to_string(first.port());
    CHECK_THAT(e.what(), Contains("--health_port=" + port));
    CHECK_THAT(e.what(), Contains("127.0.0.1:" + port));
    CHECK_THAT(e.what(), Contains("in use"));
  }
}

TEST_CASE("health server: a bind address that is not an address is an error naming it",
          "[health]") {
  boost::asio::io_context io;
  HealthServerOptions options;
  options.host = "not-an-address";
  try {
    HealthServer server(io, options,
                        [](std::string_view, std::string_view) { return HttpReply{}; });
    FAIL("bound to a name");
  } catch (const ddp::ConfigError& e) {
    CHECK_THAT(e.what(), Contains("--health_bind=not-an-address: expected an IP address"));
  }
}

TEST_CASE("health server: IPv6 loopback and the URL it prints", "[health]") {
  if (!ddp::ipv6_available()) {
    WARN("no IPv6 on this machine: skipped");
    return;
  }
  boost::asio::io_context io;
  HealthServerOptions options;
  options.host = "[::1]";
  HealthServer server(io, options, [](std::string_view, std::string_view) { return HttpReply{}; });
  CHECK(server.url() == "http://[::1]:" + std::to_string(server.port()));
}
