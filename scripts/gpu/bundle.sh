#!/usr/bin/env bash
# Builds the GPU run's programs here, with CUDA for the H100/H200 (sm_90), and packs them with
# the shared libraries the GPU image lacks into gpu-bundle/ (ignored; docs/gpu.md). The device
# run then needs nothing built there: `run` with carry=["gpu-bundle"], scripts/gpu/run.sh.
#   scripts/gpu/bundle.sh              # build into build-gpu/, pack into gpu-bundle/
#   scripts/gpu/bundle.sh --pack-only  # pack what build-gpu/ holds, no build
#   scripts/gpu/bundle.sh --print-targets  # the targets it builds and packs
#   env: GPU_BUILD_DIR (build-gpu), GPU_BUNDLE_DIR (gpu-bundle), JOBS (nproc)
# Binaries carry DT_RPATH=$ORIGIN/../lib (not RUNPATH: RPATH also serves the libraries' own
# needs, e.g. libopenblas -> libgfortran), so nothing is set in the environment that PyTorch
# workers under ddplaunch would inherit. libstdc++ and libgcc_s go to lib/compat/, which
# run.sh adds only when the image's own are older than these binaries need.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${GPU_BUILD_DIR:-build-gpu}
BUNDLE=${GPU_BUNDLE_DIR:-gpu-bundle}
JOBS=${JOBS:-$(nproc)}
# What the run uses: the programs, the [gpu] test binaries, the benchmarks it reruns there.
PROGRAMS=(ddplaunch train ddpstore)
TESTS=(test_rt_nccl test_trainer_units rt_test_worker)
BENCHES=(store_bench init_bench rdzv_bench launch_bench launch_bench_worker allreduce_bench)
TARGETS=("${PROGRAMS[@]}" "${TESTS[@]}" "${BENCHES[@]}")
[[ "${1:-}" == --print-targets ]] && { echo "${TARGETS[*]}"; exit 0; }

if [[ "${1:-}" != --pack-only ]]; then
  [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "bundle.sh: no /usr/local/cuda/bin/nvcc here" >&2; exit 1; }
  start=$SECONDS
  mkdir -p "$BUILD_DIR"
  # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_WERROR=ON \
    -DDDP_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_RPATH='$ORIGIN/../lib' -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags \
    -DDDP_SELECTED_TARGETS="$(IFS=';'; echo "${TARGETS[*]}")" >"$BUILD_DIR/configure.log" \
    || { cat "$BUILD_DIR/configure.log" >&2; exit 1; }
  grep -q "building GPU targets" "$BUILD_DIR/configure.log" \
    || { echo "bundle.sh: CMake did not enable CUDA/NCCL:" >&2; cat "$BUILD_DIR/configure.log" >&2; exit 1; }
  nice cmake --build "$BUILD_DIR" -j "$JOBS" --target selected
  echo "bundle.sh: built ${#TARGETS[@]} targets in $((SECONDS - start)) s"
fi
exec scripts/gpu/pack.sh "$BUILD_DIR" "$BUNDLE" "${TARGETS[@]}"
