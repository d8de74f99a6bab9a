#include "tests/support/http_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>

namespace ddp::test {
namespace {

// The body of a "Transfer-Encoding: chunked" reply, joined.
std::string dechunk(const std::string& raw) {
  std::string body;
  size_t at = 0;
  while (at < raw.size()) {
    const auto eol = raw.find("\r\n", at);
    if (eol == std::string::npos) break;
    const size_t size = std::stoul(raw.substr(at, eol - at), nullptr, 16);
    if (size == 0) break;
    body += raw.substr(eol + 2, size);
    at = eol + 2 + size + 2;
  }
  return body;
}

}  // namespace

std::string http_exchange(uint16_t port, const std::string& bytes,
                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  size_t sent = 0;
  while (sent < bytes.size()) {
    const auto n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string received;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) break;
    const auto n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    received.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return received;
}

HttpResponse http_request(uint16_t port, const std::string& method, const std::string& target,
                          std::chrono::milliseconds timeout) {
  const std::string request = method + " " + target +
                              " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                              "\r\nConnection: close\r\n\r\n";
  const auto raw = http_exchange(port, request, timeout);
  HttpResponse response;
  const auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.rfind("HTTP/1.", 0) != 0) return response;
  response.headers = raw.substr(0, end + 2);
  response.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  response.body = raw.substr(end + 4);
  std::string lower;
  for (char c : response.headers)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    response.body = dechunk(response.body);
  }
  return response;
}

std::string url_encode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace ddp::test
