#!/usr/bin/env bash
# shellcheck disable=SC2317  # the step_* functions are called by name (run.sh --step NAME)
# The GPU run (issue 30, docs/gpu.md): what the development machines cannot check, in one
# command on the device machine, with the prebuilt bundle (scripts/gpu/bundle.sh) carried:
#   run(command="scripts/gpu/run.sh", carry=["gpu-bundle"], timeout_s=540)
# Steps, each with its own time limit, none stopping the others; the whole run stops starting
# steps once DEADLINE_S (420 s) is near. Results go to $OUT (at most 8 files come back):
#   summary.txt   one line per step: outcome, seconds, the numbers it measured
#   summary.json  the same, with every measured value, the loss curves and the environment diff
#   logs.txt      every step's output (the end of it, when long)
#   results.tar.gz  everything the steps wrote (metrics files, environment dumps, raw logs)
# Both files are rewritten after every step, so a run killed at its limit still reports.
#   scripts/gpu/run.sh --dry-run   the same steps on this machine, without a GPU, scaled down
#                                  (gloo instead of NCCL, a few steps, few clients); exits 1
#                                  unless every step passes. scripts/test.sh runs it.
#   env: GPU_BUNDLE (gpu-bundle), GPU_PYTHON (python3 on the device; a Python with torch here),
#        DEADLINE_S (420), STEPS (a space-separated subset of the step names)
# Internally `run.sh --step NAME` runs one step (the parent wraps it in `timeout`).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
. scripts/gpu/image_libs.sh
ALL_STEPS=(preflight gpu_tests nccl trainer launch store init rdzv)
# Seconds each step may take at most (on the device; the dry run's are far shorter).
declare -A LIMIT=([preflight]=45 [gpu_tests]=100 [nccl]=60 [trainer]=150 [launch]=140 [store]=75
  [init]=150 [rdzv]=150)

# ---------------------------------------------------------------- the steps (run.sh --step X)
# 1024 store clients need more descriptors than the usual soft limit of 1024 (PyTorch's
# server in particular: our programs raise their own). 96K ranks need more than the image's
# hard limit (20,000 in the last run): a root run with CAP_SYS_RESOURCE may raise that too,
# up to fs.nr_open; without it the attempt fails quietly and fd_fit sizes the runs down.
raise_fd_limit() {
  ulimit -Hn "$(cat /proc/sys/fs/nr_open 2>/dev/null || echo 1048576)" 2>/dev/null ||
    ulimit -Hn 200000 2>/dev/null || true
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 65536 2>/dev/null || true
}

step_preflight() {
  echo "== machine"
  uname -a
  nproc
  ldd --version | sed -n 1p
  (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: none") 2>&1
  echo "== python"
  "$PY" - <<'EOF'
import sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    v = torch.cuda.nccl.version()
    print("device", torch.cuda.get_device_name(0), "nccl", v if isinstance(v, int) else ".".join(map(str, v)))
import torch.distributed as dist
from datetime import timedelta
s = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=10))
print("TCPStore libuv backend:", getattr(s, "libuvBackend", "unknown (attribute missing)"))
EOF
  echo "== bundle"
  cat "$B/MANIFEST.txt"
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  echo "compat: $COMPAT_NOTE"
  local missing=0
  for f in "$B"/bin/*; do
    if ldd "$f" | grep "not found" >/dev/null; then
      echo "UNRESOLVED in ${f##*/}:"
      ldd "$f" | grep "not found"
      missing=1
    fi
  done
  for lib in "${IMAGE_FIND_LIBS[@]}"; do
    echo "image $lib: $(ldd "$B/bin/train" | awk -v l="$lib" '$1 == l {print $3}')"
  done
  "$B/bin/ddplaunch" --version
  "$B/bin/train" --help >/dev/null
  local have need
  have=$(ldd --version | sed -n '1s/.* //p')
  need=$(awk '$1 == "needs" && $2 == "GLIBC" {print $3}' "$B/MANIFEST.txt")
  echo "result glibc_image=$have glibc_needed=$need unresolved_libraries=$missing"
  return "$missing"
}

step_gpu_tests() {
  local rc=0
  if [[ -x "$B/bin/test_rt_nccl" ]]; then
    "$B/bin/test_rt_nccl" --durations yes || rc=1
    echo "result test_rt_nccl_rc=$rc"
  else
    echo "test_rt_nccl: not in the bundle (a build without CUDA)"
    [[ $DRY == 1 ]] || rc=1
  fi
  local units=0
  "$B/bin/test_trainer_units" "[gpu]" --durations yes || units=1
  echo "result test_trainer_units_gpu_rc=$units"
  [[ $units == 0 ]] || rc=1
  return "$rc"
}

