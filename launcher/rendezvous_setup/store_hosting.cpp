#include "launcher/rendezvous_setup/store_hosting.hpp"

#include "common/host_address.hpp"
#include "common/log.hpp"
#include "rendezvous/store/tcp_store.hpp"

namespace ddp::launcher {

StoreListen choose_store_listen(const StoreHostingOptions& options, bool have_ipv6) {
  StoreListen listen;
  listen.dial = options.dial_host;
  if (options.bind) {
    listen.host = normalize_host(*options.bind);
    return listen;
  }
  listen_host_for(options.dial_host, have_ipv6);  // ConfigError: IPv6 without IPv6
  if (options.reach == StoreReach::kThisMachine) {
    // One node: the workers are on this machine, so the store listens on loopback only and
    // the workers dial that (MASTER_ADDR), unless --store_bind asks for more.
    listen.host = loopback_for(options.dial_host);
    if (listen.host != options.dial_host) {
      listen.note = "single-node job: the store listens on " + listen.host + " only, and " +
                    "workers get MASTER_ADDR=" + listen.host + " instead of --master_addr " +
                    options.dial_host + " (--store_bind ADDR to listen elsewhere)";
    }
    listen.dial = listen.host;
    return listen;
  }
  // Several nodes: where the others reach it and nowhere else, when this machine can tell.
  std::string why;
  listen.host = store_listen_host(options.dial_host, options.local_addr, why);
  if (!why.empty()) {
    listen.note = options.name + " listens on every interface: " + why +
                  "; --store_bind ADDR narrows it to one address";
    listen.warn = true;
  }
  return listen;
}

HostedStore host_store(const StoreHostingOptions& options) {
  const StoreListen listen = choose_store_listen(options, ipv6_available());
  if (listen.warn) {
    DDP_LOG_WARN(listen.note);
  } else if (!listen.note.empty()) {
    DDP_LOG_INFO(listen.note);
  }
  rendezvous::StoreServerOptions server;
  server.host = listen.host;
  server.port = options.port;
  server.secret = options.secret;
  return {std::make_unique<rendezvous::StoreServer>(server), listen.dial};
}

void declare_worker_namespace(rendezvous::StoreServer* served,
                              const rendezvous::StoreConnector& connect,
                              const std::string& prefix) {
  if (served != nullptr) {
    served->set_worker_namespace(prefix);
    return;
  }
  if (!connect) return;
  auto store = std::dynamic_pointer_cast<rendezvous::TcpStore>(connect());
  if (store) store->set_worker_namespace(prefix);
}

std::function<void(const std::string&)> worker_namespace_setter(
    rendezvous::StoreServer* served, rendezvous::StoreConnector connect) {
  return [served, connect = std::move(connect)](const std::string& prefix) {
    declare_worker_namespace(served, connect, prefix);
  };
}

}  // namespace ddp::launcher
