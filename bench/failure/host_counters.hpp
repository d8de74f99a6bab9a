#pragma once
// Host-wide network counters the benchmark reports next to its times: whether the load it
// generates made the kernel drop packets or abort live connections. They count everything in
// this network namespace, other processes' traffic included.
#include <cstdint>

namespace ddp::bench {

struct HostCounters {
  // Packets dropped because a CPU's input backlog was full (/proc/net/softnet_stat, column
  // 2, summed): on loopback, bursts beyond net.core.netdev_max_backlog.
  int64_t backlog_drops = 0;
  // Connections the kernel aborted because sent data or keepalive probes went unanswered
  // for TCP_USER_TIMEOUT (/proc/net/netstat, TcpExt TCPAbortOnTimeout).
  int64_t aborts_on_timeout = 0;
  int64_t keepalive_probes = 0;  // TcpExt TCPKeepAlive

  // Now; -1 for a counter that cannot be read.
  static HostCounters read();
  // What happened since `before` (-1 where either is unknown).
  [[nodiscard]] HostCounters since(const HostCounters& before) const;
};

}  // namespace ddp::bench