step_nccl() {
  local backend=nccl rc=0 log
  [[ $DRY == 1 ]] && backend=gloo
  export DDPLAUNCH_BACKEND=$backend
  for scenario in collectives metrics; do
    log=$WORK/nccl_$scenario.log
    "$B/bin/ddplaunch" --standalone --nproc_per_node=1 "$B/bin/rt_test_worker" "$scenario" 2>&1 | tee "$log" || rc=1
    grep -q "RESULT" "$log" || rc=1
  done
  grep -q "RESULT backend $backend" "$WORK/nccl_collectives.log" || { echo "expected backend $backend"; rc=1; }
  echo "result world1_backend=$backend world1_rc=$rc"
  if [[ $DRY == 0 ]]; then
    # Two ranks on one GPU: our runtime refuses before NCCL (one GPU per local rank); PyTorch
    # asks NCCL, which has refused duplicate GPUs since 2.5 ("Duplicate GPU detected").
    log=$WORK/nccl_two_ranks_ours.log
    local two=0
    timeout -k 5 30 "$B/bin/ddplaunch" --standalone --nproc_per_node=2 "$B/bin/rt_test_worker" \
      collectives >"$log" 2>&1 || two=$?
    echo "result two_ranks_one_gpu_ours=$(outcome_word "$two" ran)"
    grep -m2 -E "GPU per local rank|Error|error" "$log" || true
    log=$WORK/nccl_two_ranks_torch.log
    two=0
    PYTHON_EXEC=$PY timeout -k 5 30 "$B/bin/ddplaunch" --standalone --nproc_per_node=2 \
      "$REPO/scripts/gpu/torch_nccl_probe.py" --out_dir "$WORK/two_ranks" --tag two --backend nccl \
      --same_device >"$log" 2>&1 || two=$?
    echo "result two_ranks_one_gpu_nccl=$(outcome_word "$two" allowed)"
    grep -m3 -E "Duplicate GPU|invalid usage|NCCL version" "$log" || true
    # ddplaunch_recovery's NCCL path (docs/recovery.md): a node lost under
    # --in_place_recovery, three agents with a GPU each; it says SKIPPED on fewer GPUs.
    log=$WORK/nccl_in_place.log
    local in_place=0
    TORCH_PYTHON=$PY timeout -k 5 120 "$REPO/examples/pytorch_in_place/nccl_node_loss.sh" \
      "$B/bin" >"$log" 2>&1 || in_place=$?
    if grep -q SKIPPED "$log"; then
      echo "result nccl_in_place_recovery=skipped_fewer_than_3_gpus"
    else
      echo "result nccl_in_place_recovery=$(outcome_word "$in_place" passed)"
    fi
    tail -5 "$log"
  fi
  return "$rc"
}

# outcome_word RC WORD: WORD when RC is 0, "hung" when timeout killed it, else "refused".
outcome_word() {
  if [[ $1 == 0 ]]; then echo "$2"; elif [[ $1 == 124 || $1 == 137 ]]; then echo hung; else echo refused; fi
}

# train_pair NAME HIDDEN BATCH STEPS EPOCHS LOG_EVERY: build/train and torch_mlp.py on the data.
train_pair() {
  local name=$1 hidden=$2 batch=$3 steps=$4 epochs=$5 every=$6 rc=0
  local common=(--data "$WORK/mlp.npy" --hidden "$hidden" --batch_size "$batch" --max_steps "$steps"
    --epochs "$epochs" --log_every "$every" --warmup_steps 100 --lr 0.001 --optimizer adamw)
  # Alone (no RANK): --backend nccl puts the model on the GPU or fails, never the CPU quietly.
  local backend=nccl
  [[ $DRY == 1 ]] && backend=auto
  "$B/bin/train" "${common[@]}" --backend "$backend" --metrics "$WORK/${name}_native.jsonl" 2>&1 \
    | tee "$WORK/${name}_native.log" || rc=1
  "$PY" "$REPO/scripts/gpu/torch_mlp.py" train "${common[@]}" --device "$DEVICE" \
    --metrics "$WORK/${name}_torch.jsonl" 2>&1 | tee "$WORK/${name}_torch.log" || rc=1
  "$PY" "$REPO/scripts/gpu/summarize.py" compare "$name" "$WORK/${name}_native.jsonl" \
    "$WORK/${name}_torch.jsonl" >"$WORK/${name}.result" || rc=1
  cat "$WORK/${name}.result"
  return "$rc"
}

