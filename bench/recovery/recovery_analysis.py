"""The numbers of scripts/bench/recovery.sh's runs (issue 18), apart from running them:
the step records of one run (arrival time, node, step, samples, world), its lost time,
redone steps and agents' events, and the markdown table of all runs.
See recovery_bench.py for what each number means."""
import json
import os
import re
import statistics

TORCH_STEP = re.compile(r"step=(\d+) samples=(\d+) world=(\d+)")
TRAIN_STEP = re.compile(r"\[train\] epoch (\d+) step (\d+) ")


def read_jsonl(path):
    """The JSON records of a .jsonl file, skipping lines that do not parse; none when the file
    does not exist (a node that never wrote one)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for raw in f:
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
    return out


def torch_lines(variant):
    """Whether the variant's step lines are torch_ddp_recovery.py's ("step= samples= world="):
    the PyTorch ways (torch, and pt_* running examples/pytorch_in_place/train.py)."""
    return variant == "torch" or variant.startswith("pt_")


def step_of(variant, line):
    """The step number of a step line, or None for any other line."""
    m = (TORCH_STEP if torch_lines(variant) else TRAIN_STEP).search(line)
    if not m:
        return None
    return int(m.group(1)) if torch_lines(variant) else int(m.group(2))


def step_records(args, variant, n, run_dir, seen):
    """(arrival, node, step, samples, world or None) for every step line, in arrival order."""
    out = []
    counts = {}
    metrics = {}
    for t, idx, text in sorted(seen, key=lambda x: x[0]):
        if torch_lines(variant):
            m = TORCH_STEP.search(text)
            if m:
                out.append((t, idx, int(m.group(1)), int(m.group(2)), int(m.group(3))))
            continue
        if not TRAIN_STEP.search(text):
            continue
        if idx not in metrics:
            path = os.path.join(run_dir, f"metrics.{idx}.jsonl")
            metrics[idx] = [r for r in read_jsonl(path) if r.get("kind") == "train"]
        j = counts.get(idx, 0)
        counts[idx] = j + 1
        recs = metrics[idx]
        if j >= len(recs):
            continue
        rec = recs[j]
        # The world of this step: its samples over the node's previous record's.
        world = None
        if j > 0:
            delta = rec["samples_seen"] - recs[j - 1]["samples_seen"]
            if delta > 0 and delta % args.batch_size == 0:
                world = delta // args.batch_size
        out.append((t, idx, int(rec["step"]), int(rec["samples_seen"]), world))
    return out


def analyse(args, variant, n, run_dir, seen, t_kill, victim):
    recs = step_records(args, variant, n, run_dir, seen)
    before = [r for r in recs if r[0] <= t_kill]
    res = {}
    if len(before) >= 6:
        gaps = [b[0] - a[0] for a, b in zip(before[-6:], before[-5:])]
        res["step_ms"] = round(1e3 * statistics.median(gaps), 3)
    first, pre = None, []
    for r in recs:
        t, idx, _, _, world = r
        post = t > t_kill and idx != victim and (world is None or world != n)
        if torch_lines(variant):
            post = t > t_kill and world == n - 1
        if post:
            first = r
            break
        pre.append(r)
    if first is None:
        res["error"] = "no step without the lost node after the kill"
        return res
    res["lost_ms"] = round(1e3 * (first[0] - t_kill), 1)
    if variant not in ("torch", "pt_torchrun"):
        res.update(agent_events(run_dir, n, victim, t_kill))
    res["first_step_after"] = first[2]
    res["in_flight_steps"] = sum(1 for r in pre if r[0] > t_kill)
    last_pre = max(r[3] for r in pre) if pre else 0
    started_at = first[3] - args.batch_size * (n - 1)
    res["steps_redone"] = round((last_pre - started_at) / (args.batch_size * n), 2)
    # The whole cost: until the survivors are back where the job was when the node died.
    caught = [r for r in recs[recs.index(first):] if r[1] != victim and r[3] >= last_pre]
    if caught:
        res["caught_up_ms"] = round(1e3 * (caught[0][0] - t_kill), 1)
    return res


def agent_events(run_dir, n, victim, t_kill):
    """Where the survivors' time went, from their agents' --events_file (ms after the kill):
    told_ms, the last survivor told of the loss (membership_change or failure); respawn_ms,
    the last survivor's new worker started (absent when the workers were kept)."""
    told, respawn = [], []
    for i in range(n):
        if i == victim:
            continue
        t_told = t_start = None
        for e in read_jsonl(os.path.join(run_dir, f"events.{i}")):
            t = e.get("time", 0)
            if t <= t_kill:
                continue
            if t_told is None and e.get("event") in ("membership_change", "failure"):
                t_told = t
            if t_start is None and e.get("event") == "worker_start":
                t_start = t
        told.append(t_told)
        respawn.append(t_start)
    out = {}
    if told and None not in told:
        out["told_ms"] = round(1e3 * (max(told) - t_kill), 1)
    if respawn and None not in respawn:
        out["respawn_ms"] = round(1e3 * (max(respawn) - t_kill), 1)
    return out


