#pragma once
// One `train` invocation: join the job (or run alone), load the data, train, report.
#include "trainer/train_options.hpp"

namespace ddp::trainer {

// Runs training as configured and returns the process exit status (0 on success). Joins the
// job through the worker runtime when RANK (or SLURM_PROCID) is set, else runs as a single
// process. Throws ConfigError/DataError/CheckpointError/CollectiveError on failure.
int run_training(const TrainOptions& options);

}  // namespace ddp::trainer
