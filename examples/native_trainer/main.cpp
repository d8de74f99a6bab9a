// The smallest native worker: join the job ddplaunch started (the env contract), all-reduce
// one value per rank, print what every rank received.
//   ddplaunch --nproc_per_node=2 ./native_trainer
// prints, from each rank: "rank R of 2 (gloo, ddplaunch X.Y.Z): sum of rank + 1 = 3".
#include <cstdio>
#include <span>

#include "common/version.hpp"
#include "worker_runtime/dist_context.hpp"
#include "worker_runtime/error_file.hpp"

int main(int argc, char** argv) {
  // run_main turns an exception into an error file the agent reports, and exit status 1.
  return ddp::worker_runtime::run_main(argc, argv, [](int /*argc*/, char** /*argv*/) {
    auto ctx = ddp::worker_runtime::init();
    double value = ctx->rank() + 1;
    ctx->process_group().all_reduce(std::span<double>(&value, 1));
    std::printf("rank %d of %d (%s, ddplaunch %s): sum of rank + 1 = %g\n", ctx->rank(),
                ctx->world_size(), ctx->backend().c_str(), ddp::kVersion, value);
    return 0;
  });
}
