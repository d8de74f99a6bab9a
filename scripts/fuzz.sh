#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang, -fsanitize=fuzzer,address,undefined) into
# build-fuzz/ and runs each for FUZZ_SECONDS (default 20), FUZZ_JOBS (default 2) at a time,
# from its seed corpus (tests/fuzz/corpus/<target>) and its regressions
# (tests/fuzz/regressions/<target>); then replays every regression input once. Fails on any
# crash, sanitizer report, leak, timeout or out-of-memory. docs/fuzzing.md.
#   FUZZ_SECONDS=600 scripts/fuzz.sh store_session_fuzz   # one target, longer
#   FUZZ_SEED=1 scripts/fuzz.sh      # a fixed libFuzzer seed (scripts/test.sh uses 1)
#   FUZZ_STEP=build scripts/fuzz.sh  # only build (scripts/test.sh: beside CTest); FUZZ_STEP=run
#                                    # only runs what is built
# New inputs found during a run go to build-fuzz/corpus/<target> (not to the source tree);
# a crashing input is saved as build-fuzz/artifacts/<target>/crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-20}
JOBS=${FUZZ_JOBS:-2}
ALL_TARGETS=(store_session_fuzz wire_codec_fuzz checkpoint_fuzz error_file_fuzz
             env_contract_fuzz rdzv_conf_fuzz hostlist_fuzz)
STEP=${FUZZ_STEP:-all}
case $STEP in all | build | run) ;; *) echo "fuzz: FUZZ_STEP=$STEP (all, build, run)" >&2; exit 2 ;; esac
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${ALL_TARGETS[@]}")

# Only the fuzz targets (and their libraries), in one parallel build: the top-level
# CMakeLists.txt groups DDP_SELECTED_TARGETS into the target `selected`. ccache is the
# compiler launcher when installed (cmake/Ccache.cmake). -O2 with line tables only
# (-gline-tables-only, as OSS-Fuzz builds): a report's stack keeps its file:line.
start=$(date +%s)
if [ "$STEP" != run ]; then
  . scripts/cmake_tree.sh
  tree_generator "$BUILD_DIR"
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DDDP_FUZZ=ON -DDDP_BUILD_TESTS=OFF -DDDP_BUILD_BENCH=OFF -DDDP_ENABLE_CUDA=OFF \
    -DDDP_SELECTED_TARGETS="$(IFS=';'; echo "${targets[*]}")" >/dev/null
  if ! cmake --build "$BUILD_DIR" --target selected -j "${JOBS}" >"$BUILD_DIR/build.log" 2>&1; then
    grep -E 'error|Error' "$BUILD_DIR/build.log" | head -30
    echo "fuzz: build failed (log: $BUILD_DIR/build.log)"
    exit 1
  fi
  echo "fuzz: built ${#targets[@]} targets in $(($(date +%s) - start)) s"
fi
[ "$STEP" = build ] && exit 0

# detect_leaks: a leak is a bug like a crash. -rss_limit_mb: the default (2 GiB) is fine, but
# two at a time on a small machine should not swap. -timeout: one input > 10 s is a hang.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
run_one() {
  local t=$1 dir="$BUILD_DIR/corpus/$1" art="$BUILD_DIR/artifacts/$1/" log="$BUILD_DIR/logs/$1.log"
  mkdir -p "$dir" "$art" "$(dirname "$log")"
  local seeds=(tests/fuzz/corpus/"$t")
  [ -d tests/fuzz/regressions/"$t" ] && seeds+=(tests/fuzz/regressions/"$t")
  local dict=()
  case $t in checkpoint_fuzz | error_file_fuzz) dict=(-dict=tests/fuzz/dict/json.dict) ;; esac
  local seed=()
  [ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$FUZZ_SEED")
  if "$BUILD_DIR/fuzz/$t" "$dir" "${seeds[@]}" "${seed[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 \
      -rss_limit_mb=1536 -max_len=65536 -print_final_stats=1 -artifact_prefix="$art" "${dict[@]}" \
      >"$log" 2>&1; then
    local execs
    execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
    printf 'fuzz: %-20s ok  %10s execs in %s s, corpus %s\n' "$t" "$execs" "$SECONDS_EACH" \
      "$(ls "$dir" | wc -l)"
  else
    echo "fuzz: $t FAILED (log: $log, input: $(ls "$art" | head -1)):"
    grep -E 'ERROR|runtime error|SUMMARY|==ERROR|deadly|terminate|what\(\)' "$log" | head -20 |
      sed 's/^/  /'
    return 1
  fi
}
export -f run_one
export BUILD_DIR SECONDS_EACH
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}' || status=1

# Every regression input once (a fixed crash must stay fixed, even if the run above did not
# happen to reach it).
for t in "${targets[@]}"; do
  [ -d tests/fuzz/regressions/"$t" ] || continue
  mapfile -t inputs < <(find tests/fuzz/regressions/"$t" -type f)
  [ ${#inputs[@]} -eq 0 ] && continue
  if "$BUILD_DIR/fuzz/$t" -runs=1 "${inputs[@]}" >"$BUILD_DIR/logs/$t.replay.log" 2>&1; then
    echo "fuzz: $t: ${#inputs[@]} regression inputs replayed"
  else
    echo "fuzz: $t: a regression input fails again (log: $BUILD_DIR/logs/$t.replay.log)"
    status=1
  fi
done
echo "fuzz: $([ $status -eq 0 ] && echo clean || echo FAILED) in $(($(date +%s) - start)) s"
exit $status
