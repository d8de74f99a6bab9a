#pragma once
// Defaults from a SLURM job step (`srun ddplaunch ...`, one task per node): nnodes from
// SLURM_NNODES, node_rank from SLURM_NODEID, the store host from the first host of the
// step's node list (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST), the run id from
// SLURM_JOB_ID and SLURM_STEP_ID. Explicit flags always win.
#include <optional>
#include <string>

#include "launcher/config/launch_config.hpp"

namespace ddp::launcher {

struct SlurmDefaults {
  int nnodes = 1;
  int node_rank = 0;
  int ntasks = 1;          // SLURM_NTASKS of the step (ddplaunch wants one per node)
  std::string first_host;  // node 0 of the step: hosts the store
  std::string run_id;      // "<job id>.<step id>"
};

// The defaults of the srun step this process runs in; nullopt outside a step (no
// SLURM_JOB_ID or SLURM_STEP_ID: not under SLURM, or in the batch script itself).
// Throws ConfigError naming the variable and its value when one does not parse.
std::optional<SlurmDefaults> read_slurm_defaults(const Environment& env);

// Fills what config leaves unset from the SLURM step: nnodes, node_rank (static
// rendezvous), master_addr and, for a c10d rendezvous, rdzv_endpoint "<first host>:29400"
// (both only with more than one node), and run_id. Returns true when the step supplied anything.
// Throws ConfigError when the step runs several ddplaunch tasks per node and node_rank would come
// from SLURM.
bool apply_slurm_defaults(LaunchConfig& config, const Environment& env);

}  // namespace ddp::launcher
