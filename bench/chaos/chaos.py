"""Goodput under chaos (issue 37): one seeded schedule of faults, run the same way against
ddplaunch in place, ddplaunch with restarts and torchrun, with invariants checked on every run.

    scripts/bench/chaos.sh --short                     # CI: fixed schedule, in place, ~2 min
    scripts/bench/chaos.sh --seed 7 --duration 600 --interval 60 --modes inplace,restart,torchrun \\
        --baseline

N hosts are network namespaces behind a bridge (cluster.py); each runs one agent with
--nnodes 1:MAX, c10d, and one worker of examples/pytorch_in_place/train.py. The faults
(schedule.py) are applied on time (runner.py); the step lines are read afterwards
(analysis.py). Exit status: 0 when every invariant held on the ddplaunch runs, 1 when one did
not (each printed with "INVARIANT VIOLATED"), 77 when the machine cannot make namespaces.
The torchrun run's violations and early stops are reported, never fatal: it is the reference.
docs/chaos.md has what is measured and the results.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import cluster as netns  # noqa: E402
import runner  # noqa: E402
import schedule as sched  # noqa: E402

LABELS = {"inplace": "ddplaunch --in_place_recovery (--standby_workers)",
          "restart": "ddplaunch, restarts",
          "torchrun": "torchrun 2.15 (c10d)"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--short", action="store_true",
                   help="CI mode: the fixed short schedule (3 nodes), in place only")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration", type=float, default=600, help="seconds after the first step")
    p.add_argument("--interval", type=float, default=60, help="seconds between faults")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--max_nodes", type=int, default=6)
    p.add_argument("--kinds", default=",".join(sched.KINDS))
    p.add_argument("--plan", default="",
                   help="a fixed schedule instead of a drawn one: t:kind[:length[:pick]],... "
                        "(e.g. 20:pause:20:0.9,45:blip:4)")
    p.add_argument("--reanalyse", metavar="OUT",
                   help="recompute the report of the runs in OUT (its results.json and sample "
                        "logs) instead of running anything")
    p.add_argument("--modes", default="inplace,restart,torchrun")
    p.add_argument("--baseline", action="store_true",
                   help="also an undisturbed run of the same length per way (goodput relative "
                        "to it, time lost per fault)")
    p.add_argument("--baseline_s", type=float, default=0,
                   help="the undisturbed run's length (default: --duration); its goodput is "
                        "scaled to the faulted run's wall time: steady fraction x (wall - its "
                        "time to the first step) / wall")
    p.add_argument("--last_call_s", type=float, default=5,
                   help="--rdzv_conf last_call_timeout, every way (default of both: 30 s)")
    p.add_argument("--rto_max_ms", type=int, default=0,
                   help="sysctl net.ipv4.tcp_rto_max_ms in every host (default: the kernel's)")
    p.add_argument("--build", default=os.path.join(runner.ROOT, "build"))
    p.add_argument("--python", default="/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python")
    p.add_argument("--out", default="", help="folder for logs and report (default: a temp one)")
    p.add_argument("--rows", type=int, default=9600)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--step_ms", type=int, default=50, help="the script's --slow_step_ms")
    p.add_argument("--checkpoint_every", type=int, default=20)
    p.add_argument("--max_restarts", type=int, default=100)
    p.add_argument("--standby_workers", type=int, default=1,
                   help="in place: --standby_workers per node (a crashed or hung worker's place "
                        "goes to a parked process; 0: a fresh worker starts cold)")
    p.add_argument("--hang_timeout", type=float, default=30,
                   help="ddplaunch's; longer than a pause (20 s): see docs/chaos.md")
    p.add_argument("--startup_s", type=float, default=120)
    p.add_argument("--exit_s", type=float, default=60, help="wait for agents after SIGTERM")
    p.add_argument("--orphan_grace_s", type=float, default=3)
    return p.parse_args(argv)


def log(msg):
    print(msg, flush=True)


def one_run(o, mode, schedule, out_dir):
    hosts = sched.slots_needed(schedule)
    c = netns.Cluster(hosts)
    try:
        if o.rto_max_ms:
            c.set_rto_max(o.rto_max_ms)
        r = runner.Run(c, mode, schedule, out_dir, o, log)
        res = r.run()
    finally:
        c.close()
    analysis.analyse(res, r.samples, o.batch_size, o.rows, o.hang_timeout)
    analysis.check_exits(res, strict=mode != "torchrun")
    return res


def fmt(x, unit=""):
    return "-" if x is None else ("%.2f%s" % (x, unit) if isinstance(x, float) else
                                  "%s%s" % (x, unit))


def report(o, schedule, results, baselines):
    out = ["## Chaos run: seed %d, %d nodes (1:%d), %.0f s, %d faults" % (
        schedule["seed"], schedule["nodes"], schedule["max_nodes"], schedule["duration"],
        len(schedule["faults"])) + (", tcp_rto_max_ms %d" % o.rto_max_ms if o.rto_max_ms
                                     else ""), "",
        "| way | goodput | undisturbed | relative | kept steps | thrown away | time lost, s "
        "| beyond the faults' own length, s | per fault, s | end |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for res in results:
        mode = res["mode"]
        base = baselines.get(mode)
        steady = base["steady_fraction"] if base else 1.0
        pf = analysis.per_fault(res, steady)
        res["per_fault"] = pf
        lost = beyond = None
        if base and "wall_s" in res:  # the undisturbed goodput over the same wall time
            base = dict(base, goodput=round(base["steady_fraction"] * max(
                0.0, res["wall_s"] - base.get("first_step_s", 0)) / res["wall_s"], 4))
        applied = [f for f in pf if not f["skipped"]]
        if base:
            lost = round(base["goodput"] * res["wall_s"] - res["kept_time_s"], 2) \
                if "wall_s" in res else None
            own = sum(f["length"] for f in applied)
            beyond = None if lost is None else round(lost - own, 2)
        rel = (res.get("goodput", 0) / base["goodput"]) if base and base.get("goodput") else None
        end = res.get("stopped") or "SIGTERM: exit %s" % res.get("outcome")
        out.append("| %s | %s | %s | %s | %d | %d | %s | %s | %s | %s |" % (
            LABELS[mode], fmt(res.get("goodput")), fmt(base.get("goodput") if base else None),
            fmt(rel), res.get("steps_kept", 0), res.get("steps_thrown_away", 0), fmt(lost),
            fmt(beyond), fmt(beyond / len(applied) if beyond is not None and applied else None),
            end))
    out += ["", "Per fault (time lost in the window from the fault to the next one, beyond the "
            "fault's own length; first kept step after it):", ""]
    header = "| # | t, s | fault | " + " | ".join(
        "%s: node, lost beyond, next step" % LABELS[r["mode"]] for r in results) + " |"
    out += [header, "|" + " --- |" * (3 + len(results))]
    for i, f in enumerate(schedule["faults"]):
        cells = []
        for res in results:
            pf = res["per_fault"]
            if i >= len(pf):
                cells.append("not reached (run stopped)")
                continue
            x = pf[i]
            cells.append("skipped: %s" % x["skipped"] if x["skipped"] else
                         "%s, %s, %s" % (x["node"], fmt(x["beyond_s"]), fmt(x["next_step_s"])))
        length = " %.0f s" % f["length"] if f["length"] else ""
        out.append("| %d | %.1f | %s%s | %s |" % (i + 1, f["t"], f["kind"], length,
                                                  " | ".join(cells)))
    for res in results:
        out += ["", "%s: exit statuses %s; first step %s s after launch; %d orphans" % (
            LABELS[res["mode"]],
            ", ".join("node %s %s (%s)" % (s, a["exit"], a["fate"])
                      for s, a in sorted(res["agents"].items())),
            res.get("first_step_s"), len(res.get("orphans", [])))]
        for n in res.get("notes", [])[:20]:
            out.append("- note: " + n)
        for v in res.get("violations", []):
            out.append("- %s: %s" % ("INVARIANT VIOLATED" if res["mode"] != "torchrun"
                                     else "torchrun finding", v))
    return "\n".join(out)


def reanalyse(o):
    """The report again from OUT/results.json and the sample logs (after a change to
    analysis.py); prints it and writes OUT/report.md."""
    results, baselines, schedule = [], {}, None
    with open(os.path.join(o.reanalyse, "results.json")) as f:
        for raw in f:
            res = json.loads(raw)
            schedule = res.pop("schedule")
            res["planned_end"] = res["t0"] + (o.baseline_s if res.get("baseline") and
                                              o.baseline_s else schedule["duration"])
            res["agents"] = {int(k): v for k, v in res["agents"].items()}
            res["violations"] = []
            res["notes"] = [n for n in res.get("notes", []) if n.startswith("node ")]
            name = res["mode"] + (".baseline" if res.get("baseline") else "")
            analysis.analyse(res, os.path.join(o.reanalyse, name, "samples"), o.batch_size,
                             o.rows, o.hang_timeout)
            analysis.check_exits(res, strict=res["mode"] != "torchrun")
            (baselines.__setitem__(res["mode"], res) if res.get("baseline")
             else results.append(res))
    text = report(o, schedule, results, baselines)
    with open(os.path.join(o.reanalyse, "report.md"), "w") as f:
        f.write(text + "\n")
    log(text)
    return 1 if any(r.get("violations") for r in results + list(baselines.values())
                    if r["mode"] != "torchrun") else 0


def main(argv):
    o = parse_args(argv)
    if o.reanalyse:
        return reanalyse(o)
    if o.short:
        schedule = sched.short_schedule()
        modes = ["inplace"]
    else:
        schedule = sched.make_schedule(o.seed, o.duration, o.interval, o.nodes, o.max_nodes,
                                       tuple(o.kinds.split(",")))
        if o.plan:
            schedule["faults"] = sched.parse_plan(o.plan)
        modes = o.modes.split(",")
    for m in modes:
        if m not in LABELS:
            sys.exit("chaos: unknown way %r (inplace, restart, torchrun)" % m)
    if not os.access(os.path.join(o.build, "ddplaunch"), os.X_OK):
        sys.exit("chaos: %s/ddplaunch is missing (scripts/build.sh)" % o.build)
    if not os.access(o.python, os.X_OK):
        log("chaos: SKIPPED: no PyTorch venv at %s (scripts/setup_torch.sh)" % o.python)
        return 77
    out = o.out or tempfile.mkdtemp(prefix="ddpchaos.")
    os.makedirs(out, exist_ok=True)
    log("chaos: seed %d, %d nodes (1:%d), %.0f s, logs in %s" % (
        schedule["seed"], schedule["nodes"], schedule["max_nodes"], schedule["duration"], out))
    for f in schedule["faults"]:
        log("  plan t=%6.1f s %s%s" % (f["t"], f["kind"],
                                       " %.0f s" % f["length"] if f["length"] else ""))
    try:
        netns.Cluster(1).close()
    except netns.Unavailable as e:
        log("chaos: SKIPPED: no network namespaces here: %s" % e)
        return 77
    results, baselines = [], {}
    for mode in modes:
        if o.baseline:
            log("%s, undisturbed:" % LABELS[mode])
            quiet = dict(schedule, faults=[], duration=o.baseline_s or schedule["duration"])
            baselines[mode] = one_run(o, mode, quiet, os.path.join(out, mode + ".baseline"))
            log("  goodput %s, steady %s" % (baselines[mode].get("goodput"),
                                             baselines[mode].get("steady_fraction")))
        log("%s, under the schedule:" % LABELS[mode])
        results.append(one_run(o, mode, schedule, os.path.join(out, mode)))
        log("  goodput %s, %d violation(s)" % (results[-1].get("goodput"),
                                               len(results[-1].get("violations", []))))
    text = report(o, schedule, results, baselines)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        for res in results + [dict(b, baseline=True) for b in baselines.values()]:
            res = {k: v for k, v in res.items() if k != "timeline"}
            f.write(json.dumps(dict(res, schedule=schedule), default=str) + "\n")
    log("")
    log(text)
    bad = [(r["mode"], v) for r in results + list(baselines.values())
           for v in r.get("violations", []) if r["mode"] != "torchrun"]
    if bad:
        log("")
        for mode, v in bad:
            log("chaos: INVARIANT VIOLATED (%s): %s" % (LABELS[mode], v))
        return 1
    log("chaos: every invariant held (%s)" % ", ".join(LABELS[m] for m in modes
                                                      if m != "torchrun"))
    if o.short and not o.out:  # CI: keep the logs of a failed run only
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
