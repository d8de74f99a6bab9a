#!/usr/bin/env bash
# The test suite under sanitizers (docs/fuzzing.md), each in its own build directory:
#   asan  build-asan: AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover,
#         leaks detected) over the `unit` and `process` CTest tiers;
#   tsan  build-tsan: ThreadSanitizer over the unit-tier cases of the store server, the
#         agent (test_launcher_units) and the runtime's collectives.
# SANITIZE_SCOPE=ci (what scripts/test.sh runs, to fit CI's time on 2 cores) narrows ASan to
# the common, store and store-server tests (unit and process tiers: the code that parses bytes
# from the network); TSan is the same in both scopes. full (the default) is everything above.
# Sanitizer builds are -Og -g1, the test sources too: -Og compiles a quarter to two fifths
# faster than -O1 here and runs the tiers about as fast (docs/build_times.md); line tables,
# inlined frames included, are all a report's stack needs.
# Suppressions (tests/sanitizers/*.supp) name third-party code only; our own findings are
# fixed, not suppressed.
#   scripts/sanitize.sh            # both, full
#   scripts/sanitize.sh tsan       # one
#   SANITIZE_CTEST_ARGS='-R test_store_' scripts/sanitize.sh asan   # a subset
#   SANITIZE_STEP=build scripts/sanitize.sh   # only build (scripts/test.sh: beside CTest)
#   SANITIZE_STEP=test scripts/sanitize.sh    # only run what is built
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
TEST_JOBS=${TEST_JOBS:-2}
SCOPE=${SANITIZE_SCOPE:-full}
STEP=${SANITIZE_STEP:-all}
case $STEP in all | build | test) ;; *) echo "sanitize: SANITIZE_STEP=$STEP (all, build, test)" >&2; exit 2 ;; esac
which=("$@")
[ ${#which[@]} -eq 0 ] && which=(asan tsan)
SUPP=$PWD/tests/sanitizers
. scripts/cmake_tree.sh

# GCC, the project's compiler (clang 14 lacks C++20's lambda captures of structured bindings,
# which the tests use); SANITIZE_CC/SANITIZE_CXX pick another.
# Only the targets named after the sanitizers are built (the test binaries a scope runs; their
# add_dependencies bring the programs they start): the top-level CMakeLists.txt groups them
# into one target, `selected`, built in one parallel build. None named: the whole tree. ccache
# is the compiler launcher when installed (cmake/Ccache.cmake).
configure() {  # dir sanitizers [targets...]
  local dir=$1 sanitizers=$2
  shift 2
  tree_generator "$dir"
  CC=${SANITIZE_CC:-gcc} CXX=${SANITIZE_CXX:-g++} cmake -S . -B "$dir" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-Og -g1" -DDDP_TEST_OPT= -DDDP_SANITIZE="$sanitizers" \
    -DDDP_BUILD_BENCH=OFF -DDDP_ENABLE_CUDA=OFF -DDDP_SELECTED_TARGETS="$(IFS=';'; echo "$*")" >/dev/null
}
# Builds what configure selected into $1 (everything when it selected nothing); the
# compiler's output goes to $1/build.log (GCC's -Og + sanitizer builds warn about library
# headers), shown on failure.
build() {
  local dir=$1 target=()
  grep -q '^DDP_SELECTED_TARGETS:STRING=.' "$dir/CMakeCache.txt" && target=(--target selected)
  if ! cmake --build "$dir" -j "$JOBS" "${target[@]}" >"$dir/build.log" 2>&1; then
    grep -E 'error|Error' "$dir/build.log" | head -30
    echo "sanitize: build failed (log: $dir/build.log)"
    exit 1
  fi
}
# A ctest -R regex for the cases of these binaries (either I/O backend's registration).
cases_of() { echo "^($(IFS='|'; echo "$*"))(\\[epoll\\])?:"; }

# Common to every run: reports go to stderr (ctest --output-on-failure shows them), and any
# report fails the process.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$SUPP/ubsan.supp"
export LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0"

status=0
for s in "${which[@]}"; do
  start=$(date +%s)
  # Per sanitizer: its tree, the targets it builds (none: all), the sanitizers, the CTest
  # cases it runs (labels, -R, -E) and the options its reports need.
  targets=()
  select=()
  case $s in
    asan)
      dir=build-asan
      sanitizers=address,undefined
      # The test binaries with ddplaunch, ddpstore, train and the test workers they start
      # (children are instrumented too, so a bug in a worker fails its test).
      if [ "$SCOPE" = ci ]; then
        targets=(test_common_fd test_common_deadline test_common_socket_io
                 test_common_host_address test_common_parse_int test_common_hostlist test_log
                 test_progress_protocol test_common_tcp_liveness test_store_contract
                 test_wire_codec test_store_presence test_store_session test_store_server
                 test_store_io test_store_robustness test_store_listen test_store_liveness
                 test_ddpstore test_store_dead_peer test_store_auth test_store_limits
                 test_store_abuse test_common_secret test_etcd_codec)
        select=(-R "$(cases_of "${targets[@]}")")
      fi
      labels='^(unit|process)$'
      # Not under ASan/UBSan: ddpstore run out of descriptors on purpose. UBSan's vptr check
      # probes memory through pipe(2), which then fails, and it reports a false "invalid vptr".
      exclude='ddpstore out of file descriptors says so once and recovers'
      # detect_leaks: a leak fails the test. abort_on_error: an abort, not exit(1), so a
      # child's report shows in its exit status.
      options=(ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1")
      ;;
    tsan)
      dir=build-tsan
      sanitizers=thread
      targets=(test_store_session test_store_server test_store_robustness test_store_listen
               test_store_liveness test_store_io test_store_auth test_store_limits
               test_rt_collectives test_launcher_units)
      select=(-R "$(cases_of "${targets[@]}")")
      labels='^unit$'
      # Not under TSan: two console tests whose Console gives up on a writer thread blocked
      # in write(2) (by design: the agent exits under it), after which the test closes that
      # fd; TSan rightly sees the close race the abandoned write. The agent never closes its
      # stdout/stderr while running, so the race exists in these tests only.
      exclude='close gives up on a reader that stopped|a stuck stdout.s notice goes to stderr'
      options=(TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$SUPP/tsan.supp")
      ;;
    *)
      echo "sanitize: unknown '$s' (asan, tsan)" >&2
      exit 2
      ;;
  esac
  if [ "$STEP" != test ]; then
    configure "$dir" "$sanitizers" "${targets[@]}"
    build "$dir"
    echo "sanitize: $s ($SCOPE): built in $(($(date +%s) - start)) s"
  fi
  [ "$STEP" = build ] && continue
  [ -f "$dir/CMakeCache.txt" ] || { echo "sanitize: $dir is not built (SANITIZE_STEP=build)" >&2; exit 2; }
  start=$(date +%s)
  # shellcheck disable=SC2086
  (cd "$dir" && env "${options[@]}" ctest -L "$labels" "${select[@]}" -E "$exclude" \
    ${SANITIZE_CTEST_ARGS:-} --output-on-failure -j "$TEST_JOBS" --timeout 600) \
    >"$dir/ctest.log" 2>&1 || status=1
  summary=$(grep -E 'tests passed|tests failed' "$dir/ctest.log" | tail -1)
  echo "sanitize: $s ($SCOPE): tests $(($(date +%s) - start)) s: ${summary:-no tests ran}"
  if grep -q 'The following tests FAILED' "$dir/ctest.log"; then
    sed -n '/The following tests FAILED/,$p' "$dir/ctest.log" | head -40
    echo "sanitize: $s: reports in $dir/ctest.log"
  fi
done
exit $status
