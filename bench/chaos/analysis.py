"""A chaos run's numbers and invariants, from its sample logs and its Run result.

Sample log lines (examples/pytorch_in_place/train.py --sample_log --chaos_fields), one per
rank per completed step:
    round=R epoch=E step=S rank=K idx=a,b,... t=T world=W pos=P params=C
A step may be written more than once: a restart from a checkpoint redoes the steps after it.
The lines of one step form *versions*: in time order, a line starts a new version when its
rank already wrote one in the current version. The last version is the one kept; the earlier
ones were trained and thrown away.

Goodput = time in kept steps / wall time. A kept step's time is the gap from the previous kept
step (by completion time, the last rank's line), capped at twice the run's median gap: a
stall, a recovery or redone work is not step time. Wall time runs from the agents' launch to
the SIGTERM at the end. Against an undisturbed run of the same length (the baseline, same
way), relative goodput = goodput / its goodput. Time lost in the window from one fault to the
next (or to the end) = window x the baseline's steady fraction (its step time over its wall
time after the first step) - the kept step time in the window; beyond the fault's own length
= that minus the blip's or pause's seconds.
"""
import os
import re
import statistics

LINE = re.compile(r"^round=(\d+) epoch=(\d+) step=(\d+) rank=(\d+) idx=([0-9,]*) t=([0-9.]+) "
                  r"world=(\d+) pos=(\d+) params=(-?\d+)$")
KILLING = ("worker_crash", "worker_hang", "agent_kill", "host_kill", "cut", "pause")


def read_lines(samples_dir):
    """(lines, torn): parsed lines; lines that did not parse (a torn last line of a killed
    process) as (file, text)."""
    lines, torn = [], []
    if not os.path.isdir(samples_dir):
        return lines, torn
    for name in sorted(os.listdir(samples_dir)):
        with open(os.path.join(samples_dir, name), errors="replace") as f:
            for text in f:
                m = LINE.match(text.rstrip("\n"))
                if not m or not text.endswith("\n"):
                    torn.append((name, text.rstrip("\n")[:120]))
                    continue
                lines.append({"file": name, "round": int(m.group(1)), "epoch": int(m.group(2)),
                              "step": int(m.group(3)), "rank": int(m.group(4)),
                              "idx": [int(i) for i in m.group(5).split(",") if i],
                              "t": float(m.group(6)), "world": int(m.group(7)),
                              "pos": int(m.group(8)), "params": int(m.group(9))})
    return lines, torn


def versions(lines):
    """{step: [version, ...]} in time order; a version is a list of lines. The lines of one
    version share the round, world and position (a redone step differs in one of
    them, or repeats a rank), however their times interleave with another version's."""
    groups = {}
    for line in sorted(lines, key=lambda x: x["t"]):
        key = (line["step"], line["round"], line["world"], line["pos"])
        vs = groups.setdefault(key, [])
        if not vs or any(o["rank"] == line["rank"] for o in vs[-1]):
            vs.append([line])
        else:
            vs[-1].append(line)
    by_step = {}
    for key, vs in groups.items():
        by_step.setdefault(key[0], []).extend(vs)
    for vs in by_step.values():
        vs.sort(key=lambda v: v[0]["t"])
    return by_step


def near_fault(t, events, t0, after_s):
    """Whether time t (absolute) is within a process-killing fault's reach: from a second
    before it to after_s after it (a rank killed between its optimizer step and its line)."""
    for ev in events:
        if ev["kind"] in KILLING and "skipped" not in ev:
            ft = t0 + ev["t"]
            if ft - 1.0 <= t <= ft + after_s + ev.get("length", 0):
                return True
    return False


