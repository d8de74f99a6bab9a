#include "launcher/process/worker_command.hpp"

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/peer_tolerance.hpp"
#include "launcher/config/signal_list.hpp"

namespace ddp::launcher {
namespace {

// --run_path: what torchrun 1.13's worker does with it (run.py's run_script_path under
// elastic's record()): sys.argv = [script, args...], runpy.run_path(script, "__main__"), and
// an uncaught exception is written to TORCHELASTIC_ERROR_FILE in PyTorch's format unless the
// script's own @record already wrote one. argv[0] of `python -c` is "-c", dropped here.
constexpr const char* kRunPathBootstrap = R"(import json, os, runpy, sys, time, traceback
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except Exception as e:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path and not os.path.exists(path):
        extra = {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}
        with open(path, "w") as f:
            json.dump({"message": {"message": f"{type(e).__name__}: {e}", "extraInfo": extra}}, f)
    raise
)";

}  // namespace

std::string substitute_local_rank(const std::string& text, int local_rank) {
  static const std::string kToken = "${local_rank}";
  std::string result = text;
  for (auto pos = result.find(kToken); pos != std::string::npos; pos = result.find(kToken, pos)) {
    auto value = std::to_string(local_rank);
    result.replace(pos, kToken.size(), value);
    pos += value.size();
  }
  return result;
}

std::vector<std::string> build_worker_argv(const LaunchConfig& config, const Environment& env,
                                           int local_rank) {
  std::vector<std::string> argv;
  bool python = runs_python(config);
  const std::string& executable = python ? config.python_exec : config.program;
  auto resolved = find_executable(executable, env);
  if (!resolved) {
    throw ConfigError("'" + executable + "' does not exist or is not executable");
  }
  argv.push_back(*resolved);
  if (python) {
    argv.emplace_back("-u");  // unbuffered: lines reach the agent (and the console) at once
    if (config.run_path) {
      argv.emplace_back("-c");
      argv.emplace_back(kRunPathBootstrap);
    } else if (config.module) {
      argv.emplace_back("-m");
    }
    argv.push_back(substitute_local_rank(config.program, local_rank));
  }
  if (config.pass_local_rank_arg) {
    // torch.distributed.launch put it before the script's own arguments.
    argv.push_back("--" + *config.pass_local_rank_arg + "=" + std::to_string(local_rank));
  }
  for (const auto& arg : config.program_args) {
    argv.push_back(substitute_local_rank(arg, local_rank));
  }
  return argv;
}

WorkerIdentity worker_identity(const LaunchConfig& config, const AttemptInfo& attempt,
                               int local_rank) {
  const auto& info = attempt.rendezvous;
  WorkerIdentity id;
  id.rank = info.rank_offset + local_rank;
  id.local_rank = local_rank;
  id.world_size = info.world_size;
  id.local_world_size = config.nproc_per_node;
  id.group_rank = info.group_rank;
  id.group_world_size = info.group_world_size;
  // One role per job: the role rank is the global rank.
  id.role_rank = id.rank;
  id.role_world_size = id.world_size;
  id.master_addr = info.master_addr;
  id.master_port = info.master_port;
  id.restart_count = attempt.restart_count;
  return id;
}

recovery::RoundNotice round_notice(const WorkerIdentity& identity, int64_t round) {
  recovery::RoundNotice notice;
  static_cast<recovery::WorkerPlace&>(notice) = identity;  // the same fields, by definition
  notice.round = round;
  notice.local_rank = identity.local_rank;
  return notice;
}

bool sets_default_omp_threads(const LaunchConfig& config, const Environment& env) {
  return config.nproc_per_node > 1 && env.count(env::kOmpNumThreads) == 0;
}

Environment worker_environment(const LaunchConfig& config, const Environment& env,
                               const AttemptInfo& attempt, int local_rank,
                               const std::string& error_file) {
  Environment worker = env;
  const WorkerIdentity id = worker_identity(config, attempt, local_rank);
  auto set = [&](const char* name, const std::string& value) { worker[name] = value; };
  // A spare's worker gets its place with the notice that admits its node.
  for (auto& [name, value] : recovery::place_variables(id)) {
    if (attempt.spare) {
      worker.erase(name);
    } else {
      worker[name] = value;
    }
  }
  if (attempt.spare) {
    set(recovery::kEnvSpare, "1");
  } else {
    worker.erase(recovery::kEnvSpare);
  }
  if (config.virtual_local_rank) {
    // torchrun 2.x: each worker sees only its own GPU, as device 0.
    set(env::kLocalRank, "0");
    set(env::kCudaVisibleDevices, virtual_visible_device(env, local_rank));
  } else {
    set(env::kLocalRank, std::to_string(id.local_rank));
  }
  set(env::kLocalWorldSize, std::to_string(id.local_world_size));
  set(env::kRoleName, config.role);
  set(env::kMaxRestarts, std::to_string(config.max_restarts));
  set(env::kRunId, attempt.run_id);
  set(env::kUseAgentStore, attempt.use_agent_store ? "True" : "False");
  set(env::kErrorFile, error_file);
  set(env::kSignalsToHandle, signal_list_names(config.signals_to_handle));
  // Native workers' store connections and direct mesh keepalive follow the job's tolerance.
  set(env::kPeerTolerance, tolerance_seconds(config.peer_tolerance));
  if (sets_default_omp_threads(config, env)) set(env::kOmpNumThreads, "1");
  if (env.count(env::kPythonFaultHandler) == 0) set(env::kPythonFaultHandler, "1");
  if (env.count(env::kTorchNcclAsyncErrorHandling) == 0) {
    set(env::kTorchNcclAsyncErrorHandling, "1");
  }
  // PyTorch 1.x reads only the old name (torchrun 1.13 set only it); 2.x reads the new one
  // and warns on every rank that the old one is deprecated when it is set (seen on the GPU
  // machine: docs/gpu.md). Both when the workers' PyTorch is unknown.
  if (env.count(env::kNcclAsyncErrorHandling) == 0 && config.worker_torch_major.value_or(1) < 2) {
    set(env::kNcclAsyncErrorHandling, "1");
  }
  return worker;
}

std::vector<std::string> build_worker_env(const LaunchConfig& config, const Environment& env,
                                          const AttemptInfo& attempt, int local_rank,
                                          const std::string& error_file) {
  const Environment worker = worker_environment(config, env, attempt, local_rank, error_file);
  std::vector<std::string> result;
  result.reserve(worker.size());
  for (const auto& [name, value] : worker) result.push_back(name + "=" + value);
  return result;
}

WorkerProcessSpec worker_spec(const LaunchConfig& config, const Environment& env,
                              const AttemptInfo& attempt, int local_rank,
                              const std::string& error_file,
                              const std::vector<std::string>& extra_env,
                              const CpuBinding& binding) {
  WorkerProcessSpec spec;
  spec.local_rank = local_rank;
  spec.argv = build_worker_argv(config, env, local_rank);
  spec.env = build_worker_env(config, env, attempt, local_rank, error_file);
  spec.env.insert(spec.env.end(), extra_env.begin(), extra_env.end());
  spec.binding = binding;
  return spec;
}

}  // namespace ddp::launcher
