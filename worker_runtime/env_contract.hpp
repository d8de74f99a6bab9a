#pragma once
// The env contract a worker receives from ddplaunch (torchrun's names), parsed and checked.
// Pure: parse_env() takes a map, so every case is testable without touching the process env.
#include <cstdint>
#include <map>
#include <string>

namespace ddp::worker_runtime {

using EnvMap = std::map<std::string, std::string>;

// Where the identity came from: the torchrun contract or a bare `srun` step.
enum class EnvSource { kTorchrun, kSlurm };

struct EnvContract {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;  // GROUP_RANK (0 when unset): this node's rank among the nodes
  std::string master_addr = "127.0.0.1";  // bare: MASTER_ADDR=[::1] gives ::1
  uint16_t master_port = 29500;
  int restart_count = 0;
  std::string error_file;    // TORCHELASTIC_ERROR_FILE ("" when unset)
  std::string backend;       // DDPLAUNCH_BACKEND ("" when unset)
  std::string store_prefix;  // DDPLAUNCH_STORE_PREFIX or /worker/attempt_<restart_count>
  EnvSource source = EnvSource::kTorchrun;
  // TORCHELASTIC_USE_AGENT_STORE: the agent hosts the store. Otherwise rank 0 hosts it at
  // MASTER_ADDR:MASTER_PORT (as PyTorch's env:// does for manual launches and bare srun).
  bool use_agent_store = false;
  // The job secret: DDPLAUNCH_SECRET (hex, as the agent hands it) or the file in
  // DDPLAUNCH_SECRET_FILE; "" when neither (the store is open).
  std::string secret;
};

// Parses and checks the contract (RANK < WORLD_SIZE, port in 1..65535, ...); falls back to
// SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS and the first host of SLURM_JOB_NODELIST when RANK
// is unset. Throws ConfigError naming the variable, its value and what was expected.
EnvContract parse_env(const EnvMap& env);

// The store prefix of one attempt (and, with in-place recovery, of one rendezvous round):
// "/worker/attempt_<attempt>", the default of EnvContract::store_prefix.
std::string attempt_store_prefix(int64_t attempt);

// The current process environment as an EnvMap.
EnvMap current_env();

// First host of a SLURM hostlist, in the launcher's grammar (common/hostlist.hpp):
// "node[01-04,07],gpu2" -> "node01", "r[1-2]n[1-2]" -> "r1n1", "[fd00::1],n2" -> "fd00::1".
// ConfigError naming SLURM_JOB_NODELIST, the text and the position when malformed.
std::string first_slurm_host(const std::string& nodelist);

}  // namespace ddp::worker_runtime