step_trainer() {
  local rc=0
  if [[ $DRY == 1 ]]; then
    "$PY" "$REPO/scripts/gpu/torch_mlp.py" make-data --out "$WORK/mlp.npy" --rows 4000
    train_pair small 256,256 64 40 1 10 || rc=1
  else
    "$PY" "$REPO/scripts/gpu/torch_mlp.py" make-data --out "$WORK/mlp.npy" --rows 140000
    # The CPU benchmark's job (docs/benchmarks.md, Training throughput), then a GPU-sized one.
    train_pair small 256,256 64 3000 2 100 || rc=1
    train_pair large 1024,1024 1024 1000 10 100 || rc=1
    # The same small job through ddplaunch with an NCCL group of one: the gradient all-reduce
    # path and its cost (allreduce_wait_ms) on the GPU.
    "$B/bin/ddplaunch" --standalone --nproc_per_node=1 "$B/bin/train" --backend nccl \
      --data "$WORK/mlp.npy" --hidden 256,256 --batch_size 64 --max_steps 1000 --epochs 2 \
      --log_every 100 --warmup_steps 100 --metrics "$WORK/nccl1_native.jsonl" 2>&1 \
      | tee "$WORK/nccl1_native.log" || rc=1
    grep -q "backend nccl" "$WORK/nccl1_native.log" || { echo "expected an NCCL group"; rc=1; }
  fi
  echo "result trainer_rc=$rc"
  return "$rc"
}

step_launch() {
  local rc=0 reps=3 restarts=2 torchrun=("$PY" -m torch.distributed.run)
  [[ $DRY == 1 ]] && { reps=1; restarts=1; }
  # PyTorch 1.13 under Python 3.11 needs its output redirected (the dry run's Debian torch).
  [[ "$TORCH_VERSION" == 1.* ]] && torchrun+=(-r 1 -t 1)
  local probe=("$REPO/scripts/gpu/torch_nccl_probe.py" --out_dir "$WORK/launch")
  export PYTHON_EXEC=$PY  # ddplaunch's interpreter; set for both, so it is no difference
  mkdir -p "$WORK/launch"
  for i in $(seq 1 "$reps"); do  # alternating, so machine noise hits both
    timed "launch_ddplaunch_$i" "$B/bin/ddplaunch" --standalone --nproc_per_node=1 \
      "${probe[@]}" --tag "ddplaunch" || rc=1
    timed "launch_torchrun_$i" "${torchrun[@]}" --standalone --nproc_per_node=1 "${probe[@]}" \
      --tag "torchrun" || rc=1
  done
  for i in $(seq 1 "$restarts"); do
    timed "restart_ddplaunch_$i" "$B/bin/ddplaunch" --standalone --nproc_per_node=1 \
      --max_restarts=1 "${probe[@]}" --tag "ddplaunch_restart$i" --fail_once || rc=1
    timed "restart_torchrun_$i" "${torchrun[@]}" --standalone --nproc_per_node=1 --max_restarts=1 \
      "${probe[@]}" --tag "torchrun_restart$i" --fail_once || rc=1
  done
  "$PY" "$REPO/scripts/gpu/summarize.py" launch "$WORK/launch" "$WORK/timed.txt" >"$WORK/launch.result" || rc=1
  cat "$WORK/launch.result"
  return "$rc"
}

# timed NAME CMD...: runs CMD, appends "NAME seconds rc" to $WORK/timed.txt.
timed() {
  local name=$1 start end rc=0
  shift
  start=$(date +%s.%N)
  "$@" >"$WORK/$name.log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  echo "$name $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}') $rc" | tee -a "$WORK/timed.txt"
  [[ $rc == 0 ]] || tail -n 30 "$WORK/$name.log"
  return "$rc"
}

