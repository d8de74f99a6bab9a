#include "launcher/config/launch_config.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "common/parse_int.hpp"
#include "launcher/config/own_programs.hpp"

namespace ddp::launcher {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

// A standby worker starts before anyone knows which local rank it takes: what is chosen by the
// local rank when a process starts cannot be given to it.
void check_standby_workers(const LaunchConfig& config) {
  const int n = config.standby_workers;
  if (n == 0) return;
  const std::string flag = "--standby_workers=" + std::to_string(n);
  if (n < 0 || n > 64) {
    throw ConfigError(flag + ": expected 0 to 64 parked processes per node");
  }
  if (!config.in_place_recovery) {
    throw ConfigError(flag +
                      " needs --in_place_recovery: a standby takes a dead worker's place "
                      "through the in-place re-form (docs/recovery.md, Standby workers)");
  }
  if (!config.hot_spares) {
    throw ConfigError(flag +
                      " with --spare_workers cold: a standby waits, parked, as a hot "
                      "spare's workers do; a script that cannot be parked cannot stand by");
  }
  if (config.virtual_local_rank) {
    throw ConfigError(flag +
                      " with --virtual_local_rank: each worker's CUDA_VISIBLE_DEVICES "
                      "is chosen by its local rank before it starts, which a standby "
                      "does not know yet");
  }
  if (config.pass_local_rank_arg) {
    throw ConfigError(flag +
                      " with --pass_local_rank_arg: the --local_rank argument is chosen "
                      "before the worker starts, which a standby does not know yet; "
                      "read LOCAL_RANK after ddplaunch_recovery.Elastic() instead");
  }
}

}  // namespace

bool asks_elastic_rendezvous(const LaunchConfig& config) {
  return config.rdzv_backend && *config.rdzv_backend != "static";
}

bool runs_python(const LaunchConfig& config) {
  if (config.run_path) return true;  // torchrun: "Takes precedence over --no_python"
  if (config.no_python) return false;
  return config.module || config.program.ends_with(".py");
}

int StreamSelection::mode_for(int local_rank) const {
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? default_mode : it->second;
}

bool StreamSelection::selects(int local_rank, int stream) const {
  return (mode_for(local_rank) & stream) != 0;
}

StreamSelection parse_stream_selection(const std::string& flag, const std::string& value) {
  auto bad = [&](const std::string& why) {
    return ConfigError(flag + "=" + value + ": " + why +
                       " (expected 0-3, or local_rank:mode pairs like 0:1,1:2)");
  };
  StreamSelection selection;
  if (value.find(':') == std::string::npos) {
    auto mode = try_parse_int(value, 0, 3);
    if (!mode) throw bad("not a mode");
    selection.default_mode = static_cast<int>(*mode);
    return selection;
  }
  std::stringstream items(value);
  std::string item;
  while (std::getline(items, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) throw bad("'" + item + "' has no ':'");
    auto rank = try_parse_int(item.substr(0, colon), 0, kMaxInt);
    auto mode = try_parse_int(item.substr(colon + 1), 0, 3);
    if (!rank) throw bad("'" + item + "' has a bad local rank");
    if (!mode) throw bad("'" + item + "' has a bad mode");
    selection.per_rank[static_cast<int>(*rank)] = static_cast<int>(*mode);
  }
  return selection;
}

std::pair<int, int> parse_nnodes(const std::string& value) {
  auto colon = value.find(':');
  auto min = try_parse_int(value.substr(0, colon), 1, kMaxInt);
  auto max = colon == std::string::npos ? min : try_parse_int(value.substr(colon + 1), 1, kMaxInt);
  if (!min || !max) {
    throw ConfigError("--nnodes=" + value + ": expected N or MIN:MAX with positive integers");
  }
  if (*min > *max) {
    throw ConfigError("--nnodes=" + value + ": MIN " + std::to_string(*min) +
                      " is greater than MAX " + std::to_string(*max));
  }
  return {static_cast<int>(*min), static_cast<int>(*max)};
}

std::string virtual_visible_device(const Environment& env, int local_rank) {
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it == env.end()) return std::to_string(local_rank);
  std::vector<std::string> devices;
  std::stringstream items(it->second);
  std::string item;
  while (std::getline(items, item, ',')) devices.push_back(item);
  if (it->second.empty() || it->second.back() == ',') devices.emplace_back();  // "" is one entry
  if (local_rank >= static_cast<int>(devices.size())) {
    throw ConfigError("--virtual_local_rank: CUDA_VISIBLE_DEVICES='" + it->second + "' lists " +
                      std::to_string(devices.size()) + " device(s), but local rank " +
                      std::to_string(local_rank) +
                      " needs its own (each worker gets the entry at its local rank); "
                      "list one per worker or lower --nproc_per_node");
  }
  auto& device = devices[static_cast<size_t>(local_rank)];
  device.erase(0, device.find_first_not_of(' '));
  device.erase(device.find_last_not_of(' ') + 1);
  return device;
}

