#include "worker_runtime/nccl_process_group.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include "common/error.hpp"
#include "common/log.hpp"
#include "worker_runtime/error_file.hpp"

namespace ddp::worker_runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kUniqueIdKey = "nccl/unique_id";
// How often the watchdog looks at in-flight collectives and the communicator's async error.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);

void check_cuda(cudaError_t err, const std::string& what) {
  if (err != cudaSuccess) {
    throw CollectiveError(what + " failed: " + cudaGetErrorString(err));
  }
}

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

bool is_host_pointer(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost;
}

}  // namespace

struct NcclProcessGroup::Impl {
  NcclOptions options;
  std::string endpoint;  // "rank R/W on cuda:D"
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;  // device staging for host buffers and the barrier
  size_t scratch_bytes = 0;

  // One collective, watched from the start of its call: its completion event is destroyed
  // with the last reference. While `issuing` the call is still queueing it (staging copies,
  // the NCCL call, the copy back), any of which can block the caller until the stream is
  // free, so the watchdog times it by its deadline alone; then by `done`.
  struct Pending {
    cudaEvent_t done = nullptr;
    Clock::time_point deadline;
    std::string what;
    std::atomic<bool> issuing{true};
    Pending() = default;
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
    ~Pending() {
      if (done != nullptr) {
        cudaEventDestroy(done);
      }
    }
  };
  std::mutex mu;
  std::list<std::shared_ptr<Pending>> pending;
  std::atomic<bool> broken{false};
  std::string broken_reason;
  std::mutex comm_mu;  // held around every use of comm after init, and around its abort
  std::atomic<bool> stopping{false};
  std::thread watchdog;