step_store() {
  # In a network namespace where the machine allows one (scripts/bench/netns.sh says why:
  # PyTorch's server looks up every client's name, and a resolver that drops queries costs
  # 5 s per connection).
  if [[ -z "${BENCH_IN_NETNS:-}" ]] && unshare -n true 2>/dev/null; then
    BENCH_IN_NETNS=1 exec "$REPO/scripts/bench/netns_exec.sh" "$REPO/scripts/gpu/run.sh" \
      --step store
  fi
  echo "store: network: $([[ -n "${BENCH_IN_NETNS:-}" ]] && echo "own namespace" || echo host)"
  local clients=1024 requests=1000 reps=3 rc=0 dialect=v2
  [[ $DRY == 1 ]] && { clients=16; requests=50; reps=1; }
  [[ "$TORCH_VERSION" == 1.* ]] && dialect=legacy  # PyTorch 1.13's server (the dry run's)
  raise_fd_limit
  export DDPLAUNCH_STORE_MAX_CONNS_PER_PEER=1000000
  for r in $(seq 1 "$reps"); do
    for server in ours torch; do
      local cmd=("$B/bin/ddpstore" --io auto --host 127.0.0.1 --port 0)
      [[ $server == torch ]] && cmd=("$PY" "$REPO/scripts/bench/store_torch_server.py")
      "${cmd[@]}" >"$WORK/store_port" 2>"$WORK/store_server_$server.log" &
      local pid=$! port=""
      for _ in $(seq 1 300); do [[ -s "$WORK/store_port" ]] && break; sleep 0.05; done
      port=$(head -1 "$WORK/store_port")
      if [[ -z "$port" ]]; then
        echo "store: $server did not start"; cat "$WORK/store_server_$server.log"; rc=1
      else
        # epoll load generator: io_uring may be refused on the device's kernel (gVisor).
        local line
        line=$("$B/bin/store_bench" --port "$port" --clients "$clients" --requests "$requests" \
          --dialect "$dialect" --io epoll) || rc=1
        echo "store run=$r server=$server $line" | tee -a "$WORK/store.txt"
      fi
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      rm -f "$WORK/store_port"
    done
  done
  "$PY" "$REPO/scripts/gpu/summarize.py" store "$WORK/store.txt" >"$WORK/store.result" || rc=1
  cat "$WORK/store.result"
  return "$rc"
}

# The most connections one process may hold here, rounded down to a multiple of 1024 and
# capped at $1: a store benchmark's server holds one per client, and so does its load.
fd_fit() {
  local want=$1 hard
  hard=$(ulimit -Hn)
  if [[ $hard != unlimited ]] && (( hard - 512 < want )); then
    echo $(( (hard - 512) / 1024 * 1024 ))
  else
    echo "$want"
  fi
}

step_init() {
  # init_process_group + a store barrier for 96K ranks (scripts/bench/init.sh, bench/init),
  # ours then PyTorch's libuv server, each run given 60 s.
  local ranks servers="ours torch" rc=0
  raise_fd_limit
  ranks=$(fd_fit 98304)
  [[ $DRY == 1 ]] && ranks=256
  # PyTorch 1.13's server (the dry run's) speaks the legacy dialect only.
  [[ "$TORCH_VERSION" == 1.* ]] && servers=ours
  echo "init: $ranks ranks (ulimit -Hn $(ulimit -Hn)), servers: $servers"
  RANKS=$ranks REPEATS=1 SERVERS=$servers RUN_LIMIT_S=60 TORCH_PYTHON=$PY \
    "$REPO/scripts/bench/init.sh" "$B/bin" | tee "$WORK/init.txt" || rc=1
  "$PY" "$REPO/scripts/gpu/summarize.py" init "$WORK/init.txt" >"$WORK/init.result" || rc=1
  cat "$WORK/init.result"
  return "$rc"
}

step_rdzv() {
  # 16,384 nodes three times, then 65,536 once where the descriptor limit allows.
  local nodes=16384 repeats=3 big
  [[ $DRY == 1 ]] && { nodes=8; repeats=1; }
  raise_fd_limit
  "$B/bin/rdzv_bench" --nodes "$nodes" --repeats "$repeats" --reform_nodes 0 | tee "$WORK/rdzv.txt"
  local row
  row=$(grep -m1 -E "^\| $nodes \|" "$WORK/rdzv.txt") || return 1
  echo "result rdzv_nodes=$nodes rdzv_agree_median_s=$(awk -F'|' '{gsub(/ /, "", $3); print $3}' <<<"$row")"
  big=$(fd_fit 65536)
  [[ $DRY == 1 ]] && big=16
  if (( big < 65536 )) && [[ $DRY == 0 ]]; then
    echo "result rdzv_big_skipped=ulimit_Hn_$(ulimit -Hn)"
    return 0
  fi
  "$B/bin/rdzv_bench" --nodes "$big" --repeats 1 --reform_nodes 0 | tee "$WORK/rdzv_big.txt"
  row=$(grep -m1 -E "^\| $big \|" "$WORK/rdzv_big.txt") || return 1
  echo "result rdzv_big_nodes=$big rdzv_big_agree_s=$(awk -F'|' '{gsub(/ /, "", $3); print $3}' <<<"$row")"
}