def analyse(res, samples_dir, batch, rows, hang_timeout):
    """Adds kept steps, goodput inputs and invariant violations to res."""
    # A run that stopped early lost the rest of its planned time.
    t0, launched = res["t0"], res["launched"]
    end = max(res["end"], res.get("planned_end", res["end"]))
    lines, torn = read_lines(samples_dir)
    by_step = versions(lines)
    kept = {s: vs[-1] for s, vs in by_step.items()}
    violations = []
    notes = res.setdefault("notes", [])
    res["lines"] = len(lines)
    res["steps_kept"] = len(kept)
    res["steps_thrown_away"] = sum(len(vs) - 1 for vs in by_step.values())
    if torn:
        notes.append("%d torn or unparsable sample-log line(s) (a process killed mid-write), "
                     "first: %s" % (len(torn), torn[0]))
    if not kept:
        violations.append("no step was trained")
        res["violations"] = violations
        res["kept_time_s"] = 0.0
        res["timeline"] = []
        return res

    # Every step from the first to the last has a kept version; every rank of its world wrote.
    steps = sorted(kept)
    missing_steps = [s for s in range(steps[0], steps[-1] + 1) if s not in kept]
    if missing_steps:
        violations.append("steps with no line on any rank (lost from the logs): %s" %
                          missing_steps[:10])
    for s in steps:
        v = kept[s]
        world = v[0]["world"]
        ranks = sorted(line["rank"] for line in v)
        if any(line["world"] != world for line in v):
            violations.append("step %d: its ranks disagree on the world size: %s" %
                              (s, sorted({line["world"] for line in v})))
        if ranks != list(range(world)):
            t_done = max(line["t"] for line in v)
            # The SIGTERM at the end stops a rank between its optimizer step and its line too.
            if near_fault(t_done, res["events"], t0, hang_timeout + 5) or \
                    t_done >= res["end"] - 1.0:
                notes.append("step %d: ranks %s of %d wrote (a rank killed by a fault or the "
                             "final SIGTERM right after its optimizer step)" % (s, ranks, world))
            else:
                violations.append("step %d: ranks %s of world %d wrote lines (lost from the "
                                  "logs)" % (s, ranks, world))
        if len({line["params"] for line in v}) > 1:
            violations.append("step %d: parameters out of sync: checksums %s by rank" % (
                s, {line["rank"]: line["params"] for line in v}))

    # No sample trained twice or skipped: per epoch, kept steps continue each other's position
    # and no index repeats; an epoch starts at position 0 and ends with less than a batch per
    # rank left.
    seen = {}
    prev = None
    for s in steps:
        v = kept[s]
        epoch, pos, world = v[0]["epoch"], v[0]["pos"], v[0]["world"]
        if any(line["pos"] != pos or line["epoch"] != epoch for line in v):
            violations.append("step %d: ranks disagree on the epoch or position" % s)
        if prev is None or prev["epoch"] != epoch:
            if prev is not None:
                left = rows - (prev["pos"] + prev["world"] * batch)
                if left >= prev["world"] * batch:
                    violations.append("epoch %d ended at position %d with %d samples left "
                                      "(skipped)" % (prev["epoch"], prev["pos"] + prev["world"] *
                                                     batch, left))
            if pos != 0 and s != steps[0]:
                violations.append("epoch %d starts at position %d (samples skipped)" %
                                  (epoch, pos))
        elif pos != prev["pos"] + prev["world"] * batch:
            what = "skipped" if pos > prev["pos"] + prev["world"] * batch else "trained twice"
            violations.append("step %d (epoch %d): position %d after step %d at %d with world %d:"
                              " samples %s" % (s, epoch, pos, prev["step"], prev["pos"],
                                               prev["world"], what))
        ep = seen.setdefault(epoch, set())
        for line in v:
            dup = ep.intersection(line["idx"])
            if dup:
                violations.append("epoch %d step %d rank %d: samples trained twice: %s" % (
                    epoch, s, line["rank"], sorted(dup)[:8]))
            ep.update(line["idx"])
        prev = {"epoch": epoch, "pos": pos, "world": world, "step": s}

    # The timeline of kept steps and the kept step time.
    done = sorted((max(line["t"] for line in kept[s]), s, kept[s][0]["world"]) for s in steps)
    gaps = [b[0] - a[0] for a, b in zip(done, done[1:])]
    median = statistics.median(gaps) if gaps else 0.0
    cap = 2 * median
    timeline = [(done[0][0], median, done[0][2])]
    for (ta, _, _), (tb, _, w) in zip(done, done[1:]):
        timeline.append((tb, min(tb - ta, cap), w))
    res["timeline"] = timeline
    res["median_step_s"] = round(median, 4)
    res["kept_time_s"] = round(sum(x[1] for x in timeline), 2)
    res["wall_s"] = round(end - launched, 2)
    res["goodput"] = round(res["kept_time_s"] / res["wall_s"], 4) if res["wall_s"] > 0 else 0
    steady = end - done[0][0]
    res["steady_fraction"] = round(sum(x[1] for x in timeline) / steady, 4) if steady > 0 else 0
    res["last_step_s"] = round(done[-1][0] - t0, 2)
    res["violations"] = violations
    return res


def kept_in(timeline, a, b):
    return sum(d for t, d, _ in timeline if a < t <= b)


def per_fault(res, steady_fraction):
    """Time lost in each fault's window (to the next fault or the end), beyond its own
    length, at the baseline's steady fraction of step time; the first kept step after it."""
    t0, end = res["t0"], max(res["end"], res.get("planned_end", res["end"]))
    evs = [e for e in res["events"]]
    out = []
    for i, ev in enumerate(evs):
        a = t0 + ev["t"]
        b = t0 + evs[i + 1]["t"] if i + 1 < len(evs) else end
        kept = kept_in(res.get("timeline", []), a, b)
        lost = (b - a) * steady_fraction - kept
        nxt = [t for t, _, _ in res.get("timeline", []) if t > a]
        out.append({"kind": ev["kind"], "node": ev.get("node"), "t": ev["t"],
                    "length": ev["length"], "window_s": round(b - a, 1),
                    "lost_s": round(lost, 2), "beyond_s": round(lost - ev["length"], 2),
                    "next_step_s": round(nxt[0] - a, 2) if nxt else None,
                    "skipped": ev.get("skipped")})
    return out


def check_exits(res, strict):
    """Every agent not killed by the harness exits with the job's outcome: 143 (the SIGTERM
    that ends the run) when the job was still running then; the job must not end before."""
    v = res.setdefault("violations", [])
    if "stopped" in res:
        (v if strict else res["notes"]).append("the job stopped early: " + res["stopped"])
    codes = {s: a["exit"] for s, a in res["agents"].items() if a["fate"] != "killed"}
    expected = 143 if "stopped" not in res else None
    if expected is None and codes:
        expected = statistics.mode(codes.values())
    res["outcome"] = expected
    wrong = {s: c for s, c in codes.items() if c != expected}
    if wrong:
        v.append("agents whose exit status is not the job's outcome (%s): %s" % (
            expected, ", ".join("node %s exit %s" % kv for kv in sorted(wrong.items()))))
    if res.get("orphans"):
        v.append("processes left in the hosts' namespaces after every agent exited: %s" % (
            "; ".join("node %d pid %d %s" % (o["node"], o["pid"], o["cmd"])
                      for o in res["orphans"][:6])))
    if res.get("hung_agents"):
        v.append("agents still running long after SIGTERM: nodes %s" % res["hung_agents"])
