#pragma once
// Element-wise reduction kernels Gloo calls while reducing (c = op(a, b), n elements).
// Compiled at -O3 (see CMakeLists.txt): at -O2 GCC 12 leaves these loops scalar.
#include <cstddef>

#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

using ReduceFunction = void (*)(void* c, const void* a, const void* b, size_t n);

// The kernel for type and op (kAvg reduces like kSum; the caller divides afterwards).
ReduceFunction reduce_function(DataType type, ReduceOp op);

}  // namespace ddp::worker_runtime
