#include "rendezvous/rdzv_connect.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "rendezvous/host_address.hpp"

namespace ddp::rendezvous {

std::shared_ptr<Store> connect_store(const StoreConnectOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const auto deadline = started + o.patience;
  const std::string endpoint = join_host_port(o.host, o.port);
  if (is_ipv6_literal(o.host) && !ipv6_available()) {
    // Waiting would not help: this machine cannot open an IPv6 connection at all.
    throw StoreError("cannot reach the rendezvous store of " + o.who + " at " + endpoint +
                     ": that is an IPv6 address and this machine has no IPv6");
  }
  while (true) {
    const auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    TcpStoreOptions tcp;
    tcp.host = o.host;
    tcp.port = o.port;
    tcp.timeout = o.timeout;
    tcp.connect_timeout = std::clamp(left, Duration(1), o.progress_interval);
    try {
      return std::make_shared<TcpStore>(tcp);
    } catch (const StoreError& e) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started);
      if (Clock::now() >= deadline) {
        throw StoreError("could not reach the rendezvous store of " + o.who + " at " + endpoint +
                         " within " + describe_timeout(o.patience) + ": " + e.what());
      }
      rdzv_log(o.log, "waiting for the rendezvous store of " + o.who + " at " + endpoint + " (" +
                          std::to_string(waited.count()) + " s so far)");
    }
  }
}

std::shared_ptr<TcpStore> connect_own_store(const std::string& dial_host, const StoreServer& server,
                                            Duration connect_timeout, Duration timeout) {
  TcpStoreOptions tcp;
  tcp.host = normalize_host(dial_host);
  tcp.port = server.port();
  tcp.timeout = timeout;
  tcp.connect_timeout = connect_timeout;
  try {
    auto store = std::make_shared<TcpStore>(tcp);
    store->ping();
    return store;
  } catch (const StoreError& e) {
    throw StoreError("the store this agent hosts listens on " + server.address() +
                     ", but does not answer at " + join_host_port(tcp.host, tcp.port) +
                     ", where the other clients will connect: " + e.what());
  }
}

bool is_local_address(const std::string& given) {
  const std::string host = normalize_host(given);
  if (is_loopback_host(host)) return true;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && host == name) return true;
  // Compared as addresses, not text, so any spelling of an IPv6 address matches.
  in_addr v4{};
  in6_addr v6{};
  const std::string address = host.substr(0, host.find('%'));
  const bool is_v4 = ::inet_pton(AF_INET, address.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && ::inet_pton(AF_INET6, address.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return false;
  ifaddrs* addrs = nullptr;
  if (::getifaddrs(&addrs) != 0) return false;
  bool found = false;
  for (ifaddrs* a = addrs; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    if (is_v4 && a->ifa_addr->sa_family == AF_INET) {
      sockaddr_in in{};
      std::memcpy(&in, a->ifa_addr, sizeof(in));
      found = in.sin_addr.s_addr == v4.s_addr;
    } else if (is_v6 && a->ifa_addr->sa_family == AF_INET6) {
      sockaddr_in6 in6{};
      std::memcpy(&in6, a->ifa_addr, sizeof(in6));
      found = std::memcmp(&in6.sin6_addr, &v6, sizeof(v6)) == 0;
    }
  }
  ::freeifaddrs(addrs);
  return found;
}

}  // namespace ddp::rendezvous
