#pragma once
// A CUDA device allocation for the NCCL runs of the benchmark (size 0: no allocation).
// In builds without CUDA a non-zero size throws.
#include <cstddef>

namespace ddp::bench {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  [[nodiscard]] void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

}  // namespace ddp::bench
