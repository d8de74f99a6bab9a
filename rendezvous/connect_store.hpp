#pragma once
// How an agent reaches the rendezvous store of a multi-node job: connect with retry until
// the join timeout, saying every few seconds that it is still waiting (node 0 may start
// minutes later under a batch scheduler); and whether an endpoint names this machine.
#include <cstdint>
#include <memory>
#include <string>

#include "rendezvous/store/store.hpp"
#include "rendezvous/store/tcp_store.hpp"

namespace ddp::rendezvous {

struct StoreConnectOptions {
  std::string host;
  uint16_t port = 0;
  std::string who;  // whose store this is, for messages ("node_rank 0", "the c10d endpoint")
  Duration patience = std::chrono::seconds(600);         // give up after this long
  Duration timeout = kDefaultStoreTimeout;               // the connection's default op deadline
  Duration progress_interval = std::chrono::seconds(5);  // between "still waiting" lines
  std::string secret{};  // the job secret (TcpStoreOptions::secret); AuthError is not retried
};

// Connects to host:port, retrying until patience runs out (StoreError naming the endpoint,
// who hosts it, the time waited and the last error); at once for an IPv6 address on a
// machine without IPv6.
std::shared_ptr<Store> connect_store(const StoreConnectOptions& options);

}  // namespace ddp::rendezvous
