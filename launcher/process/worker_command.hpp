#pragma once
// What one worker is started with: its argv (python -u script / module / executable, with
// ${local_rank} replaced) and its environment (the torchrun env contract, docs/env.md).
#include <string>
#include <vector>

#include "common/recovery_protocol.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/process/worker_spawner.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

// Facts about the current attempt that the env contract carries.
struct AttemptInfo {
  rendezvous::RendezvousInfo rendezvous;
  int restart_count = 0;
  std::string run_id = "none";
  bool use_agent_store = true;
  // The workers of a spare standing by: started before their node is admitted, they wait for
  // their place (recovery_protocol.hpp's kEnvSpare).
  bool spare = false;
};

// Who one worker is in an attempt: its place in the round (the numbers and the address the
// env contract hands it, recovery_protocol.hpp's WorkerPlace) and its local rank. Computed
// once, here: the worker's environment and the round notice a kept worker gets in an in-place
// re-form (a RoundNotice is a WorkerPlace) are both built from it, so they cannot disagree.
struct WorkerIdentity : recovery::WorkerPlace {
  int local_rank = 0;
};
WorkerIdentity worker_identity(const LaunchConfig& config, const AttemptInfo& attempt,
                               int local_rank);
// What a worker kept through an in-place re-form is told of its new round (round: the
// attempt it re-forms into): the values a worker started now finds in its environment.
recovery::RoundNotice round_notice(const WorkerIdentity& identity, int64_t round);

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
// The process local_rank's worker is started as: its argv, its environment (the contract, its
// error file, then extra "NAME=value" entries such as hang detection's) and its CPU binding.
WorkerProcessSpec worker_spec(const LaunchConfig& config, const Environment& env,
                              const AttemptInfo& attempt, int local_rank,
                              const std::string& error_file,
                              const std::vector<std::string>& extra_env, const CpuBinding& binding);
// True when OMP_NUM_THREADS will be set to 1 for the workers (worth one notice line).
bool sets_default_omp_threads(const LaunchConfig& config, const Environment& env);
// Replaces every "${local_rank}" in text.
std::string substitute_local_rank(const std::string& text, int local_rank);

}  // namespace ddp::launcher
