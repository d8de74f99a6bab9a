#include "worker_runtime/env_contract.hpp"

#include <cctype>
#include <charconv>
#include <limits>
#include <optional>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "rendezvous/store/host_address.hpp"

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

// Parses a whole decimal integer in [lo, hi]; names the variable and the range otherwise.
int64_t parse_int(const char* name, const std::string& value, int64_t lo, int64_t hi) {
  int64_t out = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(first, last, out);
  if (value.empty() || ec != std::errc() || ptr != last) {
    throw ConfigError(std::string(name) + "='" + value + "' is not an integer (expected " +
                      std::to_string(lo) + ".." + std::to_string(hi) + ")");
  }
  if (out < lo || out > hi) {
    throw ConfigError(std::string(name) + "=" + value + " is out of range (expected " +
                      std::to_string(lo) + ".." + std::to_string(hi) + ")");
  }
  return out;
}

int64_t require_int(const EnvMap& env, const char* name, int64_t lo, int64_t hi) {
  auto value = lookup(env, name);
  if (!value) {
    throw ConfigError(std::string(name) + " is not set (expected an integer " + std::to_string(lo) +
                      ".." + std::to_string(hi) + ")");
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
  // The first host ends at the first ',' outside brackets; a bracket range expands to its
  // first number with the range's zero padding ("node[07-09]" -> "node07").
  // A bracketed IPv6 address as first item is that address ("[fd00::1],n2" -> fd00::1).
  if (!nodelist.empty() && nodelist.front() == '[') {
    const size_t close = nodelist.find(']');
    std::string inside = close == std::string::npos ? "" : nodelist.substr(1, close - 1);
    if (inside.find(':') != std::string::npos) return inside;
  }
  std::string prefix;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',' && nodelist[i] != '[') {
    prefix += nodelist[i++];
  }
  if (prefix.empty()) {
    throw ConfigError(std::string(env::kSlurmJobNodelist) + "='" + nodelist +
                      "' does not start with a host name (expected e.g. node[01-04],gpu2)");
  }
  if (i == nodelist.size() || nodelist[i] == ',') {
    return prefix;
  }
  const size_t close = nodelist.find(']', i);
  if (close == std::string::npos) {
    throw ConfigError(std::string(env::kSlurmJobNodelist) + "='" + nodelist +
                      "' has an unclosed '[' (expected e.g. node[01-04])");
  }
  std::string first;
  for (size_t j = i + 1; j < close && std::isdigit(static_cast<unsigned char>(nodelist[j])); ++j) {
    first += nodelist[j];
  }
  if (first.empty()) {
    throw ConfigError(std::string(env::kSlurmJobNodelist) + "='" + nodelist +
                      "' has a range without a number (expected e.g. node[01-04])");
  }
  // Text after ']' up to the next ',' is a suffix of the same host ("rack[1-2]-gpu").
  std::string suffix;
  for (size_t j = close + 1; j < nodelist.size() && nodelist[j] != ','; ++j) {
    suffix += nodelist[j];
  }
  if (suffix.find('[') != std::string::npos) {
    throw ConfigError(std::string(env::kSlurmJobNodelist) + "='" + nodelist +
                      "' uses several ranges in one host name; set MASTER_ADDR instead");
  }
  return prefix + first + suffix;
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
    out.master_addr = rendezvous::normalize_host(*addr);  // "[::1]" -> "::1"
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
  out.store_prefix = lookup(env, env::kStorePrefix)
                         .value_or(env::kWorkerPrefixBase + std::to_string(out.restart_count));
  return out;
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
