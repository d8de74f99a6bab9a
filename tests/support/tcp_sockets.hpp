#pragma once
// The connected TCP sockets this process holds and the dead-peer options each carries, read
// back with getsockopt: how tests check that a connection made or accepted deep inside a
// client or server got common/tcp_liveness.hpp's options.
#include <cstdint>
#include <vector>

namespace ddp::test {

struct TcpSocketInfo {
  int fd = -1;
  uint16_t local_port = 0;
  uint16_t peer_port = 0;
  bool keepalive = false;   // SO_KEEPALIVE
  int keepidle_s = 0;       // TCP_KEEPIDLE
  int keepintvl_s = 0;      // TCP_KEEPINTVL
  int keepcnt = 0;          // TCP_KEEPCNT
  int user_timeout_ms = 0;  // TCP_USER_TIMEOUT
  int rto_max_ms = -1;      // TCP_RTO_MAX_MS (Linux 6.15 on; -1 where the kernel has none)
};

// The options of one TCP socket.
TcpSocketInfo tcp_socket_info(int fd);
// Every connected (not listening) TCP socket of this process, IPv4 or IPv6.
std::vector<TcpSocketInfo> tcp_connections();
// Those of them accepted by a server listening on port (local port == port).
std::vector<TcpSocketInfo> accepted_on(uint16_t port);
// Those of them connected to port (peer port == port).
std::vector<TcpSocketInfo> connected_to(uint16_t port);

}  // namespace ddp::test
