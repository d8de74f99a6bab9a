#pragma once
// OpenBLAS thread count. Each worker is one process per core: BLAS threads on top of that
// only oversubscribe the cores and slow the small GEMMs of an MLP down.

namespace ddp::trainer {

// Sets OpenBLAS's thread count when the BLAS in use is OpenBLAS (a no-op otherwise).
void set_blas_threads(int threads);

}  // namespace ddp::trainer