  // Non-blocking communicators return ncclInProgress: poll until settled or the deadline.
  // During init (fatal_on_timeout false) a timeout only throws: nothing is in flight yet.
  void settle(ncclResult_t rc, const std::string& what, Clock::time_point deadline,
              bool fatal_on_timeout = true) {
    while (rc == ncclInProgress) {
      if (Clock::now() > deadline) {
        if (fatal_on_timeout) {
          fatal(what + " did not settle before its deadline");
        }
        throw CollectiveError("nccl " + what + " on " + endpoint + " timed out");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      on_comm(what, [&] { return ncclCommGetAsyncError(comm, &rc); });
    }
    if (rc != ncclSuccess) {
      std::string last;
      {
        std::lock_guard lock(comm_mu);
        last = broken.load() ? "aborted" : ncclGetLastError(comm);
      }
      throw CollectiveError("nccl " + what + " on " + endpoint +
                            " failed: " + ncclGetErrorString(rc) + " (" + last + ")");
    }
  }

  // Runs one NCCL call on comm unless the group was aborted (CollectiveError then).
  // abort_comm() takes the same lock, so ncclCommAbort never frees comm under a call made
  // from the training thread; the calls are non-blocking (they return ncclInProgress), so
  // neither side waits long for the other.
  template <class Call>
  ncclResult_t on_comm(const std::string& what, Call&& call) {
    std::lock_guard lock(comm_mu);
    if (broken.load()) {
      throw CollectiveError("nccl " + what + " on " + endpoint + " aborted: " + reason());
    }
    return call();
  }

  std::string reason() {
    std::lock_guard lock(mu);
    return broken_reason;
  }

  void refuse_if_broken(const std::string& what) {
    if (broken.load()) {
      std::lock_guard lock(mu);
      throw CollectiveError("nccl " + what + " on " + endpoint + " refused: " + broken_reason);
    }
  }

  void* stage(size_t bytes) {
    if (bytes > scratch_bytes) {
      if (scratch != nullptr) {
        cudaFree(scratch);
      }
      check_cuda(cudaMalloc(&scratch, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes");
      scratch_bytes = bytes;
    }
    return scratch;
  }

  // Runs collective(buf) on a device buffer holding data's bytes: data itself when it is on
  // the device, else a staging copy on the stream, copied back once the collective is queued
  // (the stream orders the copies around it). Watched from the start (issue): a copy to
  // pageable memory blocks this thread until the stream is free, and a collective that never
  // finishes must be reported then too (on the H200 it was not: docs/gpu.md).
  template <typename Collective>
  std::shared_ptr<Pending> on_device(void* data, size_t bytes, const std::string& what,
                                     Duration timeout, Collective&& collective) {
    return issue(what, timeout, [&] {
      const bool host = is_host_pointer(data);
      void* buf = host ? stage(bytes) : data;
      if (host) {
        check_cuda(cudaMemcpyAsync(buf, data, bytes, cudaMemcpyHostToDevice, stream),
                   "staging copy");
      }
      collective(buf);
      if (host) {
        check_cuda(cudaMemcpyAsync(data, buf, bytes, cudaMemcpyDeviceToHost, stream),
                   "staging copy");
      }
    });
  }

  // Queues a collective (queue()) watched by its deadline from now, then marks its end on the
  // stream. When queueing throws, it is no longer issuing and its event was never recorded
  // (it reads as complete): the watchdog drops it instead of reporting a call that already
  // failed.
  template <typename Queue>
  std::shared_ptr<Pending> issue(const std::string& what, Duration timeout, Queue&& queue) {
    auto p = std::make_shared<Pending>();
    check_cuda(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming), "cudaEventCreate");
    p->deadline = Clock::now() + timeout;
    p->what = what;
    {
      std::lock_guard lock(mu);
      pending.push_back(p);
    }
    try {
      queue();
      check_cuda(cudaEventRecord(p->done, stream), "cudaEventRecord");
    } catch (...) {
      p->issuing = false;
      throw;
    }
    p->issuing = false;
    return p;
  }

  // Marks the group broken, once: the first caller (watchdog, a waiter past its deadline, or
  // abort() from the recovery thread) wins and is the one to abort the communicator, so
  // ncclCommAbort never runs twice. False when someone else already did. The reason is set
  // under mu with the flag, so whoever sees `broken` and then takes mu reads it.
  bool mark_broken(const std::string& reason) {
    std::lock_guard lock(mu);
    if (broken.load()) {
      return false;
    }
    broken_reason = reason;
    broken = true;
    return true;
  }

  void abort_comm() {
    std::lock_guard comm_lock(comm_mu);
    ncclCommAbort(comm);  // comm stays set: everyone checks `broken` (under comm_mu) first
  }

  // Report, then abort or exit: a collective stuck on the GPU cannot be cancelled any other
  // way. The report comes first because ncclCommAbort can itself wait on the stuck work (on
  // the H200 it waited for a host function holding the stream: docs/gpu.md); when the process
  // exits it skips the abort, as PyTorch's default TORCH_NCCL_ASYNC_ERROR_HANDLING=3 does:
  // the exit frees the communicator and the device.
  void fatal(const std::string& reason) {
    if (!mark_broken(reason)) {
      return;
    }
    const std::string message = "NCCL watchdog on " + endpoint + ": " + reason;
    if (options.on_fatal) {
      options.on_fatal(message);
    } else {
      record_error(message, "native worker (no Python stack): " + message);
    }
    if (options.exit_on_fatal) {
      DDP_LOG_ERROR(message);
      std::_Exit(kWatchdogExitCode);
    }
    abort_comm();
  }

  void watch() {
    cudaSetDevice(options.device);
    while (!stopping.load()) {
      std::this_thread::sleep_for(kWatchdogPeriod);
      if (broken.load()) {
        continue;
      }
      ncclResult_t async_err = ncclSuccess;
      ncclResult_t queried = ncclSuccess;
      {
        std::lock_guard lock(comm_mu);
        if (broken.load()) continue;
        queried = ncclCommGetAsyncError(comm, &async_err);
      }
      if (queried == ncclSuccess && async_err != ncclSuccess && async_err != ncclInProgress) {
        fatal(std::string("asynchronous NCCL error: ") + ncclGetErrorString(async_err));
        continue;
      }
      std::string expired;
      {
        std::lock_guard lock(mu);
        for (auto it = pending.begin(); it != pending.end();) {
          if (!(*it)->issuing.load() && cudaEventQuery((*it)->done) == cudaSuccess) {
            it = pending.erase(it);
          } else if (Clock::now() > (*it)->deadline) {
            expired = (*it)->what;
            break;
          } else {
            ++it;
          }
        }
      }
      if (!expired.empty()) {
        fatal(expired + " passed its timeout of " + std::to_string(options.timeout.count()) +
              " ms (a rank is missing or hung)");
      }
    }
  }
};

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(NcclProcessGroup::Impl* impl, std::shared_ptr<NcclProcessGroup::Impl::Pending> pending)
      : impl_(impl), pending_(std::move(pending)) {}

  void wait() override {
    for (;;) {
      // First: after an abort the stream runs on, so `done` completes on a collective whose
      // result is garbage (the watchdog's abort, or a membership change).
      if (impl_->broken.load()) {
        throw CollectiveError("nccl " + pending_->what + " on " + impl_->endpoint +
                              " aborted: " + impl_->reason());
      }
      const cudaError_t rc = cudaEventQuery(pending_->done);
      if (rc == cudaSuccess) {
        return;
      }
      if (rc != cudaErrorNotReady) {
        throw CollectiveError("nccl " + pending_->what + " on " + impl_->endpoint +
                              " failed: " + cudaGetErrorString(rc));
      }
      if (Clock::now() > pending_->deadline) {
        impl_->fatal(pending_->what + " passed its deadline while waited for");
        throw CollectiveError("nccl " + pending_->what + " on " + impl_->endpoint + " timed out");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  bool is_completed() override { return cudaEventQuery(pending_->done) != cudaErrorNotReady; }

 private:
  NcclProcessGroup::Impl* impl_;
  std::shared_ptr<NcclProcessGroup::Impl::Pending> pending_;
};

}  // namespace

NcclProcessGroup::NcclProcessGroup(const std::shared_ptr<rendezvous::Store>& store,
                                   const NcclOptions& options)
    : ProcessGroup(options.rank, options.size, options.timeout), impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->endpoint = "rank " + std::to_string(options.rank) + "/" + std::to_string(options.size) +
                    " on cuda:" + std::to_string(options.device);
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount on " + impl_->endpoint);
  if (options.device < 0 || options.device >= devices) {
    throw ConfigError("NCCL device " + std::to_string(options.device) + " (LOCAL_RANK) is not " +
                      "one of the " + std::to_string(devices) + " visible CUDA devices");
  }
  check_cuda(cudaSetDevice(options.device), "cudaSetDevice on " + impl_->endpoint);
  // Blocking stream: the legacy default stream orders itself against it.
  check_cuda(cudaStreamCreate(&impl_->stream), "cudaStreamCreate on " + impl_->endpoint);

  ncclUniqueId id{};
  if (options.rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) {
      throw CollectiveError(std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(rc));
    }
    store->set(kUniqueIdKey, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    store->wait({kUniqueIdKey}, options.connect_timeout);
    const std::string bytes = store->get(kUniqueIdKey);
    if (bytes.size() != sizeof(id)) {
      throw CollectiveError("nccl unique id under '" + std::string(kUniqueIdKey) + "' in " +
                            store->describe() + " has " + std::to_string(bytes.size()) +
                            " bytes, expected " + std::to_string(sizeof(id)));
    }
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // lets init and every call be bounded by our deadlines
  const auto deadline = Clock::now() + options.connect_timeout;
  ncclResult_t rc = ncclCommInitRankConfig(&impl_->comm, options.size, id, options.rank, &config);
  try {
    impl_->settle(rc, "ncclCommInitRank", deadline, /*fatal_on_timeout=*/false);
  } catch (const CollectiveError&) {
    if (impl_->comm != nullptr && !impl_->broken.load()) {
      ncclCommAbort(impl_->comm);
    }
    cudaStreamDestroy(impl_->stream);
    throw;
  }
  impl_->watchdog = std::thread([impl = impl_.get()] { impl->watch(); });
}

void NcclProcessGroup::abort(const std::string& why) {
  if (impl_->mark_broken("aborted: " + why)) {
    impl_->abort_comm();
  }
}

NcclProcessGroup::~NcclProcessGroup() {
  impl_->stopping = true;
  if (impl_->watchdog.joinable()) {
    impl_->watchdog.join();
  }
  if (!impl_->broken.load() && impl_->comm != nullptr) {
    cudaStreamSynchronize(impl_->stream);
    ncclCommDestroy(impl_->comm);
  }
  impl_->pending.clear();
  if (impl_->scratch != nullptr) {
    cudaFree(impl_->scratch);
  }
  cudaStreamDestroy(impl_->stream);
}

std::unique_ptr<Work> NcclProcessGroup::do_all_reduce(void* data, size_t count, DataType type,
                                                      ReduceOp op, Duration timeout) {
  const std::string what = std::string("all_reduce(") + to_string(op) + ", " + to_string(type) +
                           " x " + std::to_string(count) + ")";
  impl_->refuse_if_broken(what);
  const auto deadline = Clock::now() + timeout;
  auto pending = impl_->on_device(data, count * element_size(type), what, timeout, [&](void* buf) {
    impl_->settle(impl_->on_comm(what,
                                 [&] {
                                   return ncclAllReduce(buf, buf, count, nccl_type(type),
                                                        nccl_op(op), impl_->comm, impl_->stream);
                                 }),
                  what, deadline);
  });
  return std::make_unique<NcclWork>(impl_.get(), std::move(pending));
}

std::unique_ptr<Work> NcclProcessGroup::do_all_reduce_coalesced(
    std::vector<std::span<float>> buffers, ReduceOp op, Duration timeout) {
  const std::string what = std::string("all_reduce_coalesced(") + to_string(op) + ", " +
                           std::to_string(buffers.size()) + " buffers)";
  impl_->refuse_if_broken(what);
  const auto deadline = Clock::now() + timeout;
  auto pending = impl_->issue(what, timeout, [&] {
    const ncclResult_t rc = impl_->on_comm(what, [&] {
      const ncclResult_t start = ncclGroupStart();
      if (start != ncclSuccess) return start;
      // Every call is checked; the group is ended whatever happened (NCCL requires it), and the
      // first failure is the one reported.
      ncclResult_t first = ncclSuccess;
      for (auto& b : buffers) {
        const ncclResult_t call = ncclAllReduce(b.data(), b.data(), b.size(), ncclFloat32,
                                                nccl_op(op), impl_->comm, impl_->stream);
        if (call != ncclSuccess) {
          first = call;
          break;
        }
      }
      const ncclResult_t end = ncclGroupEnd();
      return first != ncclSuccess ? first : end;
    });
    impl_->settle(rc, what, deadline);
  });
  return std::make_unique<NcclWork>(impl_.get(), std::move(pending));
}

void NcclProcessGroup::do_broadcast(void* data, size_t count, DataType type, int root,
                                    Duration timeout) {
  const std::string what = std::string("broadcast(") + to_string(type) + " x " +
                           std::to_string(count) + ", root " + std::to_string(root) + ")";
  impl_->refuse_if_broken(what);
  const auto deadline = Clock::now() + timeout;
  auto pending = impl_->on_device(data, count * element_size(type), what, timeout, [&](void* buf) {
    impl_->settle(impl_->on_comm(what,
                                 [&] {
                                   return ncclBroadcast(buf, buf, count, nccl_type(type), root,
                                                        impl_->comm, impl_->stream);
                                 }),
                  what, deadline);
  });
  NcclWork(impl_.get(), std::move(pending)).wait();
}

void NcclProcessGroup::do_all_gather(const void* send, void* recv, size_t count, DataType type,
                                     Duration timeout) {
  const std::string what =
      std::string("all_gather(") + to_string(type) + " x " + std::to_string(count) + ")";
  impl_->refuse_if_broken(what);
  const auto deadline = Clock::now() + timeout;
  const size_t bytes = count * element_size(type);
  const size_t recv_bytes = bytes * static_cast<size_t>(size());
  const bool host = is_host_pointer(send) || is_host_pointer(recv);
  char* dev = host ? static_cast<char*>(impl_->stage(bytes + recv_bytes)) : nullptr;
  const void* send_buf = host ? dev : send;
  void* recv_buf = host ? dev + bytes : recv;
  auto pending = impl_->issue(what, timeout, [&] {  // watched from here: see on_device
    if (host) {
      check_cuda(cudaMemcpyAsync(dev, send, bytes, cudaMemcpyHostToDevice, impl_->stream),
                 "staging copy");
    }
    impl_->settle(impl_->on_comm(what,
                                 [&] {
                                   return ncclAllGather(send_buf, recv_buf, count, nccl_type(type),
                                                        impl_->comm, impl_->stream);
                                 }),
                  what, deadline);
    if (host) {
      check_cuda(cudaMemcpyAsync(recv, recv_buf, recv_bytes, cudaMemcpyDeviceToHost, impl_->stream),
                 "staging copy");
    }
  });
  NcclWork(impl_.get(), std::move(pending)).wait();
}

void NcclProcessGroup::do_barrier(Duration timeout) {
  // NCCL has no barrier: a one-element all-reduce that every rank must join.
  int64_t token = 0;
  do_all_reduce(&token, 1, DataType::kInt64, ReduceOp::kSum, timeout)->wait();
}

}  // namespace ddp::worker_runtime
