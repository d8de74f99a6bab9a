#include "launcher/rendezvous_setup/workers_store.hpp"

#include "common/host_address.hpp"
#include "common/log.hpp"
#include "rendezvous/store/tcp_store.hpp"

namespace ddp::launcher {

namespace {
constexpr auto kNamespaceConnectTimeout = std::chrono::seconds(3);
}  // namespace

WorkerStoreServer::WorkerStoreServer(WorkerStoreServerOptions options)
    : options_(std::move(options)) {}

rendezvous::Endpoint WorkerStoreServer::host() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!server_) {
    rendezvous::StoreServerOptions server;
    server.secret = options_.secret;
    server.port = options_.port;
    if (options_.bind) {
      server.host = normalize_host(*options_.bind);
    } else {
      std::string why;
      server.host = store_listen_host(options_.dial_host, options_.local_addr, why);
      if (!why.empty()) {
        DDP_LOG_WARN("the workers' store listens on every interface: " + why +
                     "; --store_bind ADDR narrows it to one address");
      }
    }
    server_ = std::make_unique<rendezvous::StoreServer>(server);
    DDP_LOG_INFO("this node is group rank 0: serving the workers' store on " +
                 rendezvous::format_endpoint({server_->host(), server_->port()}) +
                 " (workers dial " + options_.dial_host + ")");
  }
  return {options_.dial_host, server_->port()};
}

void WorkerStoreServer::use(const rendezvous::Endpoint& endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ = endpoint;
}

void WorkerStoreServer::set_worker_namespace(const std::string& prefix) {
  std::optional<rendezvous::Endpoint> endpoint;
  {
    std::lock_guard<std::mutex> lock(mu_);
    endpoint = in_use_;
    if (server_ && endpoint && endpoint->host == options_.dial_host &&
        endpoint->port == server_->port()) {
      server_->set_worker_namespace(prefix);
      return;
    }
  }
  if (!endpoint) return;
  rendezvous::TcpStoreOptions o;
  o.host = endpoint->host;
  o.port = endpoint->port;
  o.secret = options_.secret;
  o.connect_timeout = kNamespaceConnectTimeout;
  rendezvous::TcpStore(o).set_worker_namespace(prefix);
}

}  // namespace ddp::launcher
