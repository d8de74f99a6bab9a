#include "rendezvous/rdzv_connect.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "rendezvous/tcp_store.hpp"

namespace ddp::rendezvous {

std::shared_ptr<Store> connect_store(const StoreConnectOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const auto deadline = started + o.patience;
  const std::string endpoint = o.host + ":" + std::to_string(o.port);
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

bool is_local_address(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && host == name) return true;
  ifaddrs* addrs = nullptr;
  if (::getifaddrs(&addrs) != 0) return false;
  bool found = false;
  for (ifaddrs* a = addrs; a != nullptr && !found; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = nullptr;
    if (a->ifa_addr->sa_family == AF_INET) {
      sockaddr_in in{};
      std::memcpy(&in, a->ifa_addr, sizeof(in));
      raw = &in.sin_addr;
      found = ::inet_ntop(AF_INET, raw, text, sizeof(text)) != nullptr && host == text;
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      sockaddr_in6 in6{};
      std::memcpy(&in6, a->ifa_addr, sizeof(in6));
      raw = &in6.sin6_addr;
      found = ::inet_ntop(AF_INET6, raw, text, sizeof(text)) != nullptr && host == text;
    }
  }
  ::freeifaddrs(addrs);
  return found;
}

}  // namespace ddp::rendezvous
