#include "launcher/rendezvous_setup/workers_store.hpp"

#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "launcher/rendezvous_setup/store_hosting.hpp"
#include "rendezvous/store/tcp_store.hpp"

namespace ddp::launcher {

namespace {
constexpr auto kNamespaceConnectTimeout = std::chrono::seconds(3);
// How often the host looks for members' close records; a member's wait slice.
constexpr auto kWitnessPoll = std::chrono::milliseconds(100);
constexpr auto kWitnessSlice = std::chrono::seconds(1);

std::string witness_key(uint64_t round, const char* what, int g) {
  return "/ddp_witness/" + std::to_string(round) + "/" + what + "/" + std::to_string(g);
}

}  // namespace

struct WorkerStoreServer::Witness {
  std::mutex mu;  // held while calling back: stop_witness() returning means none runs
  bool stopped = false;
  std::shared_ptr<rendezvous::Store> store;
  std::unique_ptr<rendezvous::Presence> presence;
  std::thread thread;

  // on_death(g) unless stopped meanwhile.
  void report(const std::function<void(int)>& on_death, int g) {
    std::lock_guard<std::mutex> lock(mu);
    if (!stopped) on_death(g);
  }
  [[nodiscard]] bool stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stopped;
  }
};

WorkerStoreServer::WorkerStoreServer(StoreHostingOptions hosting) : options_(std::move(hosting)) {
  options_.reach = StoreReach::kOtherNodes;
  options_.name = "the workers' store";
}

WorkerStoreServer::~WorkerStoreServer() {
  stop_witness();
}

void WorkerStoreServer::stop_witness() {
  std::shared_ptr<Witness> witness;
  {
    std::lock_guard<std::mutex> lock(mu_);
    witness.swap(witness_);
  }
  if (!witness) return;
  {
    std::lock_guard<std::mutex> lock(witness->mu);
    witness->stopped = true;
  }
  // An orderly leave: the presence is cleared first, so the host sees no death.
  witness->presence.reset();
  if (witness->thread.joinable()) witness->thread.join();
}

void WorkerStoreServer::witness(uint64_t round, int group_rank, int members,
                                const rendezvous::Endpoint& endpoint,
                                const std::function<void(int)>& on_death) {
  stop_witness();
  auto w = std::make_shared<Witness>();
  bool serving = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    serving = server_ && endpoint.host == options_.dial_host && endpoint.port == server_->port();
  }
  try {
    rendezvous::TcpStoreOptions o;
    o.host = endpoint.host;
    o.port = endpoint.port;
    o.secret = options_.secret;
    o.connect_timeout = kNamespaceConnectTimeout;
    w->store = std::make_shared<rendezvous::TcpStore>(o);
    if (!serving) {
      w->presence = w->store->open_presence();
      if (!w->presence) return;  // not our server: no close records
      w->presence->set_ephemeral(witness_key(round, "alive", group_rank), "1");
      w->presence->on_close(witness_key(round, "dead", group_rank), "1");
    }
  } catch (const std::exception& e) {
    DDP_LOG_WARN(std::string("no death witness this round (a death is found when its lease "
                             "expires): ") +
                 e.what());
    return;
  }
  DDP_LOG_DEBUG("death witness of round " + std::to_string(round) + ": " +
                (serving ? "watching the members' close records" : "holding a presence") + " on " +
                rendezvous::format_endpoint(endpoint));
  if (serving) {
    w->thread = std::thread([w, round, group_rank, members, on_death] {
      std::vector<bool> reported(static_cast<size_t>(members), false);
      while (!w->stopping()) {
        for (int g = 0; g < members; ++g) {
          if (g == group_rank || reported[static_cast<size_t>(g)]) continue;
          try {
            if (!w->store->check({witness_key(round, "dead", g)})) continue;
          } catch (const std::exception& e) {
            DDP_LOG_DEBUG(std::string("death witness: stops: ") + e.what());
            return;  // this agent's own server is going away
          }
          reported[static_cast<size_t>(g)] = true;
          DDP_LOG_DEBUG("death witness: group rank " + std::to_string(g) + " of round " +
                        std::to_string(round) + " closed its connection");
          w->report(on_death, g);
        }
        std::this_thread::sleep_for(kWitnessPoll);
      }
    });
  } else {
    w->thread = std::thread([w, round, on_death] {
      while (!w->stopping()) {
        try {
          w->store->wait({witness_key(round, "never", 0)}, kWitnessSlice);
        } catch (const StoreTimeout&) {
          continue;
        } catch (const StoreError& e) {
          // A closed or reset connection: the host's agent died. Silence: the lease's job.
          if (e.loss() == PeerLoss::kDeath) w->report(on_death, 0);
          return;
        }
      }
    });
  }
  std::lock_guard<std::mutex> lock(mu_);
  witness_ = std::move(w);
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
