#pragma once
// The health endpoint's HTTP/1.1 transport (Boost.Beast) on the agent's own io_context: no
// thread of its own. It only moves bytes: each request's method and target go to a handler
// (health_routes.hpp), whose reply it writes. It must never hurt the agent: a request has
// a deadline (a slow or silent client is dropped), a small size limit (malformed or oversized
// requests get 400/413/431 and are closed), and few connections are served at once (more are
// closed at once). docs/operations.md, "Health and metrics".
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ddp::launcher {

struct HttpReply {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string allow;  // the Allow header of a 405 (else empty: not sent)
};

// Answers one request; called on the loop.
using HttpHandler = std::function<HttpReply(std::string_view method, std::string_view target)>;

struct HealthServerOptions {
  std::string host = "127.0.0.1";  // a numeric address, "localhost", or "0.0.0.0" / "::"
  uint16_t port = 0;               // 0: the kernel picks a free one
  int max_connections = 8;         // served at once; more are closed on accept
  // For a whole request to arrive (and for an idle keep-alive connection to send the next).
  std::chrono::milliseconds request_timeout{10000};
  size_t max_request_bytes = 8192;  // request line, headers and body together
};

class HealthServer {
 public:
  // Listens on host:port and serves on io from now on. ConfigError naming the address
  // (and the flags) when host is not an address or the port cannot be bound.
  HealthServer(boost::asio::io_context& io, HealthServerOptions options, HttpHandler handler);
  // Stops listening and closes every connection; the handler is not called after this.
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  // The port bound (the kernel's choice for port 0).
  [[nodiscard]] uint16_t port() const;
  // "http://127.0.0.1:PORT" ("http://[::1]:PORT" for IPv6).
  [[nodiscard]] std::string url() const;

  struct State;  // shared with the connections, which may outlive the server in the loop

 private:
  std::shared_ptr<State> state_;
};

}  // namespace ddp::launcher
