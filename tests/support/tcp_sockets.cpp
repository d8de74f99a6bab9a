#include "tests/support/tcp_sockets.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <charconv>
#include <filesystem>
#include <string>

namespace ddp::test {
namespace {

int int_option(int fd, int level, int option) {
  int value = -1;
  socklen_t length = sizeof(value);
  if (::getsockopt(fd, level, option, &value, &length) != 0) return -1;
  return value;
}

uint16_t port_of(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return 0;
}

}  // namespace

TcpSocketInfo tcp_socket_info(int fd) {
  TcpSocketInfo info;
  info.fd = fd;
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    info.local_port = port_of(address);
  }
  length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    info.peer_port = port_of(address);
  }
  info.keepalive = int_option(fd, SOL_SOCKET, SO_KEEPALIVE) == 1;
  info.keepidle_s = int_option(fd, IPPROTO_TCP, TCP_KEEPIDLE);
  info.keepintvl_s = int_option(fd, IPPROTO_TCP, TCP_KEEPINTVL);
  info.keepcnt = int_option(fd, IPPROTO_TCP, TCP_KEEPCNT);
  info.user_timeout_ms = int_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT);
  constexpr int kTcpRtoMaxMs = 44;  // TCP_RTO_MAX_MS, which older C libraries do not name
  info.rto_max_ms = int_option(fd, IPPROTO_TCP, kTcpRtoMaxMs);
  return info;
}

std::vector<TcpSocketInfo> tcp_connections() {
  std::vector<TcpSocketInfo> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = entry.path().filename().string();
    int fd = -1;
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
    if (int_option(fd, SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP ||
        int_option(fd, SOL_SOCKET, SO_ACCEPTCONN) != 0) {
      continue;  // not TCP (or the directory's own fd), or a listener
    }
    TcpSocketInfo info = tcp_socket_info(fd);
    if (info.peer_port != 0) found.push_back(info);
  }
  return found;
}

std::vector<TcpSocketInfo> accepted_on(uint16_t port) {
  std::vector<TcpSocketInfo> found;
  for (const auto& info : tcp_connections()) {
    if (info.local_port == port) found.push_back(info);
  }
  return found;
}

std::vector<TcpSocketInfo> connected_to(uint16_t port) {
  std::vector<TcpSocketInfo> found;
  for (const auto& info : tcp_connections()) {
    if (info.peer_port == port) found.push_back(info);
  }
  return found;
}

}  // namespace ddp::test
