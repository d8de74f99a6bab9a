#!/usr/bin/env bash
# Launcher benchmark: ddplaunch against torchrun (-r 1 -t 1, which Python 3.11 needs with
# torchrun 1.13), in one run, once per PyTorch of TORCH_PYTHONS (scripts/bench/torch_refs.sh;
# default Debian's 1.13). Prints a markdown table; docs/benchmarks.md quotes its output.
#   scripts/bench/launch.sh [BUILD_DIR]     (default: build)
#   TORCH_PYTHONS="/usr/bin/python3 /var/cache/ddplaunch/venvs/torch-2.15.0/bin/python" \
#     scripts/bench/launch.sh               (torchrun 1.13 and 2.15 beside ddplaunch)
# Measures: launch-to-exit wall time for 8 workers of /bin/true (hyperfine), time from a
# worker's crash to every worker of the restarted group running (4 workers, launch_bench),
# and the launcher's peak RSS (launch_bench rss, 8 /bin/true workers).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/torch_refs.sh
BUILD=${1:-build}
DDP=$BUILD/ddplaunch
WORKER=$BUILD/launch_bench_worker
BENCH=$BUILD/launch_bench
RUNS=${RUNS:-20}            # hyperfine runs for ddplaunch and torchrun at 0.1 s
DEFAULT_RUNS=${DEFAULT_RUNS:-3}  # torchrun at its default --monitor_interval (5 s in 1.13, 0.1 in 2.x)
RESTARTS=${RESTARTS:-20}    # crash/restart repetitions
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

for f in "$DDP" "$WORKER" "$BENCH"; do
  [ -x "$f" ] || { echo "missing $f: build the ddplaunch, launch_bench and launch_bench_worker targets" >&2; exit 1; }
done

median_ms() { /usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print('%.1f' % (r[int(sys.argv[2])]['median']*1000))" "$1" "$2"; }
field() { sed -n "s/.*$2=\([0-9.]*\).*/\1/p" <<<"$1"; }
ratio() { /usr/bin/python3 -c "import sys; print('%.1fx' % (float(sys.argv[1])/float(sys.argv[2])))" "$1" "$2"; }
mib() { /usr/bin/python3 -c "import sys; print('%.1f' % (float(sys.argv[1])/1024))" "$1"; }

# ddplaunch first, then each reference; hyperfine alternates nothing, so each command's runs
# are back to back: compare within one run of this script only.
echo "## launch to exit, 8 x /bin/true: ddplaunch" >&2
hyperfine -N --warmup 2 --runs "$RUNS" --export-json "$TMP/ddp.json" \
  -n ddplaunch "$DDP --nproc_per_node=8 --standalone /bin/true" >&2
echo "## crash to restarted, 4 workers: ddplaunch" >&2
ddp_restart=$($BENCH restart "$RESTARTS" 4 -- "$DDP" --nproc_per_node=4 --standalone --max_restarts=1 "$WORKER")
echo "## peak RSS: ddplaunch" >&2
ddp_rss=$($BENCH rss -- "$DDP" --nproc_per_node=8 --standalone /bin/true)
d_launch=$(median_ms "$TMP/ddp.json" 0)
d_restart=$(field "$ddp_restart" median)
d_rss=$(field "$ddp_rss" peak_rss_kib)

rows=()
for i in "${!TORCH_PYS[@]}"; do
  py=${TORCH_PYS[$i]}
  v=$(torch_version "$py")
  TORCHRUN="$py -m torch.distributed.run -r 1 -t 1"
  echo "## torchrun $v ($py)" >&2
  hyperfine -N --warmup 2 --runs "$RUNS" --export-json "$TMP/fast$i.json" \
    -n "torchrun $v (0.1)" "$TORCHRUN --nproc_per_node=8 --standalone --monitor_interval 0.1 --no_python /bin/true" >&2
  hyperfine -N --runs "$DEFAULT_RUNS" --export-json "$TMP/default$i.json" \
    -n "torchrun $v (default)" "$TORCHRUN --nproc_per_node=8 --standalone --no_python /bin/true" >&2
  tr_restart=$($BENCH restart "$RESTARTS" 4 -- $TORCHRUN --nproc_per_node=4 --standalone --max_restarts=1 --monitor_interval 0.1 --no_python "$WORKER")
  tr_restart_default=$($BENCH restart "$DEFAULT_RUNS" 4 -- $TORCHRUN --nproc_per_node=4 --standalone --max_restarts=1 --no_python "$WORKER")
  tr_rss=$($BENCH rss -- $TORCHRUN --nproc_per_node=8 --standalone --monitor_interval 0.1 --no_python /bin/true)
  t_launch=$(median_ms "$TMP/fast$i.json" 0)
  t_launch_default=$(median_ms "$TMP/default$i.json" 0)
  t_restart=$(field "$tr_restart" median)
  t_restart_default=$(field "$tr_restart_default" median)
  t_rss=$(field "$tr_rss" peak_rss_kib)
  rows+=("| launch to exit, 8 x /bin/true (ms) | $d_launch | $v | $t_launch | $t_launch_default | $(ratio "$t_launch" "$d_launch") faster |")
  rows+=("| crash to all 4 restarted (ms) | $d_restart | $v | $t_restart | $t_restart_default | $(ratio "$t_restart" "$d_restart") faster |")
  rows+=("| launcher peak RSS (MiB) | $(mib "$d_rss") | $v | $(mib "$t_rss") | - | $(ratio "$t_rss" "$d_rss") smaller |")
done

echo "| metric (median) | ddplaunch | PyTorch (torchrun) | torchrun --monitor_interval 0.1 | torchrun default | ratio vs 0.1 |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
echo
echo "runs: launch $RUNS (torchrun default: $DEFAULT_RUNS), restarts $RESTARTS (torchrun default: $DEFAULT_RUNS); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
