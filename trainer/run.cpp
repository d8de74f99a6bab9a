#include "trainer/run.hpp"

#include <iostream>
#include <memory>

#include "common/env_names.hpp"
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
  const bool launched = env.contains(env::kRank) || env.contains(env::kSlurmProcId);
  std::unique_ptr<wr::DistContext> context;
  std::unique_ptr<SoloProcessGroup> solo;
  wr::ProcessGroup* group = nullptr;
  int restart_count = 0;
  if (launched) {
    wr::InitOptions init;
    // This build's model runs on the CPU, so "auto" means Gloo (host buffers) here.
    init.backend = options.backend == "auto" ? "gloo" : options.backend;
    context = wr::init(init);
    group = &context->process_group();
    restart_count = context->restart_count();
  } else {
    solo = std::make_unique<SoloProcessGroup>();
    group = solo.get();
  }
  Trainer trainer(options, *group, restart_count, prepare_data(options));
  const TrainResult result = trainer.run();
  if (group->rank() == 0) {
    std::cout << "[train] done: " << result.steps << " steps, global validation accuracy "
              << result.validation.accuracy << " on " << result.validation.count << " samples";
    if (!options.out.empty()) std::cout << ", weights written to " << options.out;
    std::cout << std::endl;
  }
  return 0;
}

}  // namespace ddp::trainer
