"""Tables for scripts/bench/store.sh: reads its results file and prints markdown.

Usage: store_report.py RESULTS COMMAND PRIORITY REFERENCE DIALECT
Each results line: run R NAME key=value ... (store_bench's line plus server_cpu_ticks).
REFERENCE names PyTorch's server ("PyTorch 2.15.0 (libuv server)").
"""
import datetime
import os
import statistics
import sys

path, command, priority, reference, dialect = sys.argv[1:]
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")
SERVERS = ("ours", "ours_epoll", "torch", "floor", "floor_epoll")

rows = {}  # (name, clients) -> [kv per run]
for line in open(path):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[3:] if "=" in x)
    kv["run"] = f[1]
    rows.setdefault((f[2], int(kv["clients"])), []).append(kv)
clients = sorted({c for (name, c) in rows if name == "ours"})


def med(name, c, key):
    return statistics.median(float(kv[key]) for kv in rows[(name, c)])


def server_us(name, c):  # server CPU per request
    return statistics.median(float(kv["server_cpu_ticks"]) * TICK_US / float(kv["requests"])
                             for kv in rows[(name, c)])


def client_us(name, c):  # load generator CPU per request
    return statistics.median(float(kv["client_cpu_s"]) * 1e6 / float(kv["requests"])
                             for kv in rows[(name, c)])


def per_run_ratios(a, b, c, key="req_per_s"):
    """a/b per repeat (the servers alternate within a repeat, so each pair shares conditions)."""
    by_run = {kv["run"]: float(kv[key]) for kv in rows[(b, c)]}
    return sorted(float(kv[key]) / by_run[kv["run"]] for kv in rows[(a, c)] if kv["run"] in by_run)


runs = len(rows[("ours", clients[0])])
out = [
    f"Command: `{command}` ({datetime.date.today()}; median of {runs} runs, the servers "
    f"alternating; {priority}). Reference: {reference}, driven in the {dialect} dialect.",
    "",
    "| clients | requests/client | ours req/s | ours (epoll) | PyTorch | floor | floor (epoll) "
    "| ours/PyTorch (per run) | ours (epoll)/PyTorch | floor/PyTorch | ours/floor |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
]
for c in clients:
    o, oe, t, f, fe = (med(s, c, "req_per_s") for s in SERVERS)
    r = per_run_ratios("ours", "torch", c)
    per_client = int(round(med("ours", c, "requests") / c, -1))  # pairs overshoot by one
    out.append(f"| {c} | {per_client} | {o:,.0f} | {oe:,.0f} | {t:,.0f} | {f:,.0f} | {fe:,.0f} | "
               f"**{o / t:.2f}x** ({r[0]:.2f}-{r[-1]:.2f}) | {oe / t:.2f}x | {f / t:.2f}x | {o / f:.2f} |")
out += [
    "",
    "| clients | p50 µs ours | ours (epoll) | PyTorch | floor | p99 µs ours | ours (epoll) | PyTorch "
    "| floor | p99 ours/PyTorch |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
]
for c in clients:
    p50 = [med(s, c, "p50_us") for s in SERVERS[:4]]
    p99 = [med(s, c, "p99_us") for s in SERVERS[:4]]
    out.append(f"| {c} | " + " | ".join(f"{v:,.0f}" for v in p50) + " | " +
               " | ".join(f"{v:,.0f}" for v in p99) + f" | **{p99[0] / p99[2]:.2f}** |")
out += [
    "",
    "CPU per request (µs; user+system of the whole process over the timed run). A server's "
    "capacity with a core to itself is 1 / its CPU per request, whatever else shares the "
    "machine; the last columns are PyTorch's CPU per request over each of the others':",
    "",
    "| clients | server: ours | ours (epoll) | PyTorch | floor | floor (epoll) | load generator, "
    "against ours | against PyTorch | PyTorch/ours | PyTorch/floor |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
]
for c in clients:
    cells = [server_us(s, c) for s in SERVERS]
    cells += [client_us("ours", c), client_us("torch", c)]
    out.append(f"| {c} | " + " | ".join(f"{v:.2f}" for v in cells) +
               f" | {cells[2] / cells[0]:.2f}x | {cells[2] / cells[3]:.2f}x |")
if ("ours_epoll_load", 64) in rows:
    o_u, t_u = med("ours", 64, "req_per_s"), med("torch", 64, "req_per_s")
    o_e, t_e = med("ours_epoll_load", 64, "req_per_s"), med("torch_epoll_load", 64, "req_per_s")
    out += [
        "",
        "The load generator's engine, 64 clients:",
        "",
        "| store_bench engine | ours req/s | PyTorch req/s | ours/PyTorch | generator CPU µs/req "
        "(against ours) |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| io_uring | {o_u:,.0f} | {t_u:,.0f} | {o_u / t_u:.2f}x | {client_us('ours', 64):.2f} |",
        f"| epoll | {o_e:,.0f} | {t_e:,.0f} | {o_e / t_e:.2f}x | "
        f"{client_us('ours_epoll_load', 64):.2f} |",
    ]
print("\n".join(out))
