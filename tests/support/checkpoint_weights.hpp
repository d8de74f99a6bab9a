#pragma once
// Every tensor of a checkpoint or weights file, concatenated in name order: what tests
// compare between two runs. Header-only: only tests that link ddplaunch's worker runtime
// (for load_checkpoint) include it, so the support library itself does not need it.
#include <string>
#include <vector>

#include "worker_runtime/checkpoint.hpp"

namespace ddp::test {

inline std::vector<float> checkpoint_weights(const std::string& path) {
  const auto ckpt = ddp::worker_runtime::load_checkpoint(path);
  std::vector<float> all;
  for (const auto& [name, tensor] : ckpt.tensors) {
    all.insert(all.end(), tensor.data.begin(), tensor.data.end());
  }
  return all;
}

}  // namespace ddp::test
