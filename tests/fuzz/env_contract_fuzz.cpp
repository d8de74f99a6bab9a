// libFuzzer target: the env contract parser (worker_runtime/env_contract.hpp). The input is
// an environment, one NAME=VALUE per line; a NAME of one character stands for a variable of
// the contract (its byte picks one), so short inputs reach every variable. parse_env either
// returns a contract that keeps its own invariants or throws ConfigError.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "worker_runtime/env_contract.hpp"

namespace {

constexpr const char* kNames[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "DDPLAUNCH_BACKEND",
    "DDPLAUNCH_STORE_PREFIX",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURM_JOB_NODELIST",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_LAUNCH_NODE_IPADDR",
};

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry points are named so
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ddp::worker_runtime::EnvMap env;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    std::string name(line.substr(0, eq));
    if (name.size() == 1) {
      name = kNames[static_cast<uint8_t>(name[0]) % std::size(kNames)];
    }
    env[name] = std::string(line.substr(eq + 1));
  }
  try {
    const auto c = ddp::worker_runtime::parse_env(env);
    if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size || c.local_rank < 0 ||
        c.master_port == 0 || c.master_addr.empty()) {
      std::abort();
    }
  } catch (const ddp::ConfigError&) {
  }
  try {
    (void)ddp::worker_runtime::first_slurm_host(
        std::string(reinterpret_cast<const char*>(data), size));
  } catch (const ddp::ConfigError&) {
  }
  return 0;
}