if [[ "${1:-}" == --step ]]; then
  "step_$2"
  exit
fi

# ---------------------------------------------------------------- the driver
DRY=0
[[ "${1:-}" == --dry-run ]] && DRY=1
export DRY REPO
DEADLINE_S=${DEADLINE_S:-420}
[[ $DRY == 1 ]] && DEADLINE_S=${DRY_DEADLINE_S:-300}
PACKED=${GPU_BUNDLE:-gpu-bundle}
own_out=0
if [[ -z "${OUT:-}" ]]; then
  OUT=$(mktemp -d /tmp/ddp-gpu-out.XXXXXX)
  own_out=1
  echo "run.sh: no \$OUT set; results go to $OUT"
fi
WORK=$(mktemp -d /tmp/ddp-gpu-work.XXXXXX)
B=$WORK/bundle
export OUT WORK B

if [[ $DRY == 1 ]]; then
  # Scripts first: a syntax error must fail here, not on the device.
  for f in scripts/gpu/*.sh; do bash -n "$f"; done
  if command -v shellcheck >/dev/null; then shellcheck -x scripts/gpu/*.sh; else echo "run.sh: no shellcheck here; bash -n only"; fi
  python3 -m py_compile scripts/gpu/*.py scripts/bench/store_torch_server.py
  # No bundle here (CI): pack one from the ordinary build, CHECK_RPATH off (its binaries
  # carry the build tree's RUNPATH, not the bundle's $ORIGIN/../lib), fast compression.
  if [[ ! -f "$PACKED/bundle.tar.xz" ]]; then
    PACKED=$WORK/packed
    read -r -a targets <<<"$(scripts/gpu/bundle.sh --print-targets)"
    CHECK_RPATH=0 ALLOW_MISSING=test_rt_nccl XZ_LEVEL=0 scripts/gpu/pack.sh "${BUILD_DIR:-build}" "$PACKED" "${targets[@]}"
  else
    scripts/gpu/check_bundle.sh "$PACKED"
  fi
fi
[[ -f "$PACKED/bundle.tar.xz" ]] || { echo "run.sh: no $PACKED/bundle.tar.xz: run scripts/gpu/bundle.sh, then carry gpu-bundle" >&2; exit 1; }
mkdir -p "$B"
tar -C "$B" -xJf "$PACKED/bundle.tar.xz" 2>/dev/null \
  || "${GPU_PYTHON:-python3}" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$PACKED/bundle.tar.xz" "$B"

# The Python with PyTorch: the image's python3; here the first that imports torch.
PY=${GPU_PYTHON:-}
if [[ -z "$PY" ]]; then
  for candidate in python3 /usr/bin/python3 /var/cache/ddplaunch/venvs/torch-2.15.0/bin/python \
    /var/cache/ddplaunch/venvs/torch-2.5.1/bin/python; do
    if command -v "$candidate" >/dev/null && "$candidate" -c "import torch, numpy" 2>/dev/null; then PY=$(command -v "$candidate"); break; fi
  done
fi
[[ -n "$PY" ]] || { echo "run.sh: no Python with torch and numpy (set GPU_PYTHON)" >&2; exit 1; }
TORCH_VERSION=$("$PY" -c "import torch; print(torch.__version__)")
DEVICE=$("$PY" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
export PY TORCH_VERSION DEVICE
# NCCL's warnings (e.g. "Duplicate GPU detected") in the logs; both launchers inherit it.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

# The image's NVIDIA libraries (cuBLAS, NCCL) where the loader would not find them: PyTorch's
# wheels keep them in site-packages/nvidia/*/lib. Searched in the order the loader should use.
lib_dirs=()
ld_cache=$(ldconfig -p 2>/dev/null || true)
for lib in "${IMAGE_FIND_LIBS[@]}"; do
  if grep -q " $lib " <<<"$ld_cache"; then continue; fi
  dir=$( { "$PY" -c "import nvidia, os; print('\n'.join(nvidia.__path__))" 2>/dev/null \
    | while read -r d; do find "$d" -name "$lib" 2>/dev/null; done; \
    find /usr/local/cuda/lib64/ /usr/local/cuda/targets/x86_64-linux/lib/ -maxdepth 1 -name "$lib" 2>/dev/null; } | head -1 || true)
  if [[ -n "$dir" ]]; then lib_dirs+=("$(dirname "$dir")"); fi
