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
namespace {

// A slice shorter than this is not worth a try of its own (its error would read "within 1 ms").
constexpr auto kMinSlice = std::chrono::milliseconds(100);

// "cannot connect to store at tcp://h:p within 5000 ms (6 attempts; tried h:p): Connection
// refused (errno 111)" -> "Connection refused (errno 111)": the cause, for the waiting lines.
std::string cause_of(const std::string& what) {
  auto end_of_counts = what.rfind("): ");
  return end_of_counts == std::string::npos ? what : what.substr(end_of_counts + 3);
}

}  // namespace

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
      if (deadline.expired() || deadline.remaining() < kMinSlice) {
        throw StoreError("could not reach the rendezvous store of " + o.who + " at " + endpoint +
                             " within " + describe_timeout(o.patience) +
                             "; the last try: " + e.what(),
                         e.loss());
      }
      DDP_LOG_INFO("waiting for the rendezvous store of " + o.who + " at " + endpoint + " (" +
                   std::to_string(waited.count()) + " s so far): " + cause_of(e.what()));
    }
  }
}

}  // namespace ddp::rendezvous
