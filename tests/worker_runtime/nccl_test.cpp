// NCCL process group; [gpu] cases skip themselves where no GPU is visible.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "common/error.hpp"
#include "rendezvous/store/memory_store.hpp"
#include "test_support.hpp"
#include "worker_runtime/dist_context.hpp"
#include "worker_runtime/nccl_process_group.hpp"

using namespace ddp::worker_runtime;
using namespace std::chrono_literals;

namespace {

// A device buffer freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { REQUIRE(cudaMalloc(&ptr, bytes) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

void all_ranks_reduce(int world) {
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  ddp::worker_runtime::test::run_ranks(world, [&](int rank) {
    NcclOptions o;
    o.rank = rank;
    o.size = world;
    o.device = rank;
    o.timeout = 60s;
    o.connect_timeout = 60s;
    NcclProcessGroup pg(store, o);
    const size_t n = 1 << 20;
    std::vector<float> host(n, static_cast<float>(rank + 1));
    DeviceBuffer dev(n * sizeof(float));
    RT_LOCKED(REQUIRE(cudaMemcpy(dev.ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) ==
                      cudaSuccess));
    pg.all_reduce(dev.ptr, n, DataType::kFloat32, ReduceOp::kSum);
    RT_LOCKED(REQUIRE(cudaMemcpy(host.data(), dev.ptr, n * sizeof(float), cudaMemcpyDeviceToHost) ==
                      cudaSuccess));
    const float expect = static_cast<float>(world * (world + 1) / 2);
    RT_LOCKED(CHECK(host.front() == expect));
    RT_LOCKED(CHECK(host.back() == expect));
    // Host buffers are staged (the metric/consistency path).
    std::vector<int64_t> x = {rank + 1};
    pg.all_reduce(std::span<int64_t>(x), ReduceOp::kMax);
    RT_LOCKED(CHECK(x[0] == world));
    std::vector<int64_t> all(static_cast<size_t>(world));
    const int64_t mine = rank * 3;
    pg.all_gather(std::span<const int64_t>(&mine, 1), std::span<int64_t>(all));
    RT_LOCKED(CHECK(all.back() == (world - 1) * 3));
    std::vector<double> b = {rank == 0 ? 2.5 : 0.0};
    pg.broadcast(std::span<double>(b), 0);
    RT_LOCKED(CHECK(b[0] == 2.5));
    pg.barrier();
  });
}

}  // namespace

TEST_CASE("nccl collectives on one GPU", "[gpu][nccl]") {
  if (cuda_device_count() < 1) {
    WARN("skipped: no CUDA device");
    return;
  }
  all_ranks_reduce(1);
}

TEST_CASE("nccl collectives on every visible GPU", "[gpu][nccl]") {
  const int n = cuda_device_count();
  if (n < 2) {
    WARN("skipped: fewer than 2 CUDA devices");
    return;
  }
  all_ranks_reduce(n);
}

TEST_CASE("asking for nccl without a GPU is a clear error", "[nccl]") {
  if (cuda_device_count() > 0) {
    return;  // covered by the [gpu] cases
  }
  InitOptions o;
  o.backend = "nccl";
  o.env = {{"RANK", "0"}, {"WORLD_SIZE", "1"}};
  CHECK_THROWS_WITH(init(o), Catch::Matchers::Contains("no CUDA device is visible"));
}

TEST_CASE("nccl abort: later collectives refuse at once, the watchdog stays quiet",
          "[gpu][nccl][abort]") {
  if (cuda_device_count() < 1) {
    WARN("skipped: no CUDA device");
    return;
  }
  auto store = std::make_shared<ddp::rendezvous::MemoryStore>();
  NcclOptions o;
  o.timeout = 60s;
  o.connect_timeout = 60s;
  std::string fatal;
  o.on_fatal = [&](const std::string& why) { fatal = why; };
  o.exit_on_fatal = false;
  {
    NcclProcessGroup pg(store, o);
    std::vector<int64_t> x = {1};
    pg.all_reduce(std::span<int64_t>(x), ReduceOp::kSum);
    pg.abort("test: membership changed");
    pg.abort("again");  // idempotent: one ncclCommAbort
    const std::string error =
        test::error_of([&] { pg.all_reduce(std::span<int64_t>(x), ReduceOp::kSum); });
    CHECK_THAT(error, Catch::Matchers::Contains("test: membership changed"));
  }  // destroyed after the abort without hanging
  CHECK(fatal.empty());
}