done
# libstdc++/libgcc_s: the image's own unless older than the bundle needs (MANIFEST.txt).
need_glibcxx=$(awk '$1 == "needs" && $2 == "GLIBCXX" {print $3}' "$B/MANIFEST.txt")
image_stdcxx=$(awk '/libstdc\+\+\.so\.6 .*x86-64/ && !found {print $NF; found = 1}' <<<"$ld_cache")
have_glibcxx=""
if [[ -n "$image_stdcxx" && -f "$image_stdcxx" ]]; then
  have_glibcxx=$(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$image_stdcxx" | sed 's/GLIBCXX_//' | sort -Vu | tail -1 || true)
fi
if [[ -n "$have_glibcxx" && "$(printf '%s\n%s\n' "$need_glibcxx" "$have_glibcxx" | sort -V | tail -1)" == "$have_glibcxx" ]]; then
  COMPAT_NOTE="image libstdc++ $image_stdcxx has GLIBCXX $have_glibcxx >= $need_glibcxx needed: used"
else
  COMPAT_NOTE="image libstdc++ (${image_stdcxx:-none}) has GLIBCXX ${have_glibcxx:-?} < $need_glibcxx needed: the bundle's lib/compat used"
  lib_dirs=("$B/lib/compat" "${lib_dirs[@]}")
fi
if [[ ${#lib_dirs[@]} -gt 0 ]]; then
  LD_LIBRARY_PATH=$(IFS=:; echo "${lib_dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
fi
export COMPAT_NOTE

# Outputs: rewritten after every step (a run killed at its limit still reports what it has).
write_outputs() {
  "$PY" scripts/gpu/summarize.py final "$WORK" "$OUT" "$DRY" || echo "run.sh: summarize failed" >&2
  : >"$OUT/logs.txt"
  for s in "${ALL_STEPS[@]}"; do
    [[ -f "$WORK/$s.step.log" ]] || continue
    { echo "===== $s"; tail -c 200000 "$WORK/$s.step.log"; } >>"$OUT/logs.txt"
  done
  tar -C "$WORK" --exclude=bundle --exclude=packed --exclude=mlp.npy -czf "$OUT/results.tar.gz" . 2>/dev/null || true
}

read -r -a steps <<<"${STEPS:-${ALL_STEPS[*]}}"
overall=0
for s in "${steps[@]}"; do
  limit=${LIMIT[$s]:-60}
  left=$((DEADLINE_S - SECONDS - 5))
  if (( left < 15 )); then
    echo "$s skipped 0 0 no time left before the ${DEADLINE_S}s deadline" >>"$WORK/steps.txt"
    overall=1
    continue
  fi
  (( limit > left )) && limit=$left
  echo "run.sh: step $s (limit ${limit}s, +${SECONDS}s)"
  start=$SECONDS
  rc=0
  timeout -k 5 "$limit" "$REPO/scripts/gpu/run.sh" --step "$s" >"$WORK/$s.step.log" 2>&1 || rc=$?
  outcome=ok
  if [[ $rc == 124 || $rc == 137 ]]; then outcome=timeout; elif [[ $rc != 0 ]]; then outcome=failed; fi
  [[ $outcome == ok ]] || overall=1
  echo "$s $outcome $((SECONDS - start)) $rc" >>"$WORK/steps.txt"
  echo "run.sh: step $s $outcome in $((SECONDS - start))s"
  [[ $outcome == ok ]] || tail -n 20 "$WORK/$s.step.log"
  write_outputs
done
cat "$OUT/summary.txt"
if [[ $DRY == 1 ]]; then
  rm -rf "$WORK"
  [[ $own_out == 1 ]] && rm -rf "$OUT"
  [[ $overall == 0 ]] || { echo "run.sh --dry-run: a step failed (above)" >&2; exit 1; }
  echo "run.sh --dry-run: every step passed"
fi
exit "$overall"