int resolve_nproc_per_node(const std::string& spec, const Environment& env, const GpuProbe& gpus) {
  if (spec == "cpu") return cpu_count();
  if (spec == "gpu") {
    const auto present_gpus = gpus();
    const int present = static_cast<int>(present_gpus.size());
    const int visible = static_cast<int>(visible_gpus(present_gpus, env).size());
    if (visible == 0) {
      auto cvd = env.find("CUDA_VISIBLE_DEVICES");
      if (present > 0) {  // then CUDA_VISIBLE_DEVICES is set, or every GPU would be visible
        throw ConfigError("--nproc_per_node=gpu: no usable GPU: " + std::to_string(present) +
                          " present, CUDA_VISIBLE_DEVICES='" + cvd->second +
                          "' selects none of them; use a number or 'cpu'");
      }
      std::string named = cvd == env.end() ? std::string()
                                           : " (CUDA_VISIBLE_DEVICES='" + cvd->second +
                                                 "' names devices that do not exist)";
      throw ConfigError(
          "--nproc_per_node=gpu: CUDA is not available: no NVIDIA GPU found (no /dev/nvidia<N> "
          "device that the driver lists in /proc/driver/nvidia/gpus)" +
          named + "; use a number or 'cpu'");
    }
    return visible;
  }
  if (spec == "auto") {
    const int visible = static_cast<int>(visible_gpus(gpus(), env).size());
    return visible > 0 ? visible : cpu_count();
  }
  auto n = try_parse_int(spec, 1, kMaxInt);
  if (!n) {
    throw ConfigError("--nproc_per_node=" + spec +
                      ": expected a positive integer, 'gpu', 'cpu' or 'auto'");
  }
  return static_cast<int>(*n);
}

std::optional<std::string> find_executable(const std::string& name, const Environment& env) {
  auto executable = [](const std::filesystem::path& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    return std::nullopt;
  }
  auto it = env.find("PATH");
  std::string path_list = it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : it->second;
  std::stringstream dirs(path_list);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    auto candidate = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (executable(candidate)) return candidate.string();
  }
  for (const auto& own : own_program_dirs()) {
    if (executable(own / name)) return (own / name).string();
  }
  return std::nullopt;
}

void validate_config(const LaunchConfig& config, const Environment& env) {
  if (config.nproc_per_node < 1) {
    throw ConfigError("--nproc_per_node=" + std::to_string(config.nproc_per_node) +
                      ": expected at least 1");
  }
  if (config.master_port && (*config.master_port < 0 || *config.master_port > 65535)) {
    throw ConfigError("--master_port=" + std::to_string(*config.master_port) +
                      ": expected a port in 0-65535");
  }
  if (config.node_rank && *config.node_rank < 0) {
    throw ConfigError("--node_rank=" + std::to_string(*config.node_rank) +
                      ": expected a non-negative integer");
  }
  // Only against an explicit --nnodes: under SLURM the node count comes later, from the env.
  if (config.node_rank && config.nnodes && *config.node_rank >= config.max_nodes) {
    throw ConfigError("--node_rank=" + std::to_string(*config.node_rank) +
                      ": must be less than --nnodes (" + std::to_string(config.max_nodes) + ")");
  }
  if (config.max_restarts < 0) {
    throw ConfigError("--max_restarts=" + std::to_string(config.max_restarts) +
                      ": expected a non-negative integer");
  }
  if (config.monitor_interval_s < 0) {
    throw ConfigError("--monitor_interval=" + std::to_string(config.monitor_interval_s) +
                      ": expected a non-negative number of seconds");
  }
  if (config.stop_timeout.count() < 0) {
    throw ConfigError("--stop_timeout: expected a non-negative number of seconds");
  }
  if (config.in_place_recovery && !config.agent_store) {
    throw ConfigError(
        "--in_place_recovery with --no_agent_store: a kept worker re-joins through the agent's "
        "store (worker rank 0's store may be on the lost node); drop one of the two");
  }
  check_standby_workers(config);
  if (config.module && config.no_python && !config.run_path) {
    throw ConfigError("-m/--module and --no_python cannot be used together");
  }
  if (config.program.empty()) throw ConfigError("no training program given");
  if (runs_python(config)) {
    if (!find_executable(config.python_exec, env)) {
      throw ConfigError("python interpreter '" + config.python_exec +
                        "' (PYTHON_EXEC) was not found or is not executable");
    }
    std::error_code ec;
    if (config.run_path && !std::filesystem::exists(config.program, ec)) {
      // runpy.run_path also takes a directory or zip file with a __main__.py.
      throw ConfigError("--run_path: '" + config.program + "' does not exist");
    }
    if (!config.run_path && !config.module &&
        !std::filesystem::is_regular_file(config.program, ec)) {
      throw ConfigError("training script '" + config.program + "' does not exist");
    }
  } else if (!find_executable(config.program, env)) {
    std::string searched = "PATH";
    for (const auto& own : own_program_dirs()) searched += ", " + own.string();
    throw ConfigError("program '" + config.program +
                      "' does not exist or is not executable (searched " + searched +
                      " when it has no '/')");
  }
  if (config.local_ranks_filter) {
    std::string given;
    for (int rank : *config.local_ranks_filter) {
      given += (given.empty() ? "" : ",") + std::to_string(rank);
    }
    for (int rank : *config.local_ranks_filter) {
      if (rank >= config.nproc_per_node) {
        // Silently showing nothing would look like a hung job.
        throw ConfigError("--local_ranks_filter=" + given + ": local rank " + std::to_string(rank) +
                          " does not exist; valid local ranks are 0.." +
                          std::to_string(config.nproc_per_node - 1) +
                          " (--nproc_per_node=" + std::to_string(config.nproc_per_node) + ")");
      }
    }
  }
  // Every worker must find its own entry, before any of them starts.
  if (config.virtual_local_rank) virtual_visible_device(env, config.nproc_per_node - 1);
  if (config.pass_local_rank_arg && *config.pass_local_rank_arg != "local_rank" &&
      *config.pass_local_rank_arg != "local-rank") {
    throw ConfigError("--pass_local_rank_arg=" + *config.pass_local_rank_arg +
                      ": expected 'local_rank' or 'local-rank'");
  }
}

}  // namespace ddp::launcher
