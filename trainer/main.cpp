// train: the data-parallel MLP trainer. Run it under ddplaunch (or torchrun, or srun) for
// several workers, or on its own for one. See docs/trainer.md.
#include "common/log.hpp"
#include "trainer/cli.hpp"
#include "trainer/run.hpp"
#include "worker_runtime/error_file.hpp"

int main(int argc, char** argv) {
  ddp::log::init("train");
  return ddp::worker_runtime::run_main(argc, argv, [](int n, char** args) {
    const auto options = ddp::trainer::parse_command_line(n, args);
    return options ? ddp::trainer::run_training(*options) : 0;
  });
}
