#include "host_counters.hpp"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::bench {

namespace {

int64_t read_backlog_drops() {
  std::ifstream in("/proc/net/softnet_stat");
  if (!in) return -1;
  int64_t total = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string processed;
    std::string dropped;
    if (fields >> processed >> dropped) total += std::stoll(dropped, nullptr, 16);
  }
  return total;
}

// The value of `name` in /proc/net/netstat's "TcpExt:" lines (a header line of names, then
// one of values).
int64_t tcp_ext(const std::string& name) {
  std::ifstream in("/proc/net/netstat");
  std::string header;
  std::string values;
  while (std::getline(in, header) && std::getline(in, values)) {
    if (header.rfind("TcpExt:", 0) != 0) continue;
    std::istringstream names(header);
    std::istringstream numbers(values);
    std::string n;
    std::string v;
    while (names >> n && numbers >> v) {
      if (n == name) return std::stoll(v);
    }
  }
  return -1;
}

int64_t delta(int64_t after, int64_t before) {
  return after < 0 || before < 0 ? -1 : after - before;
}

}  // namespace

HostCounters HostCounters::read() {
  return {read_backlog_drops(), tcp_ext("TCPAbortOnTimeout"), tcp_ext("TCPKeepAlive")};
}

HostCounters HostCounters::since(const HostCounters& before) const {
  return {delta(backlog_drops, before.backlog_drops),
          delta(aborts_on_timeout, before.aborts_on_timeout),
          delta(keepalive_probes, before.keepalive_probes)};
}

}  // namespace ddp::bench
