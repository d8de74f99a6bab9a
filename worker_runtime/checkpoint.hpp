#pragma once
// Checkpoints PyTorch users can open: tensors in the safetensors layout (uint64 LE header
// length, JSON header, raw little-endian data), training state beside them.
// Atomic: written to a temp file (<path>.tmp.<host>.<pid>, locked by its writer), fsync'd,
// renamed over the old one (which stays whole until then), directory fsync'd. Temp files of
// writers killed mid-write are removed by the next save or load of the same path
// (checkpoint_temp.hpp). The training state is embedded in the header's __metadata__
// (so weights and state can never disagree) and copied to <path>.json for people and tools.
// A CRC-32 of the data region is stored too: truncated, corrupt or mismatched files are
// refused with CheckpointError naming the file and what is wrong.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

// A float32 tensor to write (data is borrowed).
struct TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> data;
};

// A float32 tensor read back.
struct LoadedTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct TrainingState {
  int64_t epoch = 0;
  int64_t position_in_epoch = 0;  // samples of this epoch already consumed, per rank
  int64_t global_step = 0;
  int world_size = 1;
  uint64_t seed = 0;
  nlohmann::json optimizer = nlohmann::json::object();  // scalar optimizer state (lr, step, ...)
  nlohmann::json extra = nlohmann::json::object();      // anything else the trainer wants back
};

struct Checkpoint {
  std::map<std::string, LoadedTensor> tensors;
  TrainingState state;
};

// Writes tensors + state to path (and the state to <path>.json) atomically. CheckpointError
// (with errno text) on I/O failure, duplicate names, or a shape that does not match the data.
void save_checkpoint(const std::string& path, const std::vector<TensorRef>& tensors,
                     const TrainingState& state);
// Reads and verifies path (removing stale temp files of path first). CheckpointError when
// missing, truncated, corrupt or malformed.
Checkpoint load_checkpoint(const std::string& path);
// Copies each named tensor of ckpt into dst; CheckpointError naming the tensor when it is
// missing or its shape differs from expected.
void restore_tensor(const Checkpoint& ckpt, const std::string& name,
                    const std::vector<int64_t>& expected_shape, std::span<float> dst);

// Rank 0 writes, then every rank learns whether it worked (a broadcast of the status), so a
// failed write fails every rank instead of leaving them to load a stale file.
void save_checkpoint_on_rank0(ProcessGroup& group, const std::string& path,
                              const std::vector<TensorRef>& tensors, const TrainingState& state);

}  // namespace ddp::worker_runtime
