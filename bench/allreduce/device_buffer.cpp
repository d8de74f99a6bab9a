#include "device_buffer.hpp"

#include <string>

#include "common/error.hpp"
#ifdef DDP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ddp::bench {

DeviceBuffer::DeviceBuffer(size_t bytes) {
  if (bytes == 0) {
    return;
  }
#ifdef DDP_HAVE_CUDA
  const cudaError_t rc = cudaMalloc(&ptr_, bytes);
  if (rc != cudaSuccess) {
    throw Error("cudaMalloc of " + std::to_string(bytes) +
                " bytes failed: " + cudaGetErrorString(rc));
  }
  cudaMemset(ptr_, 0, bytes);
#else
  throw Error("device buffer of " + std::to_string(bytes) + " bytes: this build has no CUDA");
#endif
}

DeviceBuffer::~DeviceBuffer() {
#ifdef DDP_HAVE_CUDA
  if (ptr_ != nullptr) {
    cudaFree(ptr_);
  }
#endif
}

}  // namespace ddp::bench
