#pragma once
// The one place that turns a LaunchConfig into how this agent meets the others: an optional
// store server this agent hosts, and the RendezvousHandler the agent drives.
#include <functional>
#include <memory>
#include <string>

#include "launcher/launch_config.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/store/server/store_server.hpp"

namespace ddp::launcher {

struct RendezvousSetup {
  std::unique_ptr<rendezvous::StoreServer> store_server;  // null when this agent hosts none
  std::unique_ptr<rendezvous::RendezvousHandler> handler;
  std::string run_id;                    // TORCHELASTIC_RUN_ID
  bool workers_use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE
  // The job secret (docs/security.md): from --secret_file / DDPLAUNCH_SECRET_FILE, or made
  // fresh for a one-node job; empty: the store is open. Workers get it as DDPLAUNCH_SECRET.
  std::string secret;
  // Declares the worker namespace ("/worker/attempt_3/") that PyTorch store clients opened
  // from now on are scoped to (docs/store.md, "Attempt scopes"). May block (a connection to
  // the store).
  std::function<void(const std::string&)> set_worker_namespace;
};

// The secret the job was given: --secret_file, else DDPLAUNCH_SECRET_FILE in env; empty when
// neither. ConfigError for a bad file. (make_rendezvous says so for a multi-node job.)
std::string job_secret(const LaunchConfig& config, const Environment& env);

// Builds the rendezvous for config; env supplies scheduler defaults (SLURM_*). The store is
// bound before this returns, so the port handed to workers is already listening.
// Throws ConfigError for unsupported combinations, StoreError when the port cannot be bound.
RendezvousSetup make_rendezvous(const LaunchConfig& config, const Environment& env);

}  // namespace ddp::launcher
