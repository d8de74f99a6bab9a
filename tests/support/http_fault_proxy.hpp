#pragma once
// A loopback TCP proxy in front of one HTTP/1.1 server (an etcd member) that breaks chosen
// requests in chosen ways: how tests give a client an unknown outcome on demand (the server
// applied the request, the client never hears so). Requests are framed by Content-Length;
// replies pass through as bytes (streamed watches included). Header only, like io_loop.hpp.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ddp::test {

class HttpFaultProxy {
 public:
  enum class Fault {
    // Close the client's connection without forwarding the request.
    kDropBeforeForward,
    // Forward it; once the server's reply begins (it has applied the request), close the
    // client's connection without passing any of the reply on.
    kDropAfterReply,
    // Forward it and swallow the reply; keep the client's connection open, silent, until the
    // client closes it (a member holding a request past the client's attempt timeout).
    kHoldAfterReply,
    // Forward it, swallow the reply, and answer gRPC UNAVAILABLE as etcd does when a
    // proposal timed out ("etcdserver: request timed out", HTTP 503, code 14).
    kUnavailableAfterReply,
  };
  struct Rule {
    std::string target;         // the request's path, e.g. "/v3/kv/txn"
    std::string body_contains;  // a substring of its body ("" = any)
    Fault fault = Fault::kDropAfterReply;
    int skip = 0;   // matching requests passed on before the first fault
    int count = 1;  // faults in all
    int every = 1;  // after the first, every n-th matching request gets one
    // Called on the proxy's thread when a fault happens: after the server's reply began
    // (the after-reply faults) or before dropping, always before the client sees anything.
    std::function<void()> on_fault;
  };

