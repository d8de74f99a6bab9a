#pragma once
// A tiny blocking HTTP/1.1 client for tests that talk to ddplaunch's health endpoint and to
// Prometheus: one request per connection (Connection: close), a deadline on everything.
#include <chrono>
#include <cstdint>
#include <string>

namespace ddp::test {

struct HttpResponse {
  int status = 0;       // 0: no status line came back (connection refused, closed, timed out)
  std::string headers;  // the status line and headers as received
  std::string body;
};

// Sends bytes to 127.0.0.1:port and returns everything the server sent until it closed the
// connection or timeout passed ("" when the connection was refused).
std::string http_exchange(uint16_t port, const std::string& bytes,
                          std::chrono::milliseconds timeout = std::chrono::seconds(10));
// METHOD target on 127.0.0.1:port, parsed (body de-chunked when the reply is chunked).
HttpResponse http_request(uint16_t port, const std::string& method, const std::string& target,
                          std::chrono::milliseconds timeout = std::chrono::seconds(10));
inline HttpResponse http_get(uint16_t port, const std::string& target) {
  return http_request(port, "GET", target);
}
// target with every character that is not unreserved %-encoded (for query strings).
std::string url_encode(const std::string& text);

}  // namespace ddp::test
