#include "rendezvous/store/server/listener.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstring>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"
#include "common/tcp_liveness.hpp"

namespace ddp::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// errno values saying the machine has no IPv6 (socket, IPV6_V6ONLY or bind of "::").
bool ipv6_missing(int err) {
  return err == EAFNOSUPPORT || err == EPROTONOSUPPORT || err == EADDRNOTAVAIL ||
         err == ENOPROTOOPT;
}

// What a failed step most likely means, for the address kinds users get wrong.
std::string hint(int err, bool v6) {
  if (err == EADDRNOTAVAIL) return " (no interface of this machine has that address)";
  if (v6 && ipv6_missing(err)) return " (this machine has no IPv6)";
  return "";
}

}  // namespace

Listener::Listener(const std::string& host, uint16_t port) {
  const std::string bare = normalize_host(host);
  if (bare == kAnyHost) {
    // Every interface: one dual-stack socket serves IPv6 and IPv4 clients alike, as
    // PyTorch's TCPStore does; a machine without IPv6 gets 0.0.0.0.
    tcp::endpoint any6(asio::ip::address_v6::any(), port);
    try {
      open(any6.data(), static_cast<socklen_t>(any6.size()), true,
           join_host_port("::", port) + " (every interface)");
      return;
    } catch (const BindError& e) {
      if (!ipv6_missing(e.err())) throw;
    }
    tcp::endpoint any4(asio::ip::address_v4::any(), port);
    open(any4.data(), static_cast<socklen_t>(any4.size()), false,
         join_host_port("0.0.0.0", port) + " (every interface)");
    return;
  }
  const std::string where = join_host_port(bare, port);
  boost::system::error_code ec;
  tcp::endpoint endpoint;
  auto address = asio::ip::make_address(bare, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, port);
  } else {
    asio::io_context io;
    tcp::resolver resolver(io);
    auto results = resolver.resolve(bare, std::to_string(port), tcp::resolver::passive, ec);
    if (ec || results.empty()) {
      throw BindError("store server: cannot resolve listen address " + where + ": " + ec.message(),
                      0);
    }
    endpoint = results.begin()->endpoint();
  }
  const bool dual = endpoint.address().is_v6() && endpoint.address().is_unspecified();
  open(endpoint.data(), static_cast<socklen_t>(endpoint.size()), dual, where);
}

void Listener::open(const sockaddr* address, socklen_t length, bool dual_stack,
                    const std::string& where) {
  const bool v6 = address->sa_family == AF_INET6;
  auto fail = [&](const char* step) {
    const int err = errno;
    close();
    throw BindError(std::string("store server: cannot ") + step + " " + where + ": " +
                        errno_text(err) + hint(err, v6),
                    err);
  };
  fd_ = ::socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("open a socket for");
  int one = 1;
  if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    fail("set SO_REUSEADDR on");
  }
  // Explicit, as the bindv6only sysctl may default to IPv6 only.
  int v6only = dual_stack ? 0 : 1;
  if (v6 && ::setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) != 0) {
    fail("set IPV6_V6ONLY on");
  }
  if (::bind(fd_, address, length) != 0) fail("bind");
  if (::listen(fd_, SOMAXCONN) != 0) fail("listen on");
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    fail("read the bound port of");
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  tcp::endpoint local;
  std::memcpy(local.data(), &bound, bound_length);
  local.resize(bound_length);
  address_ = join_host_port(local.address().to_string(), port_);
  if (local.address().is_unspecified())
    address_ += dual_stack ? " (IPv6 and IPv4)" : " (IPv4 only)";
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
  auto ip = endpoint.address();
  if (ip.is_v6() && ip.to_v6().is_v4_mapped()) {
    ip = asio::ip::make_address_v4(asio::ip::v4_mapped, ip.to_v6());
  }
  return join_host_port(ip.to_string(), endpoint.port());
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

void enable_liveness(int fd) {
  try {
    set_tcp_liveness(fd, tcp_liveness_from_env());
  } catch (const Error& e) {
    // Served all the same: only a vanished client is then noticed late (its heartbeat lease).
    DDP_LOG_WARN("connection from " + peer_name(fd) + " without dead-peer detection: " + e.what());
  }
}

void AcceptLog::failed(int err, size_t open_connections) {
  if (failures_++ > 0) return;
  DDP_LOG_WARN("accept failed on port " + std::to_string(port_) + ": " + errno_text(err) + " (" +
               std::to_string(open_connections) + " connections open; retrying every 50 ms)");
}

void AcceptLog::accepted() {
  if (failures_ == 0) return;
  DDP_LOG_INFO("accepting again after " + std::to_string(failures_) + " failed attempts");
  failures_ = 0;
}

}  // namespace ddp::rendezvous
