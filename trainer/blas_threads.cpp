#include "trainer/blas_threads.hpp"

// Declared weak so the trainer still links against a BLAS that is not OpenBLAS.
extern "C" void openblas_set_num_threads(int num_threads) __attribute__((weak));

namespace ddp::trainer {

void set_blas_threads(int threads) {
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(threads);
}

}  // namespace ddp::trainer
