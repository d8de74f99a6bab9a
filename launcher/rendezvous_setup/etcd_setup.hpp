#pragma once
// --rdzv_backend etcd-v3 (and torchrun's etcd / etcd-v2 names): the elastic rendezvous on an
// etcd v3 cluster the operators already run. Every key lives under /ddplaunch/<rdzv_id>/;
// node liveness is each agent's lease; group rank 0 serves the workers' TCP store
// (docs/etcd.md).
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"
#include "launcher/rendezvous_setup/rendezvous_setup.hpp"

namespace ddp::launcher {

// True for etcd-v3, etcd and etcd-v2.
bool is_etcd_backend(const std::string& backend);

// The members named by --rdzv_endpoint "host[:port],..." (port 2379 by default; http:// and
// https:// kept; protocol=https makes bare ones https://). ConfigError naming a bad one.
std::vector<std::string> etcd_endpoints(const std::string& text, bool https);

// Throws ConfigError for a bad flag or file, StoreError (naming every member tried) when no
// member answers within join_timeout.
RendezvousSetup make_etcd_rendezvous(const LaunchConfig& config, const std::string& secret);

}  // namespace ddp::launcher
