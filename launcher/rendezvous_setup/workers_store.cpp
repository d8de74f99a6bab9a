#include "launcher/rendezvous_setup/workers_store.hpp"

#include "common/log.hpp"
#include "launcher/rendezvous_setup/store_hosting.hpp"
#include "rendezvous/store/tcp_store.hpp"

namespace ddp::launcher {

namespace {
constexpr auto kNamespaceConnectTimeout = std::chrono::seconds(3);
}  // namespace

WorkerStoreServer::WorkerStoreServer(StoreHostingOptions hosting) : options_(std::move(hosting)) {
  options_.reach = StoreReach::kOtherNodes;
  options_.name = "the workers' store";
}

rendezvous::Endpoint WorkerStoreServer::host() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!server_) {
    server_ = host_store(options_).server;
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
      declare_worker_namespace(server_.get(), nullptr, prefix);
      return;
    }
  }
  if (!endpoint) return;
  declare_worker_namespace(
      nullptr,
      [&]() -> std::shared_ptr<rendezvous::Store> {
        rendezvous::TcpStoreOptions o;
        o.host = endpoint->host;
        o.port = endpoint->port;
        o.secret = options_.secret;
        o.connect_timeout = kNamespaceConnectTimeout;
        return std::make_shared<rendezvous::TcpStore>(o);
      },
      prefix);
}

}  // namespace ddp::launcher
