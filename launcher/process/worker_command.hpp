#pragma once
// What one worker is started with: its argv (python -u script / module / executable, with
// ${local_rank} replaced) and its environment (the torchrun env contract, docs/env.md).
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

// Facts about the current attempt that the env contract carries.
struct AttemptInfo {
  rendezvous::RendezvousInfo rendezvous;
  int restart_count = 0;
  std::string run_id = "none";
  bool use_agent_store = true;
};

// argv for local_rank; argv[0] is the resolved executable path.
std::vector<std::string> build_worker_argv(const LaunchConfig& config, const Environment& env,
                                           int local_rank);
// The full environment for local_rank: the agent's own environment with the contract
// variables set (and OMP_NUM_THREADS / NCCL defaults when unset).
Environment worker_environment(const LaunchConfig& config, const Environment& env,
                               const AttemptInfo& attempt, int local_rank,
                               const std::string& error_file);
// The same as "NAME=value" entries, as a child's environment is given.
std::vector<std::string> build_worker_env(const LaunchConfig& config, const Environment& env,
                                          const AttemptInfo& attempt, int local_rank,
                                          const std::string& error_file);
// True when OMP_NUM_THREADS will be set to 1 for the workers (worth one notice line).
bool sets_default_omp_threads(const LaunchConfig& config, const Environment& env);
// Replaces every "${local_rank}" in text.
std::string substitute_local_rank(const std::string& text, int local_rank);

}  // namespace ddp::launcher