  // Listens on a free loopback port and forwards each connection to host:port.
  HttpFaultProxy(std::string host, uint16_t port) : host_(std::move(host)), port_(port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("HttpFaultProxy: cannot listen on loopback");
    }
    listen_port_ = ntohs(addr.sin_port);
    if (::pipe2(stop_pipe_.data(), O_CLOEXEC) != 0) {
      throw std::runtime_error("HttpFaultProxy: pipe");
    }
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~HttpFaultProxy() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    const char byte = 0;
    (void)!::write(stop_pipe_[1], &byte, 1);
    acceptor_.join();
    std::vector<std::thread> threads;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      threads.swap(connections_);
    }
    for (auto& t : threads) t.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }
  HttpFaultProxy(const HttpFaultProxy&) = delete;
  HttpFaultProxy& operator=(const HttpFaultProxy&) = delete;

  // "127.0.0.1:<port>", for a client's endpoint list.
  [[nodiscard]] std::string endpoint() const { return "127.0.0.1:" + std::to_string(listen_port_); }
  // Replaces the rule (and its counts); requests from then on are matched against it.
  void arm(Rule rule) {
    const std::lock_guard<std::mutex> lock(mu_);
    rule_ = std::move(rule);
    armed_ = true;
    matched_ = 0;
    applied_ = 0;
  }
  // Faults applied under the current rule so far.
  [[nodiscard]] int faults() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return applied_;
  }

 private:
  static bool send_all(int fd, const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  // The length of the first whole request in buf (0 while incomplete), with its target and
  // body.
  static size_t next_request(const std::string& buf, std::string& target, std::string& body) {
    const size_t header_end = buf.find("\r\n\r\n");
    if (header_end == std::string::npos) return 0;
    std::string header = buf.substr(0, header_end);
    const size_t sp1 = header.find(' ');
    const size_t sp2 = header.find(' ', sp1 + 1);
    target = header.substr(sp1 + 1, sp2 - sp1 - 1);
    std::transform(header.begin(), header.end(), header.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    size_t length = 0;
    const size_t cl = header.find("\r\ncontent-length:");
    if (cl != std::string::npos) length = std::stoul(header.substr(cl + 17));
    const size_t total = header_end + 4 + length;
    if (buf.size() < total) return 0;
    body = buf.substr(header_end + 4, length);
    return total;
  }

  // The rule's fault for this request, if it gets one (and counts it).
  bool takes_fault(const std::string& target, const std::string& body, Rule& rule) {
    const std::lock_guard<std::mutex> lock(mu_);
    if (!armed_ || applied_ >= rule_.count || target != rule_.target ||
        body.find(rule_.body_contains) == std::string::npos) {
      return false;
    }
    const int n = matched_++;
    if (n < rule_.skip || (n - rule_.skip) % std::max(rule_.every, 1) != 0) return false;
    ++applied_;
    rule = rule_;
    return true;
  }

  void accept_loop() {
    for (;;) {
      const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) {
        if (stopping_) return;
        continue;
      }
      const std::lock_guard<std::mutex> lock(mu_);
      connections_.emplace_back([this, client] { serve(client); });
    }
  }

  int connect_upstream() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    ::inet_pton(AF_INET, host_.c_str(), &addr.sin_addr);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    if (fd >= 0) ::close(fd);
    return -1;
  }

  // One client connection: requests upstream (each matched against the rule), replies back.
  void serve(int client) {
    const int upstream = connect_upstream();
    std::string from_client;
    bool pending = false;  // a faulted request was forwarded; its reply has not begun
    bool holding = false;  // swallowing replies until the client closes
    Rule fault;
    std::vector<char> buf(size_t{64} * 1024);
    while (upstream >= 0 && !stopping_) {
      std::array<pollfd, 3> fds = {pollfd{client, POLLIN, 0}, pollfd{upstream, POLLIN, 0},
                                   pollfd{stop_pipe_[0], POLLIN, 0}};
      if (::poll(fds.data(), fds.size(), -1) < 0) break;
      if (fds[2].revents != 0) break;
      if (fds[0].revents != 0) {
        const ssize_t n = ::recv(client, buf.data(), buf.size(), 0);
        if (n <= 0) break;
        if (holding) continue;
        from_client.append(buf.data(), static_cast<size_t>(n));
        std::string target;
        std::string body;
        bool drop = false;
        while (size_t size = next_request(from_client, target, body)) {
          Rule rule;
          if (takes_fault(target, body, rule)) {
            if (rule.fault == Fault::kDropBeforeForward) {
              if (rule.on_fault) rule.on_fault();
              drop = true;
              break;
            }
            pending = true;
            fault = std::move(rule);
          }
          if (!send_all(upstream, from_client.data(), size)) drop = true;
          from_client.erase(0, size);
        }
        if (drop) break;
      }
      if (fds[1].revents != 0) {
        const ssize_t n = ::recv(upstream, buf.data(), buf.size(), 0);
        if (n <= 0) break;
        if (holding) continue;
        if (pending) {
          pending = false;
          if (fault.on_fault) fault.on_fault();
          if (fault.fault == Fault::kDropAfterReply) break;
          if (fault.fault == Fault::kHoldAfterReply) {
            holding = true;
            continue;
          }
          const std::string json = R"({"error":"etcdserver: request timed out","code":14,)"
                                   R"("message":"etcdserver: request timed out"})";
          const std::string reply =
              "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
              "Connection: close\r\nContent-Length: " +
              std::to_string(json.size()) + "\r\n\r\n" + json;
          send_all(client, reply.data(), reply.size());
          break;
        }
        if (!send_all(client, buf.data(), static_cast<size_t>(n))) break;
      }
    }
    if (upstream >= 0) ::close(upstream);
    ::close(client);
  }

  std::string host_;
  uint16_t port_;
  int listen_fd_ = -1;
  uint16_t listen_port_ = 0;
  std::array<int, 2> stop_pipe_{-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::thread> connections_;
  Rule rule_;
  bool armed_ = false;
  int matched_ = 0;
  int applied_ = 0;
};

}  // namespace ddp::test
