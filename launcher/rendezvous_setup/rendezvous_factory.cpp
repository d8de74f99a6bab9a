#include "launcher/rendezvous_setup/rendezvous_factory.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <random>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"
#include "common/secret.hpp"
#include "launcher/config/slurm_env.hpp"
#include "launcher/rendezvous_setup/etcd_setup.hpp"
#include "launcher/rendezvous_setup/store_hosting.hpp"
#include "rendezvous/connect_store.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/local_rendezvous.hpp"
#include "rendezvous/rdzv_conf.hpp"
#include "rendezvous/round_watcher.hpp"
#include "rendezvous/static_rendezvous.hpp"
#include "rendezvous/store/server/listener.hpp"
#include "rendezvous/store/server/own_client.hpp"
#include "rendezvous/store/tcp_store.hpp"

namespace ddp::launcher {
namespace {

constexpr int kDefaultMasterPort = 29500;
constexpr const char* kDefaultMasterAddr = "127.0.0.1";

// torchrun gives a standalone job a random run id so two jobs never share store keys.
std::string random_run_id() {
  std::random_device device;
  std::mt19937_64 gen(device());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

// Only for the no-agent-store mode, where worker rank 0 binds the port itself: asks the
// kernel for a free port of master_addr's family. (The agent-store mode never does this; it
// keeps the socket bound.)
uint16_t pick_free_port(const std::string& master_addr) {
  const bool v6 = is_ipv6_literal(master_addr);
  const char* loopback = v6 ? "::1" : "127.0.0.1";
  int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw StoreError("socket() for a free port failed: " + errno_text(errno));
  sockaddr_storage addr{};
  socklen_t len = v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  // NOLINTBEGIN: the sockets API takes sockaddr*.
  if (v6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  auto* raw = reinterpret_cast<sockaddr*>(&addr);
  uint16_t port = 0;
  if (::bind(fd, raw, len) == 0 && ::getsockname(fd, raw, &len) == 0) {
    port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  // NOLINTEND
  int err = errno;
  ::close(fd);
  if (port == 0) {
    throw StoreError(std::string("could not find a free port on ") + loopback + ": " +
                     errno_text(err));
  }
  return port;
}

// --- multi-node ---

constexpr uint16_t kDefaultRdzvPort = 29400;  // torchrun's c10d default
// Side connections (watchers, shutdown) are opened while the store is known to be up; a
// short connect deadline keeps shutdown quick when the store host is already gone.
constexpr auto kSideConnectTimeout = std::chrono::seconds(3);
// The host agent's own connection to the store it just bound: nothing to wait for, so a
// failure (nothing listens where clients will dial) is reported at once.
constexpr auto kOwnStoreConnectTimeout = std::chrono::seconds(5);
// The store server a multi-node job's host agent runs, where the other nodes reach it
// (store_hosting.hpp decides where).
std::unique_ptr<rendezvous::StoreServer> host_job_store(const LaunchConfig& config,
                                                        const std::string& dial_host, uint16_t port,
                                                        const std::string& secret) {
  StoreHostingOptions o;
  o.reach = StoreReach::kOtherNodes;
  o.dial_host = dial_host;
  o.local_addr = config.local_addr.value_or("");
  o.bind = config.store_bind;
  o.port = port;
  o.secret = secret;
  return host_store(o).server;
}

std::optional<std::string> normalized(const std::optional<std::string>& host) {
  if (!host) return std::nullopt;
  return normalize_host(*host);
}

void require_agent_store(const LaunchConfig& config) {
  if (!config.agent_store) {
    throw ConfigError(
        "--no_agent_store is single-node only: on several nodes the workers use "
        "the rendezvous store (drop the flag or use --nnodes 1)");
  }
}

rendezvous::StoreConnector connector(const std::string& host, uint16_t port,
                                     const std::string& secret) {
  return [host, port, secret]() -> std::shared_ptr<rendezvous::Store> {
    rendezvous::TcpStoreOptions o;
    o.host = host;
    o.port = port;
    o.secret = secret;
    o.connect_timeout = kSideConnectTimeout;
    return std::make_shared<rendezvous::TcpStore>(o);
  };
}

// A multi-node job without a secret. Said once the options are known good (a usage error is
// then the only line), and before any wait for the store (which may last minutes).
void note_open_store(const LaunchConfig& config, const std::string& secret) {
  if (!secret.empty() || config.max_nodes <= 1 || !config.agent_store) return;
  DDP_LOG_INFO(
      "no --secret_file: anyone who reaches the rendezvous store can join or disturb this job "
      "(docs/security.md)");
}

// Static: node 0 hosts the store on master_addr:master_port (or --rdzv_endpoint, as
// torchrun), the others connect to it with retry until join_timeout.
RendezvousSetup make_static_rendezvous(const LaunchConfig& config, std::string secret) {
  require_agent_store(config);
  if (config.min_nodes != config.max_nodes) {
    throw ConfigError("--nnodes=" + config.nnodes.value_or("?") +
                      ": MIN:MAX needs an elastic rendezvous (--rdzv_backend c10d "
                      "--rdzv_endpoint host:port)");
  }
  if (!config.node_rank) {
    throw ConfigError("--nnodes=" + std::to_string(config.max_nodes) +
                      " with the static rendezvous needs --node_rank (0.." +
                      std::to_string(config.max_nodes - 1) + "), or run under srun");
  }
  const auto conf = rendezvous::parse_rdzv_conf(config.rdzv_conf.value_or(""));
  rendezvous::Endpoint master{
      normalize_host(config.master_addr.value_or(kDefaultMasterAddr)),
      static_cast<uint16_t>(config.master_port.value_or(kDefaultMasterPort))};
  if (config.rdzv_endpoint) master = rendezvous::parse_endpoint(*config.rdzv_endpoint, master.port);

  RendezvousSetup setup;
  setup.run_id = config.run_id.value_or("none");
  setup.workers_use_agent_store = true;
  rendezvous::StaticRendezvousOptions o;
  o.run_id = setup.run_id;
  o.nnodes = config.max_nodes;
  o.node_rank = *config.node_rank;
  o.local_world_size = config.nproc_per_node;
  o.node_addr = normalized(config.local_addr).value_or("");
  o.master_addr = master.host;
  o.master_port = master.port;
  o.join_timeout = conf.join_timeout.value_or(o.join_timeout);
  o.exit_barrier_timeout = conf.exit_barrier_timeout.value_or(o.exit_barrier_timeout);
  o.hosts_store = *config.node_rank == 0;

  note_open_store(config, secret);
  if (secret.empty() && o.hosts_store && config.max_nodes == 1) secret = generate_secret();
  std::shared_ptr<rendezvous::Store> store;
  if (o.hosts_store) {
    setup.store_server = host_job_store(config, master.host, master.port, secret);
    store = rendezvous::connect_own_store(master.host, *setup.store_server, kOwnStoreConnectTimeout,
                                          rendezvous::kDefaultStoreTimeout, secret);
  } else {
    store = rendezvous::connect_store({master.host, master.port, "node_rank 0", o.join_timeout,
                                       rendezvous::kDefaultStoreTimeout, std::chrono::seconds(5),
                                       secret});
  }
  setup.handler = std::make_unique<rendezvous::StaticRendezvous>(
      o, std::move(store), connector(master.host, master.port, secret));
  setup.secret = secret;
  setup.set_worker_namespace = worker_namespace_setter(setup.store_server.get(),
                                                       connector(master.host, master.port, secret));
  return setup;
}

// Store succession (rendezvous/store_succession.hpp): every agent publishes a standby store
// with each round, the one that hosts the store the store itself, and may open connections
// to any of them. A standby listens on --local_addr (else this machine's address toward the
// store) at the endpoint's port, or a free one where that is taken.
void start_standby(const LaunchConfig& config, const rendezvous::Endpoint& endpoint, bool host,
                   const std::string& secret, RendezvousSetup& setup,
                   rendezvous::DynamicRendezvousOptions& o) {
  o.tolerance = config.peer_tolerance;
  o.dial = [secret](const rendezvous::Endpoint& at, rendezvous::Duration connect_timeout) {
    rendezvous::TcpStoreOptions t;
    t.host = at.host;
    t.port = at.port;
    t.secret = secret;
    t.connect_timeout = connect_timeout;
    return std::make_shared<rendezvous::TcpStore>(t);
  };
  if (host) {
    o.standby = endpoint;  // the store itself
    return;
  }
  std::string address = config.local_addr ? normalize_host(*config.local_addr)
                                          : local_address_toward(endpoint.host, endpoint.port);
  if (address.empty()) {
    DDP_LOG_WARN("no address of this machine toward the store at " +
                 rendezvous::format_endpoint(endpoint) +
                 ": this node keeps no standby store (give --local_addr)");
    return;
  }
  rendezvous::StoreServerOptions standby;
  standby.host = address;
  standby.secret = secret;
  for (const uint16_t port : {endpoint.port, uint16_t{0}}) {
    standby.port = port;
    try {
      setup.standby_server = std::make_unique<rendezvous::StoreServer>(standby);
      break;
    } catch (const rendezvous::BindError& e) {
      if (port == 0 || e.err() != EADDRINUSE) {
        DDP_LOG_WARN(std::string("this node keeps no standby store: ") + e.what());
        return;
      }
    }
  }
  o.standby = rendezvous::Endpoint{address, setup.standby_server->port()};
}

// Elastic: the agent whose address matches --rdzv_endpoint hosts the store (is_host), or
// it runs elsewhere (a standalone ddpstore); everybody meets in rounds on it.
RendezvousSetup make_dynamic_rendezvous(const LaunchConfig& config, std::string secret) {
  require_agent_store(config);
  if (*config.rdzv_backend != "c10d") {
    throw ConfigError("--rdzv_backend=" + *config.rdzv_backend +
                      ": expected static, c10d or etcd-v3 (also etcd, etcd-v2)");
  }
  if (!config.rdzv_endpoint) {
    throw ConfigError("--rdzv_backend=c10d needs --rdzv_endpoint host:port (the store)");
  }
  const auto endpoint = rendezvous::parse_endpoint(*config.rdzv_endpoint, kDefaultRdzvPort);
  const auto conf = rendezvous::parse_rdzv_conf(config.rdzv_conf.value_or(""));
  for (const auto& key : conf.ignored) {
    DDP_LOG_WARN("--rdzv_conf " + key + " has no effect with this launcher; ignored");
  }
  if (conf.protocol || conf.cacert || conf.cert || conf.key || conf.user || conf.password_file) {
    DDP_LOG_WARN(
        "--rdzv_conf protocol/cacert/cert/key/user/password_file apply to the etcd "
        "backend only; ignored with c10d");
  }

  RendezvousSetup setup;
  setup.run_id = config.run_id.value_or("none");
  setup.workers_use_agent_store = true;
  rendezvous::DynamicRendezvousOptions o;
  o.run_id = setup.run_id;
  o.min_nodes = config.min_nodes;
  o.max_nodes = config.max_nodes;
  o.local_world_size = config.nproc_per_node;
  const auto local_addr = normalized(config.local_addr);
  o.node_addr = local_addr.value_or("");
  o.master_addr = endpoint.host;
  o.master_port = endpoint.port;
  o.join_timeout = conf.join_timeout.value_or(o.join_timeout);
  o.last_call_timeout = conf.last_call_timeout.value_or(o.last_call_timeout);
  // In place, a silent member back later re-forms in well under a second: do not wait for it.
  o.wait_for_lost = !config.in_place_recovery;
  o.close_timeout = conf.close_timeout.value_or(o.close_timeout);
  o.exit_barrier_timeout = conf.exit_barrier_timeout.value_or(o.exit_barrier_timeout);
  o.heartbeat_interval = conf.heartbeat_interval.value_or(
      std::min<rendezvous::Duration>(o.heartbeat_interval, config.peer_tolerance / 5));
  o.lease_timeout = conf.lease_timeout.value_or(
      rendezvous::lease_for(config.peer_tolerance, o.heartbeat_interval));

  // is_host: explicit, else "the endpoint is my --local_addr", else "it is this machine".
  const bool explicit_host = conf.is_host.has_value();
  bool host = explicit_host ? *conf.is_host
              : local_addr  ? *local_addr == endpoint.host
                            : is_local_address(endpoint.host);
  note_open_store(config, secret);
  // One node that hosts its own store: nobody else needs the secret, so make one.
  if (secret.empty() && host && config.max_nodes == 1) secret = generate_secret();
  if (host) {
    try {
      setup.store_server = host_job_store(config, endpoint.host, endpoint.port, secret);
    } catch (const rendezvous::BindError& e) {
      // Several agents on one machine all match; the first one to bind hosts the store. Any
      // other bind failure would leave everybody waiting for a store nobody hosts.
      if (explicit_host || e.err() != EADDRINUSE) throw;
      host = false;
    }
  }
  o.hosts_store = host;
  std::shared_ptr<rendezvous::Store> store;
  if (host) {
    store =
        rendezvous::connect_own_store(endpoint.host, *setup.store_server, kOwnStoreConnectTimeout,
                                      rendezvous::kDefaultStoreTimeout, secret);
  } else {
    store = rendezvous::connect_store({endpoint.host, endpoint.port, "the c10d endpoint",
                                       o.join_timeout, rendezvous::kDefaultStoreTimeout,
                                       std::chrono::seconds(5), secret});
  }
  if (conf.store_succession.value_or(true)) {
    start_standby(config, endpoint, host, secret, setup, o);
  }
  auto handler = std::make_unique<rendezvous::DynamicRendezvous>(
      o, std::move(store), connector(endpoint.host, endpoint.port, secret));
  setup.secret = secret;
  if (o.dial) {
    // The workers' namespace is declared on the store the rendezvous uses now: it moves.
    setup.set_worker_namespace = [rdzv = handler.get(), hosted = setup.store_server.get(),
                                  standby = setup.standby_server.get(), me = o.standby,
                                  secret](const std::string& prefix) {
      const auto at = rdzv->store_endpoint();
      const bool mine = at.host == me.host && at.port == me.port;
      rendezvous::StoreServer* served = !mine ? nullptr : hosted != nullptr ? hosted : standby;
      declare_worker_namespace(served, connector(at.host, at.port, secret), prefix);
    };
  } else {
    setup.set_worker_namespace = worker_namespace_setter(
        setup.store_server.get(), connector(endpoint.host, endpoint.port, secret));
  }
  setup.handler = std::move(handler);
  return setup;
}

RendezvousSetup make_local(const LaunchConfig& config, std::string secret) {
  RendezvousSetup setup;
  setup.run_id = config.run_id.value_or(config.standalone ? random_run_id() : "none");

  rendezvous::LocalRendezvousOptions local;
  local.run_id = setup.run_id;
  local.nproc_per_node = config.nproc_per_node;
  // Workers get the bare address ("[::1]" -> "::1"), as torchrun hands it.
  local.master_addr = normalize_host(config.master_addr.value_or(kDefaultMasterAddr));
  int port = config.standalone ? 0 : config.master_port.value_or(kDefaultMasterPort);

  if (config.agent_store) {
    // One node: the secret never has to leave this agent and its workers, so make one.
    if (secret.empty()) secret = generate_secret();
    StoreHostingOptions o;
    o.reach = StoreReach::kThisMachine;
    o.dial_host = local.master_addr;
    o.bind = config.store_bind;
    o.port = static_cast<uint16_t>(port);
    o.secret = secret;
    auto hosted = host_store(o);
    setup.store_server = std::move(hosted.server);
    local.master_addr = hosted.dial;
    local.master_port = setup.store_server->port();
    // The workers dial master_addr: a store they could not reach there fails now.
    rendezvous::connect_own_store(local.master_addr, *setup.store_server, kOwnStoreConnectTimeout,
                                  rendezvous::kDefaultStoreTimeout, secret);
    setup.workers_use_agent_store = true;
    setup.secret = secret;
    setup.set_worker_namespace = worker_namespace_setter(setup.store_server.get(), nullptr);
  } else {
    local.master_port = port == 0 ? pick_free_port(local.master_addr) : static_cast<uint16_t>(port);
  }
  setup.handler = std::make_unique<rendezvous::LocalRendezvous>(local);
  return setup;
}

}  // namespace

std::string job_secret(const LaunchConfig& config, const Environment& env) {
  if (config.secret_file) return load_secret_file(*config.secret_file);
  auto it = env.find(env::kSecretFile);
  if (it != env.end() && !it->second.empty()) return load_secret_file(it->second);
  return {};
}

RendezvousSetup make_rendezvous(const LaunchConfig& given, const Environment& env) {
  LaunchConfig config = given;
  // Inside an srun step the missing multi-node options come from SLURM; flags win.
  if (!config.standalone) apply_slurm_defaults(config, env);
  // torchrun 2.15: one node with no port and no rendezvous endpoint is a standalone job (a
  // free port, a random run id unless one was given), so two such jobs on one machine do not
  // both try 29500.
  if (!config.standalone && config.max_nodes == 1 && !config.master_port && !config.rdzv_endpoint &&
      (!config.rdzv_backend || *config.rdzv_backend == "static")) {
    config.standalone = true;
  }
  std::string secret = job_secret(config, env);
  if (config.standalone) return make_local(config, std::move(secret));
  if (config.rdzv_backend && is_etcd_backend(*config.rdzv_backend)) {
    auto setup = make_etcd_rendezvous(config, secret);
    note_open_store(config, secret);
    return setup;
  }
  if (asks_elastic_rendezvous(config)) return make_dynamic_rendezvous(config, std::move(secret));
  if (config.max_nodes > 1) return make_static_rendezvous(config, std::move(secret));
  return make_local(config, std::move(secret));
}

}  // namespace ddp::launcher
