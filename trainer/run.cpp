#include "trainer/run.hpp"

#include <iostream>
#include <memory>

#include "common/env_names.hpp"
#include "common/recovery_protocol.hpp"
#include "trainer/blas_threads.hpp"
#include "trainer/prepare_data.hpp"
#include "trainer/solo_process_group.hpp"
#include "trainer/trainer.hpp"
#include "worker_runtime/dist_context.hpp"

namespace ddp::trainer {
namespace wr = worker_runtime;

int run_training(const TrainOptions& options) {
  set_blas_threads(options.blas_threads);
  const wr::EnvMap env = wr::current_env();
  // A spare's worker has no RANK yet: init() waits for the round that admits its node (a
  // standby without the spare variable is refused there, not trained alone).
  const bool launched = env.contains(env::kRank) || env.contains(env::kSlurmProcId) ||
                        env.contains(recovery::kEnvSpare) || env.contains(recovery::kEnvStandby);
  std::unique_ptr<wr::DistContext> context;
  std::unique_ptr<SoloProcessGroup> solo;
  wr::ProcessGroup* group = nullptr;
  WorkerInfo worker;
  if (launched) {
    wr::InitOptions init;
    init.backend = options.backend;  // auto: NCCL when built with CUDA and a GPU is visible
    init.gloo_direct_max_bytes = static_cast<std::size_t>(options.gloo_direct_max_mb * 1024 * 1024);
    context = wr::init(init);
    group = &context->process_group();
    worker.restart_count = context->restart_count();
    worker.local_rank = context->local_rank();
    worker.context = context.get();
    // NCCL reduces device buffers, so the model lives on the GPU exactly when NCCL is used.
    worker.use_cuda = context->backend() == "nccl";
  } else {
    solo = std::make_unique<SoloProcessGroup>();
    group = solo.get();
    worker.use_cuda =
        options.backend == "nccl" || (options.backend == "auto" && wr::cuda_device_count() > 0);
  }
  Trainer trainer(options, *group, worker, prepare_data(options));
  const TrainResult result = trainer.run();
  // An in-place recovery replaced the group the trainer started with: ask the current one.
  const int rank = context ? context->process_group().rank() : group->rank();
  if (rank == 0) {
    std::cout << "[train] done: " << result.steps << " steps, global validation accuracy "
              << result.validation.accuracy << " on " << result.validation.count << " samples";
    if (!options.out.empty()) std::cout << ", weights written to " << options.out;
    std::cout << std::endl;
  }
  return 0;
}

}  // namespace ddp::trainer
