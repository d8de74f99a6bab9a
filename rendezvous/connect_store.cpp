#include "rendezvous/connect_store.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/deadline.hpp"
#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"

namespace ddp::rendezvous {

std::shared_ptr<Store> connect_store(const StoreConnectOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const auto deadline = Deadline::after(o.patience);
  const std::string endpoint = join_host_port(o.host, o.port);
  if (is_ipv6_literal(o.host) && !ipv6_available()) {
    // Waiting would not help: this machine cannot open an IPv6 connection at all.
    throw StoreError("cannot reach the rendezvous store of " + o.who + " at " + endpoint +
                     ": that is an IPv6 address and this machine has no IPv6");
  }
  while (true) {
    TcpStoreOptions tcp;
    tcp.host = o.host;
    tcp.port = o.port;
    tcp.timeout = o.timeout;
    tcp.connect_timeout = deadline.slice(o.progress_interval);
    tcp.secret = o.secret;
    try {
      return std::make_shared<TcpStore>(tcp);
    } catch (const AuthError&) {
      throw;  // waiting does not change the secret
    } catch (const StoreError& e) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started);
      if (deadline.expired()) {
        throw StoreError("could not reach the rendezvous store of " + o.who + " at " + endpoint +
                         " within " + describe_timeout(o.patience) + ": " + e.what());
      }
      DDP_LOG_INFO("waiting for the rendezvous store of " + o.who + " at " + endpoint + " (" +
                   std::to_string(waited.count()) + " s so far)");
    }
  }
}

}  // namespace ddp::rendezvous
