#pragma once
// Everything one training run is configured by; filled from flags by parse_command_line().
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/lr_schedule.hpp"
#include "trainer/optimizer.hpp"

namespace ddp::trainer {

struct TrainOptions {
  // --- data ---
  std::string data = "synthetic";  // a .csv/.csv.gz/.npy path, "synthetic", or "digits"
                                   // (= data/digits.csv.gz)
  int label_column = -1;
  double val_fraction = 0.2;
  bool standardize = true;  // scale features with the training split's mean/std
  std::size_t synthetic_rows = 4096;
  std::size_t synthetic_features = 64;
  int synthetic_classes = 10;
  double synthetic_separation = 6.0;  // class-centre distance in noise units

  // --- model and optimisation ---
  std::vector<std::size_t> hidden = {256, 256};
  int64_t epochs = 10;
  int64_t batch_size = 64;  // per rank
  int64_t max_steps = 0;    // stop after this many optimizer steps (0 = all epochs); the
                            // LR schedule still spans --epochs
  OptimizerOptions optimizer;
  double lr = 1e-3;
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;
  uint64_t seed = 0;  // split, synthetic data, init and shuffling

  // --- distributed ---
  std::string backend = "auto";  // auto | gloo | nccl
  // PyTorch DDP's default. Smaller caps start buckets during backward (overlap); on the
  // 2-core dev machine the extra collectives cost more than the overlap wins (docs/trainer.md).
  double bucket_cap_mb = 25.0;
  // Gloo collectives up to this size take the runtime's direct TCP mesh (one message step)
  // instead of Gloo's ring: the demo MLP's 336 KB gradient then costs one exchange.
  double gloo_direct_max_mb = 4.0;
  int64_t consistency_every = 0;  // compare parameter checksums across ranks every N steps
  int blas_threads = 1;           // OpenBLAS threads per worker

  // --- output ---
  int64_t log_every = 50;        // rank-0 progress line every N steps
  std::string metrics;           // JSON-lines metrics file (rank 0), "" = none
  std::string checkpoint_dir;    // "" = no checkpoints and no resume
  int64_t checkpoint_every = 0;  // steps; 0 = only at epoch end
  std::string out;               // final weights (safetensors), "" = none

  // --- fault injection for tests (documented in docs/trainer.md) ---
  int64_t fault_kill_at_step = 0;  // SIGKILL self after this step, first attempt only
  int64_t fault_hang_at_step = 0;  // stop making progress after this step, first attempt only
  int fault_rank = -1;             // which rank dies or hangs (-1 = the last rank)
  // SIGKILL the parent (the agent) and then self after this step, first attempt only: a node
  // lost at once (in-place recovery tests).
  int64_t fault_kill_node_at_step = 0;
  // Every rank sleeps this many ms after each step, every attempt (0 = none): a job slow
  // enough for end-to-end tests to act in the middle of an epoch.
  int64_t fault_slow_step_ms = 0;
  // Directory where each rank appends the dataset indices of every completed step to
  // samples-<pid>.txt ("" = none): end-to-end tests check no sample is skipped or repeated.
  std::string sample_log;
};

// ConfigError naming the flag and value for anything out of range.
void validate(const TrainOptions& options);

}  // namespace ddp::trainer