def median_range(vals):
    if not vals:
        return None, "-"
    m = statistics.median(vals)
    return m, f"{m:.1f} ({min(vals):.1f} to {max(vals):.1f})"


def ratio(a, b):
    if not (a and b):
        return "-"
    return f"{a / b:.2f}x" if a / b >= 0.1 else f"{a / b:.4f}x"


def table(results, variants, node_counts):
    labels = {"torch": "(a) torchrun 1.13, worker restart + torch.load",
              "restart": "(b) ddplaunch, process restart + checkpoint reload",
              "inplace": "(c) ddplaunch --in_place_recovery",
              "pt_torchrun": "(d) PyTorch 2.x script, torchrun 2.x restart + checkpoint",
              "pt_restart": "(e) PyTorch 2.x script, ddplaunch process restart + checkpoint",
              "pt_inplace": "(f) PyTorch 2.x script, ddplaunch --in_place_recovery "
                            "(ddplaunch_recovery)"}
    rows = ["| way | nodes | runs ok | time lost, ms: median (min to max) | steps redone (median) "
            "| back at the pre-loss position, ms | in-flight steps (median) | step ms before "
            "| survivors told, ms | new workers started, ms | (b) or (e) / this "
            "| (a) or (d) / this |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    med = {}
    for v in variants:
        for n in node_counts:
            ok = [r for r in results if r["variant"] == v and r["nodes"] == n and "lost_ms" in r]
            med[(v, n)] = median_range([r["lost_ms"] for r in ok])[0]
    for v in variants:
        for n in node_counts:
            all_runs = [r for r in results if r["variant"] == v and r["nodes"] == n]
            ok = [r for r in all_runs if "lost_ms" in r]
            _, lost = median_range([r["lost_ms"] for r in ok])
            redone = statistics.median([r["steps_redone"] for r in ok]) if ok else "-"
            inflight = statistics.median([r["in_flight_steps"] for r in ok]) if ok else "-"
            steps = [r["step_ms"] for r in ok if "step_ms" in r]
            step_ms = f"{statistics.median(steps):.2f}" if steps else "-"
            caught = median_range([r["caught_up_ms"] for r in ok if "caught_up_ms" in r])[1]
            told = median_range([r["told_ms"] for r in ok if "told_ms" in r])[1]
            respawn = median_range([r["respawn_ms"] for r in ok if "respawn_ms" in r])[1]
            # The PyTorch 2.x ways compare with their own restarts.
            pt = v.startswith("pt_")
            vs_b = ratio(med.get(("pt_restart" if pt else "restart", n)), med[(v, n)])
            vs_a = ratio(med.get(("pt_torchrun" if pt else "torch", n)), med[(v, n)])
            rows.append(f"| {labels[v]} | {n} | {len(ok)}/{len(all_runs)} | {lost} | {redone} | "
                        f"{caught} | {inflight} | {step_ms} | {told} | {respawn} | {vs_b} | "
                        f"{vs_a} |")
    return "\n".join(rows)
