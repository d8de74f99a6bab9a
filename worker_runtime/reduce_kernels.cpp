#include "worker_runtime/reduce_kernels.hpp"

#include <algorithm>
#include <cstdint>

namespace ddp::worker_runtime {
namespace {

template <class T, ReduceOp kOp>
inline T apply(T x, T y) {
  if constexpr (kOp == ReduceOp::kMin) {
    return std::min(x, y);
  } else if constexpr (kOp == ReduceOp::kMax) {
    return std::max(x, y);
  } else {
    return x + y;  // sum, and avg before the division
  }
}

// Gloo reduces in place (c == a) almost always; telling the compiler the in-place operand
// does not overlap the other lets it vectorize without runtime alias checks.
template <class T, ReduceOp kOp>
void reduce_kernel(void* c_raw, const void* a_raw, const void* b_raw, size_t n) {
  if (c_raw == a_raw) {
    T* __restrict__ c = static_cast<T*>(c_raw);
    const T* __restrict__ b = static_cast<const T*>(b_raw);
    for (size_t i = 0; i < n; ++i) {
      c[i] = apply<T, kOp>(c[i], b[i]);
    }
    return;
  }
  auto* c = static_cast<T*>(c_raw);
  const auto* a = static_cast<const T*>(a_raw);
  const auto* b = static_cast<const T*>(b_raw);
  for (size_t i = 0; i < n; ++i) {
    c[i] = apply<T, kOp>(a[i], b[i]);
  }
}

template <class T>
ReduceFunction for_type(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return &reduce_kernel<T, ReduceOp::kMin>;
    case ReduceOp::kMax:
      return &reduce_kernel<T, ReduceOp::kMax>;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      break;
  }
  return &reduce_kernel<T, ReduceOp::kSum>;
}

}  // namespace

ReduceFunction reduce_function(DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat64:
      return for_type<double>(op);
    case DataType::kInt64:
      return for_type<int64_t>(op);
    case DataType::kFloat32:
      break;
  }
  return for_type<float>(op);
}

}  // namespace ddp::worker_runtime
