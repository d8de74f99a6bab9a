#include "rendezvous/listener.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"

namespace ddp::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

Listener::Listener(const std::string& host, uint16_t port) {
  const std::string where = host + ":" + std::to_string(port);
  boost::system::error_code ec;
  tcp::endpoint endpoint;
  auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, port);
  } else {
    asio::io_context io;
    tcp::resolver resolver(io);
    auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      throw StoreError("store server: cannot resolve listen address " + where + ": " +
                       ec.message());
    }
    endpoint = results.begin()->endpoint();
  }
  auto fail = [&](const char* step) {
    const int err = errno;
    if (fd_ >= 0) ::close(fd_);
    throw StoreError(std::string("store server: cannot ") + step + " " + where + ": " +
                     errno_text(err));
  };
  fd_ = ::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("open a socket for");
  int one = 1;
  if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    fail("set SO_REUSEADDR on");
  }
  if (::bind(fd_, endpoint.data(), static_cast<socklen_t>(endpoint.size())) != 0) fail("bind");
  if (::listen(fd_, SOMAXCONN) != 0) fail("listen on");
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    fail("read the bound port of");
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

Listener::~Listener() {
  close();
}

void Listener::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string peer_name(const sockaddr_storage& address, socklen_t length) {
  tcp::endpoint endpoint;
  if ((address.ss_family != AF_INET && address.ss_family != AF_INET6) ||
      length > endpoint.capacity()) {
    return "unknown peer";
  }
  std::memcpy(endpoint.data(), &address, length);
  endpoint.resize(length);
  return endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

std::string peer_name(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return "unknown peer";
  }
  return peer_name(address, length);
}

void tune_connection(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void AcceptLog::failed(int err, size_t open_connections) {
  if (failures_++ > 0) return;
  std::string line = log_name_ + ": accept failed on port " + std::to_string(port_) + ": " +
                     errno_text(err) + " (" + std::to_string(open_connections) +
                     " connections open; retrying every 50 ms)\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void AcceptLog::accepted() {
  if (failures_ == 0) return;
  std::string line =
      log_name_ + ": accepting again after " + std::to_string(failures_) + " failed attempts\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  failures_ = 0;
}

}  // namespace ddp::rendezvous
