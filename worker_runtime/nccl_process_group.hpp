#pragma once
// ProcessGroup over NCCL (compiled only when the build has CUDA: DDP_HAVE_CUDA).
// Rank 0 makes the ncclUniqueId and publishes it through the store; every rank runs
// ncclCommInitRank on device `device`. Collectives run on the group's own stream, created
// blocking so work on the legacy default stream is ordered before and after them.
// A watchdog thread turns an async NCCL error or a collective past its deadline into
// ncclCommAbort, an error file (TORCHELASTIC_ERROR_FILE) and a non-zero exit: a hung
// collective cannot be cancelled from inside the process, so exiting is the only way out.
#include <functional>
#include <memory>
#include <string>

#include "rendezvous/store/store.hpp"
#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

// Exit status of a process the NCCL watchdog ended.
inline constexpr int kWatchdogExitCode = 134;

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // CUDA device (LOCAL_RANK)
  Duration timeout = kDefaultCollectiveTimeout;
  Duration connect_timeout = std::chrono::seconds(300);
  // Called by the watchdog with the reason before it exits or aborts the communicator;
  // default records the error file. Tests replace it.
  std::function<void(const std::string&)> on_fatal;
  // When false the watchdog calls on_fatal, then aborts the communicator, and does not exit.
  bool exit_on_fatal = true;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Throws CollectiveError (names rank, device, NCCL error text) when init fails.
  NcclProcessGroup(const std::shared_ptr<rendezvous::Store>& store, const NcclOptions& options);
  ~NcclProcessGroup() override;

  [[nodiscard]] std::string backend() const override { return "nccl"; }
  // ncclCommAbort once (shared with the watchdog, which then stays quiet); does not exit.
  void abort(const std::string& why) override;

  struct Impl;  // communicator, stream, watchdog (public only so the .cpp's Work can name it)

 protected:
  std::unique_ptr<Work> do_all_reduce(void* data, size_t count, DataType type, ReduceOp op,
                                      Duration timeout) override;
  std::unique_ptr<Work> do_all_reduce_coalesced(std::vector<std::span<float>> buffers, ReduceOp op,
                                                Duration timeout) override;
  void do_broadcast(void* data, size_t count, DataType type, int root, Duration timeout) override;
  void do_all_gather(const void* send, void* recv, size_t count, DataType type,
                     Duration timeout) override;
  void do_barrier(Duration timeout) override;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::worker_runtime
