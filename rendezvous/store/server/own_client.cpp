#include "rendezvous/store/server/own_client.hpp"

#include "common/error.hpp"
#include "common/host_address.hpp"

namespace ddp::rendezvous {

std::shared_ptr<TcpStore> connect_own_store(const std::string& dial_host, const StoreServer& server,
                                            Duration connect_timeout, Duration timeout,
                                            const std::string& secret) {
  TcpStoreOptions tcp;
  tcp.secret = secret;
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

}  // namespace ddp::rendezvous
