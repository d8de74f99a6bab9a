#pragma once
// The one place that turns a LaunchConfig into how this agent meets the others: an optional
// store server this agent hosts, and the RendezvousHandler the agent drives.
#include <string>

#include "launcher/config/launch_config.hpp"
#include "launcher/rendezvous_setup/rendezvous_setup.hpp"

namespace ddp::launcher {

// The secret the job was given: --secret_file, else DDPLAUNCH_SECRET_FILE in env; empty when
// neither. ConfigError for a bad file. (make_rendezvous says so for a multi-node job.)
std::string job_secret(const LaunchConfig& config, const Environment& env);

// Builds the rendezvous for config; env supplies scheduler defaults (SLURM_*). The store is
// bound before this returns, so the port handed to workers is already listening.
// Throws ConfigError for unsupported combinations, StoreError when the port cannot be bound.
RendezvousSetup make_rendezvous(const LaunchConfig& config, const Environment& env);

}  // namespace ddp::launcher
