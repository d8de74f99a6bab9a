#pragma once
// The client an agent opens to the store it hosts, connected the way every other client will
// connect, so a store that cannot be reached there fails now instead of leaving everybody
// waiting.
#include <memory>
#include <string>

#include "rendezvous/store/server/store_server.hpp"
#include "rendezvous/store/tcp_store.hpp"

namespace ddp::rendezvous {

// Connects to dial_host at server's port and pings (a store bound to IPv4 only but dialled
// at an IPv6 address...). StoreError within connect_timeout naming both addresses and the
// error. secret: the one the server was started with (StoreServerOptions::secret).
std::shared_ptr<TcpStore> connect_own_store(const std::string& dial_host, const StoreServer& server,
                                            Duration connect_timeout,
                                            Duration timeout = kDefaultStoreTimeout,
                                            const std::string& secret = {});

}  // namespace ddp::rendezvous