// A group of one whose watchdog reports (instead of exiting) past a 1 s timeout, with the
// legacy default stream held for 4 s by a host function: the group's blocking stream is
// ordered after it, so no collective can finish before then.
struct HeldGroup {
  HeldGroup() : pg(std::make_shared<ddp::rendezvous::MemoryStore>(), options(fatal)) {
    reported = fatal.get_future();
    auto hold = [](void*) { std::this_thread::sleep_for(4s); };
    REQUIRE(cudaLaunchHostFunc(cudaStreamLegacy, hold, nullptr) == cudaSuccess);
  }
  static NcclOptions options(std::promise<std::string>& fatal) {
    NcclOptions o;
    o.timeout = 1s;
    o.connect_timeout = 60s;
    o.on_fatal = [&fatal](const std::string& why) { fatal.set_value(why); };
    o.exit_on_fatal = false;
    return o;
  }
  std::promise<std::string> fatal;
  std::future<std::string> reported;
  NcclProcessGroup pg;
};

// A collective held back on the GPU past the group's timeout: the watchdog thread (not a
// waiter: nobody waits on the Work) must abort the communicator and report it. A host function
// on the legacy default stream holds it back: the group's blocking stream is ordered after it.
TEST_CASE("nccl watchdog: a collective past its timeout aborts the group",
          "[gpu][nccl][watchdog]") {
  if (cuda_device_count() < 1) {
    WARN("skipped: no CUDA device");
    return;
  }
  DeviceBuffer dev(1024 * sizeof(float));
  REQUIRE(cudaMemset(dev.ptr, 0, 1024 * sizeof(float)) == cudaSuccess);
  HeldGroup held;
  auto& pg = held.pg;
  auto& reported = held.reported;
  const auto start = std::chrono::steady_clock::now();
  auto work = pg.all_reduce_async(dev.ptr, 1024, DataType::kFloat32, ReduceOp::kSum);
  const auto enqueued = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  const auto status = reported.wait_for(3s);
  INFO("all_reduce_async returned after " << enqueued.count() << " ms; the collective "
                                          << (work->is_completed() ? "had" : "had not")
                                          << " finished when the report was due");
  REQUIRE(status == std::future_status::ready);
  const auto after = std::chrono::steady_clock::now() - start;
  CHECK(after >= 1s);
  const std::string why = reported.get();
  CHECK_THAT(why, Catch::Matchers::Contains("NCCL watchdog on rank 0/1") &&
                      Catch::Matchers::Contains("passed its timeout of 1000 ms"));
  const std::string error = test::error_of([&] { pg.barrier(); });
  CHECK_THAT(error, Catch::Matchers::Contains("passed its timeout"));
}

// The same on host memory: the copy back to pageable memory blocks the caller until the
// collective is done, so the watchdog must watch the collective from before that copy (it
// did not: a collective that never finished hung the caller with no report), and the caller
// then gets an error, not the aborted collective's data.
TEST_CASE(
    "nccl watchdog: a host-memory collective past its timeout is reported while the caller "
    "waits in the copy back",
    "[gpu][nccl][watchdog]") {
  if (cuda_device_count() < 1) {
    WARN("skipped: no CUDA device");
    return;
  }
  HeldGroup held;
  auto& pg = held.pg;
  auto& reported = held.reported;
  std::vector<float> host(1024, 1.0f);
  std::atomic<bool> returned{false};
  std::string error;
  std::thread caller([&] {
    error = test::error_of([&] { pg.all_reduce(std::span<float>(host), ReduceOp::kSum); });
    returned = true;
  });
  const auto status = reported.wait_for(3s);
  const bool caller_blocked = !returned.load();
  caller.join();
  REQUIRE(status == std::future_status::ready);
  CHECK(caller_blocked);  // reported while the caller still waited in the copy back
  CHECK_THAT(reported.get(), Catch::Matchers::Contains("passed its timeout of 1000 ms"));
  CHECK_THAT(error, Catch::Matchers::Contains("aborted"));
}
