#include "launcher/rendezvous_setup/etcd_setup.hpp"

#include <algorithm>
#include <sstream>

#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/log.hpp"
#include "common/secret.hpp"
#include "launcher/rendezvous_setup/workers_store.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/rdzv_conf.hpp"
#include "rendezvous/store/etcd/etcd_codec.hpp"
#include "rendezvous/store/etcd/etcd_store.hpp"

namespace ddp::launcher {
namespace {

constexpr uint16_t kDefaultEtcdPort = 2379;

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// The lease of each agent: lease_timeout in whole seconds (etcd's TTL unit), at least 2.
std::chrono::seconds lease_ttl(rendezvous::Duration lease_timeout) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(lease_timeout).count();
  return std::chrono::seconds(std::max<int64_t>(2, (ms + 999) / 1000));
}

rendezvous::EtcdStoreOptions store_options(const LaunchConfig& config,
                                           const rendezvous::RdzvConf& conf,
                                           const std::string& run_id) {
  rendezvous::EtcdStoreOptions o;
  o.endpoints = etcd_endpoints(*config.rdzv_endpoint, conf.protocol.value_or("") == "https");
  o.prefix = "/ddplaunch/" + run_id + "/";
  o.tls.ca_file = conf.cacert.value_or("");
  o.tls.cert_file = conf.cert.value_or("");
  o.tls.key_file = conf.key.value_or("");
  if (o.tls.cert_file.empty() != o.tls.key_file.empty()) {
    throw ConfigError("--rdzv_conf: cert= and key= go together (a client certificate and its key)");
  }
  o.username = conf.user.value_or("");
  if (conf.password_file) {
    if (!conf.user) throw ConfigError("--rdzv_conf password_file= needs user=");
    o.password = load_secret_file(*conf.password_file);
  }
  return o;
}

}  // namespace

bool is_etcd_backend(const std::string& backend) {
  return backend == "etcd-v3" || backend == "etcd" || backend == "etcd-v2";
}

std::vector<std::string> etcd_endpoints(const std::string& text, bool https) {
  std::vector<std::string> endpoints;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    item = trimmed(item);
    if (item.empty()) continue;
    std::string url;
    if (item.rfind("http://", 0) == 0 || item.rfind("https://", 0) == 0) {
      url = item;
    } else {
      try {
        url = (https ? "https://" : "") +
              rendezvous::format_endpoint(rendezvous::parse_endpoint(item, kDefaultEtcdPort));
      } catch (const ConfigError& e) {
        throw ConfigError("--rdzv_endpoint '" + text + "': etcd member '" + item +
                          "': " + e.what());
      }
    }
    rendezvous::parse_etcd_endpoint(url);  // ConfigError naming a bad URL
    endpoints.push_back(url);
  }
  if (endpoints.empty()) {
    throw ConfigError("--rdzv_endpoint '" + text +
                      "': expected the etcd members as host:port[,host:port...]");
  }
  return endpoints;
}

RendezvousSetup make_etcd_rendezvous(const LaunchConfig& config, const std::string& secret) {
  if (!config.agent_store) {
    throw ConfigError("--no_agent_store does not apply to --rdzv_backend " + *config.rdzv_backend +
                      ": the group-rank-0 agent serves the workers' store (drop the flag)");
  }
  if (*config.rdzv_backend != "etcd-v3") {
    DDP_LOG_INFO("--rdzv_backend " + *config.rdzv_backend +
                 ": ddplaunch speaks etcd's v3 API (etcd 3.4 or later), as with etcd-v3");
  }
  if (!config.rdzv_endpoint) {
    throw ConfigError("--rdzv_backend " + *config.rdzv_backend +
                      " needs --rdzv_endpoint host:2379[,host:2379...] (the etcd members)");
  }
  const auto conf = rendezvous::parse_rdzv_conf(config.rdzv_conf.value_or(""));
  for (const auto& key : conf.ignored) {
    DDP_LOG_WARN("--rdzv_conf " + key + " has no effect with this launcher; ignored");
  }
  if (conf.is_host) {
    DDP_LOG_WARN("--rdzv_conf is_host has no effect with etcd: group rank 0 serves the workers");
  }

  RendezvousSetup setup;
  setup.run_id = config.run_id.value_or("none");
  setup.workers_use_agent_store = true;
  setup.secret = secret;

  rendezvous::DynamicRendezvousOptions o;
  o.run_id = setup.run_id;
  o.min_nodes = config.min_nodes;
  o.max_nodes = config.max_nodes;
  o.local_world_size = config.nproc_per_node;
  const std::string local_addr =
      config.local_addr ? normalize_host(*config.local_addr) : std::string();
  o.node_addr = local_addr;
  o.join_timeout = conf.join_timeout.value_or(o.join_timeout);
  o.last_call_timeout = conf.last_call_timeout.value_or(o.last_call_timeout);
  // In place, a silent member back later re-forms in well under a second: do not wait for it.
  o.wait_for_lost = !config.in_place_recovery;
  o.close_timeout = conf.close_timeout.value_or(o.close_timeout);
  o.exit_barrier_timeout = conf.exit_barrier_timeout.value_or(o.exit_barrier_timeout);
  o.heartbeat_interval = conf.heartbeat_interval.value_or(o.heartbeat_interval);
  // Silence tolerated: the last keepalive reached etcd up to a second before a silence began,
  // and the first after it may take 2 s more to get through (common/tcp_liveness.hpp).
  o.lease_timeout = conf.lease_timeout.value_or(config.peer_tolerance + std::chrono::seconds(3));
  o.heartbeats = false;  // each agent's lease is its liveness

  auto store_conf = store_options(config, conf, setup.run_id);
  store_conf.presence_ttl = lease_ttl(o.lease_timeout);
  // At start, etcd may be coming up too: keep trying every member for the join timeout, then
  // name them all.
  {
    auto probe_conf = store_conf;
    probe_conf.unreachable_timeout = o.join_timeout;
    probe_conf.timeout = o.join_timeout + std::chrono::seconds(10);  // the list comes first
    rendezvous::EtcdStore probe(probe_conf);
    probe.num_keys();
  }
  auto store = std::make_shared<rendezvous::EtcdStore>(store_conf);

  StoreHostingOptions w;
  w.dial_host = local_addr.empty() ? local_host_name() : local_addr;
  w.local_addr = local_addr;
  w.bind = config.store_bind;
  w.port = static_cast<uint16_t>(config.master_port.value_or(0));
  w.secret = secret;
  auto workers = std::make_shared<WorkerStoreServer>(w);
  o.worker_store = workers;

  // One EtcdStore serves every thread: each call takes a pooled connection, each watch its own.
  setup.handler =
      std::make_unique<rendezvous::DynamicRendezvous>(o, store, [store] { return store; });
  setup.set_worker_namespace = [workers](const std::string& prefix) {
    workers->set_worker_namespace(prefix);
  };
  return setup;
}

}  // namespace ddp::launcher
