// allreduce_bench: run one per rank with the torchrun env (see scripts/bench/allreduce.sh).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "allreduce_bench.hpp"
#include "worker_runtime/error_file.hpp"

int main(int argc, char** argv) {
  return ddp::worker_runtime::run_main(argc, argv, [](int n, char** args) {
    CLI::App app{"Gloo all-reduce benchmark (one process per rank)"};
    std::string mode = "sizes";
    ddp::bench::SizesOptions sizes;
    ddp::bench::OverlapOptions overlap;
    std::string backend = "gloo";
    app.add_option("--mode", mode, "sizes | overlap")->check(CLI::IsMember({"sizes", "overlap"}));
    app.add_option("--backend", backend, "gloo | nccl | auto (nccl: device buffers)");
    app.add_option("--bytes", sizes.sizes_bytes, "buffer sizes in bytes")->expected(1, 64);
    app.add_option("--budget-s", sizes.budget_s, "seconds per size");
    size_t direct_max_bytes = ddp::worker_runtime::InitOptions{}.gloo_direct_max_bytes;
    app.add_option("--direct-max-bytes", direct_max_bytes, "Gloo: direct-mesh threshold");
    app.add_option("--layers", overlap.layers, "overlap: synthetic layers");
    app.add_option("--grad-floats", overlap.grad_floats, "overlap: floats per gradient");
    app.add_option("--compute-ms", overlap.compute_ms, "overlap: backward compute per layer");
    app.add_option("--bucket-cap-mb", overlap.bucket_cap_mb, "overlap: bucket cap");
    app.add_flag("--off-cpu", overlap.off_cpu, "overlap: backward sleeps (models GPU kernels)");
    CLI11_PARSE(app, n, args);
    ddp::worker_runtime::InitOptions init;
    init.backend = backend;
    init.gloo_direct_max_bytes = direct_max_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    auto ctx = ddp::worker_runtime::init(init);
    if (ctx->rank() == 0) {  // store connect + communicator set-up (NCCL: ncclCommInitRank)
      std::printf(
          "init\t%s\t%.1f\n", ctx->backend().c_str(),
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (mode == "sizes") {
      ddp::bench::run_sizes(*ctx, sizes);
    } else {
      ddp::bench::run_overlap(*ctx, overlap);
    }
    return 0;
  });
}
