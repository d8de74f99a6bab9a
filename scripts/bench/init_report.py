"""Tables for scripts/bench/init.sh: reads its results file and prints markdown.

Usage: init_report.py RESULTS
Each line: run R SERVER init ranks=N key=value ... server_cpu_s=.. server_rss_idle_kib=..
server_hwm_kib=.. (init_bench's line plus what the driver read from /proc).
"""
import statistics
import sys

NAMES = {"ours": "ours (default: io_uring)", "ours_epoll": "ours (epoll)",
         "torch": "PyTorch libuv"}
PHASES = ["connect", "init", "exchange", "barrier"]

rows = {}  # (server, ranks) -> [kv per run]
timeouts = []  # (server, ranks, limit) of runs not done in time
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4 or f[0] != "run":
        continue
    kv = dict(x.split("=", 1) for x in f[4:] if "=" in x)
    if f[3] == "timeout":
        timeouts.append((f[2], int(kv["ranks"]), kv["limit_s"]))
        continue
    kv["run"] = f[1]
    rows.setdefault((f[2], int(kv["ranks"])), []).append(kv)

servers = [s for s in NAMES if any(k[0] == s for k in rows)]
sizes = sorted({k[1] for k in rows})


def med(server, n, key, scale=1.0):
    return statistics.median(float(kv[key]) * scale for kv in rows[(server, n)])


def growth_mib(server, n):
    return statistics.median((float(kv["server_hwm_kib"]) - float(kv["server_rss_idle_kib"])) / 1024
                             for kv in rows[(server, n)])


def ratio(n, key, a="torch", b="ours"):
    """a/b per repeat (paired: the servers alternate within a repeat), median."""
    if (a, n) not in rows or (b, n) not in rows:
        return None
    by_run = {kv["run"]: float(kv[key]) for kv in rows[(b, n)]}
    r = [float(kv[key]) / by_run[kv["run"]] for kv in rows[(a, n)] if kv["run"] in by_run]
    return statistics.median(r) if r else None


for server, n, limit in timeouts:
    print(f"{NAMES.get(server, server)} at {n} ranks: not done within {limit} s")
if not rows:
    sys.exit(0)
runs = max(len(v) for v in rows.values())
print(f"\nAll ranks through (medians of {runs} runs; s), server CPU (s) and server memory:\n")
print("| ranks | server | all through (s) | server CPU (s) | client CPU (s) | RSS idle (MiB) "
      "| peak RSS (MiB) | peak - idle (MiB) | PyTorch / this (time) |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for n in sizes:
    for s in servers:
        if (s, n) not in rows:
            continue
        r = ratio(n, "seconds", "torch", s)
        print(f"| {n} | {NAMES[s]} | {med(s, n, 'seconds'):.3f} | {med(s, n, 'server_cpu_s'):.2f} "
              f"| {med(s, n, 'client_cpu_s'):.2f} | {med(s, n, 'server_rss_idle_kib', 1 / 1024):.1f} "
              f"| {med(s, n, 'server_hwm_kib', 1 / 1024):.1f} | {growth_mib(s, n):.1f} "
              f"| {'' if r is None or s == 'torch' else f'{r:.2f}x'} |")

print("\nEach phase: when the last rank was through it (s since the start) / each rank's own "
      "time in it, p99 (ms); medians over runs:\n")
print("| ranks | server | " + " | ".join(f"{p}: all (s) / p99 (ms)" for p in PHASES) + " |")
print("| ---: | --- |" + " ---: |" * len(PHASES))
for n in sizes:
    for s in servers:
        if (s, n) not in rows:
            continue
        cells = [f"{med(s, n, p + '_wave_s'):.3f} / {med(s, n, p + '_p99_ms'):.1f}" for p in PHASES]
        print(f"| {n} | {NAMES[s]} | " + " | ".join(cells) + " |")
