#include "launcher/config/slurm_env.hpp"

#include <limits>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/hostlist.hpp"
#include "common/parse_int.hpp"

namespace ddp::launcher {
namespace {

// torchrun's default c10d port, used when SLURM supplies the endpoint's host.
constexpr uint16_t kDefaultRdzvPort = 29400;

std::optional<std::string> lookup(const Environment& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int to_int(const char* name, const std::string& value, int min) {
  return static_cast<int>(parse_int(name, value, min, std::numeric_limits<int>::max()));
}

}  // namespace

std::optional<SlurmDefaults> read_slurm_defaults(const Environment& env) {
  auto job_id = lookup(env, env::kSlurmJobId);
  auto step_id = lookup(env, env::kSlurmStepId);
  if (!job_id || !step_id) return std::nullopt;
  SlurmDefaults d;
  d.run_id = *job_id + "." + *step_id;
  if (auto v = lookup(env, env::kSlurmNnodes)) d.nnodes = to_int(env::kSlurmNnodes, *v, 1);
  if (auto v = lookup(env, env::kSlurmNodeId)) d.node_rank = to_int(env::kSlurmNodeId, *v, 0);
  if (auto v = lookup(env, env::kSlurmNtasks)) d.ntasks = to_int(env::kSlurmNtasks, *v, 1);
  if (d.node_rank >= d.nnodes) {
    throw ConfigError(std::string(env::kSlurmNodeId) + "=" + std::to_string(d.node_rank) +
                      ": expected less than " + env::kSlurmNnodes + "=" + std::to_string(d.nnodes));
  }
  // The step's own list: a step on a subset of the allocation starts at its own first node.
  for (const char* name : {env::kSlurmStepNodelist, env::kSlurmJobNodelist}) {
    if (auto v = lookup(env, name)) {
      try {
        d.first_host = first_host(*v);
      } catch (const ConfigError& e) {
        throw ConfigError(std::string(name) + ": " + e.what());
      }
      break;
    }
  }
  return d;
}

bool apply_slurm_defaults(LaunchConfig& config, const Environment& env) {
  auto slurm = read_slurm_defaults(env);
  if (!slurm) return false;
  if (!config.nnodes) {
    config.nnodes = std::to_string(slurm->nnodes);
    config.min_nodes = config.max_nodes = slurm->nnodes;
  }
  const bool dynamic = asks_elastic_rendezvous(config);
  if (!config.node_rank && !dynamic && config.max_nodes > 1) {
    if (slurm->ntasks > slurm->nnodes) {
      throw ConfigError(std::string(env::kSlurmNtasks) + "=" + std::to_string(slurm->ntasks) +
                        " on " + env::kSlurmNnodes + "=" + std::to_string(slurm->nnodes) +
                        ": ddplaunch spawns the workers of a node itself and needs one task "
                        "per node (srun --ntasks-per-node=1), or pass --node_rank");
    }
    config.node_rank = slurm->node_rank;
  }
  // A one-node step keeps the single-node defaults (store on loopback).
  if (!slurm->first_host.empty() && config.max_nodes > 1) {
    if (!config.master_addr) config.master_addr = slurm->first_host;
    if (dynamic && !config.rdzv_endpoint) {
      config.rdzv_endpoint = join_host_port(slurm->first_host, kDefaultRdzvPort);
    }
  }
  if (!config.run_id) config.run_id = slurm->run_id;
  return true;
}

}  // namespace ddp::launcher
