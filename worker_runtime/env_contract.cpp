#include "worker_runtime/env_contract.hpp"

#include <limits>
#include <optional>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/host_address.hpp"
#include "common/hostlist.hpp"
#include "common/parse_int.hpp"
#include "common/secret.hpp"

extern char** environ;  // NOLINT: POSIX

namespace ddp::worker_runtime {
namespace {

std::optional<std::string> lookup(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end()) {
    return std::nullopt;
  }
  return it->second;
}

int64_t require_int(const EnvMap& env, const char* name, int64_t lo, int64_t hi) {
  auto value = lookup(env, name);
  if (!value) {
    throw ConfigError(std::string(name) + " is not set (expected " + expected_int_text(lo, hi) +
                      ")");
  }
  return parse_int(name, *value, lo, hi);
}

int64_t optional_int(const EnvMap& env, const char* name, int64_t lo, int64_t hi,
                     int64_t fallback) {
  auto value = lookup(env, name);
  return value ? parse_int(name, *value, lo, hi) : fallback;
}

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  try {
    return first_host(nodelist);  // the launcher's grammar: "r[1-2]n[1-2]" -> r1n1
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(env::kSlurmJobNodelist) + ": " + e.what());
  }
}

EnvContract parse_env(const EnvMap& env) {
  EnvContract out;
  if (lookup(env, env::kRank)) {
    out.source = EnvSource::kTorchrun;
    out.world_size = static_cast<int>(require_int(env, env::kWorldSize, 1, kMaxInt));
    out.rank = static_cast<int>(require_int(env, env::kRank, 0, kMaxInt));
    out.local_rank = static_cast<int>(optional_int(env, env::kLocalRank, 0, kMaxInt, out.rank));
    out.local_world_size =
        static_cast<int>(optional_int(env, env::kLocalWorldSize, 1, kMaxInt, out.world_size));
  } else if (lookup(env, env::kSlurmProcId)) {
    out.source = EnvSource::kSlurm;
    out.world_size = static_cast<int>(require_int(env, env::kSlurmNtasks, 1, kMaxInt));
    out.rank = static_cast<int>(require_int(env, env::kSlurmProcId, 0, kMaxInt));
    out.local_rank = static_cast<int>(require_int(env, env::kSlurmLocalId, 0, kMaxInt));
    // SLURM_NTASKS_PER_NODE may be "2(x3)"; the local world size only matters for display.
    const int64_t nnodes = optional_int(env, env::kSlurmNnodes, 1, kMaxInt, 1);
    out.local_world_size = static_cast<int>((out.world_size + nnodes - 1) / nnodes);
  } else {
    throw ConfigError(std::string(env::kRank) + " is not set and neither is " + env::kSlurmProcId +
                      ": start the worker with ddplaunch/torchrun/srun, or set RANK, "
                      "WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  }
  const char* rank_name = out.source == EnvSource::kSlurm ? env::kSlurmProcId : env::kRank;
  const char* world_name = out.source == EnvSource::kSlurm ? env::kSlurmNtasks : env::kWorldSize;
  if (out.rank >= out.world_size) {
    throw ConfigError(std::string(rank_name) + "=" + std::to_string(out.rank) +
                      " must be less than " + world_name + "=" + std::to_string(out.world_size));
  }
  if (out.local_world_size > out.world_size) {
    throw ConfigError(std::string(env::kLocalWorldSize) + "=" +
                      std::to_string(out.local_world_size) + " exceeds " + world_name + "=" +
                      std::to_string(out.world_size));
  }
  if (out.local_rank >= out.local_world_size && out.source == EnvSource::kTorchrun) {
    throw ConfigError(std::string(env::kLocalRank) + "=" + std::to_string(out.local_rank) +
                      " must be less than " + env::kLocalWorldSize + "=" +
                      std::to_string(out.local_world_size));
  }

  if (auto addr = lookup(env, env::kMasterAddr)) {
    if (addr->empty()) {
      throw ConfigError(std::string(env::kMasterAddr) + " is empty (expected a host name or IP)");
    }
    out.master_addr = normalize_host(*addr);  // "[::1]" -> "::1"
    if (out.master_addr.empty()) {
      throw ConfigError(std::string(env::kMasterAddr) + "='" + *addr +
                        "' names no host (expected a host name or IP)");
    }
  } else if (out.source == EnvSource::kSlurm) {
    auto nodelist = lookup(env, env::kSlurmJobNodelist);
    if (!nodelist) {
      throw ConfigError(std::string(env::kMasterAddr) + " and " + env::kSlurmJobNodelist +
                        " are both unset: cannot tell where the store is");
    }
    out.master_addr = first_slurm_host(*nodelist);
  } else if (out.world_size > 1) {
    throw ConfigError(std::string(env::kMasterAddr) + " is not set (expected the store host)");
  }

  if (auto port = lookup(env, env::kMasterPort)) {
    out.master_port = static_cast<uint16_t>(parse_int(env::kMasterPort, *port, 1, 65535));
  } else if (out.world_size > 1 && out.source == EnvSource::kTorchrun) {
    throw ConfigError(std::string(env::kMasterPort) + " is not set (expected a port 1..65535)");
  }

  out.restart_count = static_cast<int>(optional_int(env, env::kRestartCount, 0, kMaxInt, 0));
  const std::string agent_store = lookup(env, env::kUseAgentStore).value_or("");
  out.use_agent_store = agent_store == "True" || agent_store == "true" || agent_store == "1";
  out.error_file = lookup(env, env::kErrorFile).value_or("");
  out.backend = lookup(env, env::kBackend).value_or("");
  out.store_prefix =
      lookup(env, env::kStorePrefix).value_or(attempt_store_prefix(out.restart_count));
  out.group_rank = static_cast<int>(optional_int(env, env::kGroupRank, 0, kMaxInt, 0));
  out.secret =
      secret_from_env([&](const char* name) { return lookup(env, name); }).value_or(std::string());
  return out;
}

std::string attempt_store_prefix(int64_t attempt) {
  return env::kWorkerPrefixBase + std::to_string(attempt);
}

EnvMap current_env() {
  EnvMap out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) {
      out.emplace(entry.substr(0, eq), entry.substr(eq + 1));
    }
  }
  return out;
}

}  // namespace ddp::worker_runtime
