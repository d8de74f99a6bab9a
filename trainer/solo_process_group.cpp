#include "trainer/solo_process_group.hpp"

#include <cstring>

namespace ddp::trainer {
namespace {

class DoneWork final : public worker_runtime::Work {
 public:
  void wait() override {}
  [[nodiscard]] bool is_completed() override { return true; }
};

}  // namespace

// With one rank, sum/avg/min/max of a buffer is the buffer itself.
std::unique_ptr<worker_runtime::Work> SoloProcessGroup::do_all_reduce(
    void* /*data*/, size_t /*count*/, worker_runtime::DataType /*type*/,
    worker_runtime::ReduceOp /*op*/, worker_runtime::Duration /*timeout*/) {
  return std::make_unique<DoneWork>();
}

std::unique_ptr<worker_runtime::Work> SoloProcessGroup::do_all_reduce_coalesced(
    std::vector<std::span<float>> /*buffers*/, worker_runtime::ReduceOp /*op*/,
    worker_runtime::Duration /*timeout*/) {
  return std::make_unique<DoneWork>();
}

void SoloProcessGroup::do_broadcast(void* /*data*/, size_t /*count*/,
                                    worker_runtime::DataType /*type*/, int /*root*/,
                                    worker_runtime::Duration /*timeout*/) {}

void SoloProcessGroup::do_all_gather(const void* send, void* recv, size_t count,
                                     worker_runtime::DataType type,
                                     worker_runtime::Duration /*timeout*/) {
  std::memcpy(recv, send, count * worker_runtime::element_size(type));
}

void SoloProcessGroup::do_barrier(worker_runtime::Duration /*timeout*/) {}

}  // namespace ddp::trainer
