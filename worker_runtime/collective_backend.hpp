#pragma once
// One transport's collectives, run on the calling thread, blocking, in place. The Gloo process
// group has two (Gloo's own algorithms and the direct mesh for small payloads) and picks one
// per call in a single place (GlooProcessGroup's pick()); each backend owns its operations.
#include <cstddef>
#include <cstdint>
#include <string>

#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

// What every collective call carries besides its buffers.
struct CollectiveCall {
  Duration timeout{};
  uint32_t tag = 0;  // distinct per collective, identical on every rank (Gloo's slot)
  std::string what;  // "all_reduce(sum, float32 x 4)", for messages
};

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  // data[0..count) becomes the reduction over ranks; kAvg reduces like kSum (the caller
  // divides). count > 0.
  virtual void all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                          const CollectiveCall& call) = 0;
  // data[0..count) becomes root's. count > 0.
  virtual void broadcast(void* data, size_t count, DataType type, int root,
                         const CollectiveCall& call) = 0;
  // recv[r * count ..] becomes rank r's send[0..count). count > 0.
  virtual void all_gather(const void* send, void* recv, size_t count, DataType type,
                          const CollectiveCall& call) = 0;
  virtual void barrier(const CollectiveCall& call) = 0;
};

}  // namespace ddp::worker_runtime
