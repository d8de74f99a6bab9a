#pragma once
// A process group of one, for `train` started without a launcher (no RANK in the
// environment): every collective is the identity, and no store or socket is needed.
#include "worker_runtime/process_group.hpp"

namespace ddp::trainer {

class SoloProcessGroup final : public worker_runtime::ProcessGroup {
 public:
  SoloProcessGroup() : ProcessGroup(0, 1) {}
  [[nodiscard]] std::string backend() const override { return "solo"; }
  // Nothing to wake: a group of one never waits for a peer.
  void abort(const std::string& /*why*/) override {}

 protected:
  std::unique_ptr<worker_runtime::Work> do_all_reduce(void* data, size_t count,
                                                      worker_runtime::DataType type,
                                                      worker_runtime::ReduceOp op,
                                                      worker_runtime::Duration timeout) override;
  std::unique_ptr<worker_runtime::Work> do_all_reduce_coalesced(
      std::vector<std::span<float>> buffers, worker_runtime::ReduceOp op,
      worker_runtime::Duration timeout) override;
  void do_broadcast(void* data, size_t count, worker_runtime::DataType type, int root,
                    worker_runtime::Duration timeout) override;
  void do_all_gather(const void* send, void* recv, size_t count, worker_runtime::DataType type,
                     worker_runtime::Duration timeout) override;
  void do_barrier(worker_runtime::Duration timeout) override;
};

}  // namespace ddp::trainer
