"""The numbers of scripts/bench/recovery.sh's runs, apart from running them:
the step records of one run (arrival time, node, step, samples, world), its lost time,
redone steps and agents' events, and the markdown table of all runs.
See recovery_bench.py for what each number means."""
import json
import os
import re
import statistics

TORCH_STEP = re.compile(r"step=(\d+) samples=(\d+) world=(\d+)(?: round=(\d+))?")
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


def spare_way(variant):
    """pt_spare_hot, pt_spare_cold: a fixed-size group of n nodes and one spare (node n) that
    takes the lost node's place: the world stays n, the round tells the steps after the loss."""
    return variant.startswith("pt_spare_")


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
    """(arrival, node, step, samples, world or None, round or None) for every step line, in
    arrival order."""
    out = []
    counts = {}
    metrics = {}
    for t, idx, text in sorted(seen, key=lambda x: x[0]):
        if torch_lines(variant):
            m = TORCH_STEP.search(text)
            if m:
                rnd = int(m.group(4)) if m.group(4) is not None else None
                out.append((t, idx, int(m.group(1)), int(m.group(2)), int(m.group(3)), rnd))
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
        out.append((t, idx, int(rec["step"]), int(rec["samples_seen"]), world, None))
    return out


def analyse(args, variant, n, run_dir, seen, t_kill, victim):
    recs = step_records(args, variant, n, run_dir, seen)
    before = [r for r in recs if r[0] <= t_kill]
    res = {}
    if len(before) >= 6:
        gaps = [b[0] - a[0] for a, b in zip(before[-6:], before[-5:])]
        res["step_ms"] = round(1e3 * statistics.median(gaps), 3)
    first, pre = None, []
    # A spare keeps the world at n: a step after the loss is one of a later round.
    killed_in = max((r[5] for r in before if r[5] is not None), default=0)
    for r in recs:
        t, idx, _, _, world, rnd = r
        post = t > t_kill and idx != victim and (world is None or world != n)
        if torch_lines(variant):
            post = t > t_kill and world == n - 1
        if spare_way(variant):
            post = t > t_kill and world == n and rnd is not None and rnd > killed_in
        if post:
            first = r
            break
        pre.append(r)
    if first is None:
        res["error"] = "no step without the lost node after the kill"
        return res
    res["lost_ms"] = round(1e3 * (first[0] - t_kill), 1)
    if variant not in ("torch", "pt_torchrun"):
        res.update(agent_events(run_dir, n + (1 if spare_way(variant) else 0), victim, t_kill))
    res["first_step_after"] = first[2]
    res["in_flight_steps"] = sum(1 for r in pre if r[0] > t_kill)
    last_pre = max(r[3] for r in pre) if pre else 0
    started_at = first[3] - args.batch_size * (n if spare_way(variant) else n - 1)
    res["steps_redone"] = round((last_pre - started_at) / (args.batch_size * n), 2)
    # The whole cost: until the survivors are back where the job was when the node died.
    caught = [r for r in recs[recs.index(first):] if r[1] != victim and r[3] >= last_pre]
    if caught:
        res["caught_up_ms"] = round(1e3 * (caught[0][0] - t_kill), 1)
    return res


def agent_events(run_dir, n, victim, t_kill):
    """Where the survivors' time went, from their agents' --events_file (ms after the kill):
    told_ms, the last survivor told of the loss (membership_change, failure or store_lost,
    whichever comes first; a spare: its admission); respawn_ms, the last new worker started
    after the loss (absent when every worker was kept, a hot spare's included)."""
    told, respawn = [], []
    for i in range(n):
        if i == victim:
            continue
        t_told = t_start = None
        for e in read_jsonl(os.path.join(run_dir, f"events.{i}")):
            t = e.get("time", 0)
            if t <= t_kill:
                continue
            if t_told is None and e.get("event") in ("membership_change", "failure",
                                                     "store_lost", "spare_admitted"):
                t_told = t
            if t_start is None and e.get("event") == "worker_start":
                t_start = t
        told.append(t_told)
        respawn.append(t_start)
    out = {}
    if told and None not in told:
        out["told_ms"] = round(1e3 * (max(told) - t_kill), 1)
    started = [t for t in respawn if t is not None]
    if started:  # a cold spare's worker is the only one started after the loss
        out["respawn_ms"] = round(1e3 * (max(started) - t_kill), 1)
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
                            "(ddplaunch_recovery)",
              "pt_spare_hot": "(g) as (f), --nnodes n:n and a hot spare takes the lost place",
              "pt_spare_cold": "(h) as (g), --spare_workers cold (started at admission)"}
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


SAMPLE_LINE = re.compile(r"round=(\d+) epoch=(\d+) step=(\d+) rank=(\d+) idx=([0-9,]*)$")


def sample_check(args, run_dir, seen, victim_pids):
    """Samples trained twice or skipped, from the workers' --sample_log files (samples/pid<pid>,
    one line per step a rank completed: round, epoch, step, rank, the batch's indices).

    The survivors resume from the last step every one of them completed (docs/recovery.md,
    "state sent"): a rank a step ahead, and the victim, lose that step. So a step of a round
    counts when the next round's first step is later (every step of the last round counts),
    with every rank's batch: the victim's too, since the all-reduce needed it, even when the
    victim died before logging it. Checked in epoch 0, up to the last step every rank of the
    last round logged and rank 0 printed (its samples= is the position P):
    twice = indices logged more than once over the counted steps; skipped = P - the distinct
    indices - the batches of counted steps' ranks that did not log them (victim_lines_missing).
    """
    folder = os.path.join(run_dir, "samples")
    lines = []  # (round, epoch, step, rank, indices, from the victim)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        victim = name.startswith("pid") and name[3:].isdigit() and int(name[3:]) in victim_pids
        with open(os.path.join(folder, name)) as f:
            for raw in f:
                m = SAMPLE_LINE.match(raw.strip())
                if m:
                    lines.append((int(m.group(1)), int(m.group(2)), int(m.group(3)),
                                  int(m.group(4)), [int(i) for i in m.group(5).split(",") if i],
                                  victim))
    if not lines or any(line[1] != 0 for line in lines):
        return {}
    rounds = sorted({line[0] for line in lines})
    last = rounds[-1]
    last_ranks = {line[3] for line in lines if line[0] == last}
    s_end = min(max(line[2] for line in lines if line[0] == last and line[3] == r)
                for r in last_ranks)
    position = {}  # step -> samples= of rank 0's last line for it (a redone step's new one)
    for _, _, text in sorted(seen, key=lambda x: x[0]):
        m = TORCH_STEP.search(text)
        if m:
            position[int(m.group(1))] = int(m.group(2))
    printed = [s for s in position if s <= s_end]
    if not printed:
        return {}
    s_end = max(printed)
    world = {}  # round -> its ranks
    for line in lines:
        world.setdefault(line[0], set()).add(line[3])
    # Steps of round r below `kept[r]` are in the state the next round resumed from.
    kept = {r: min(line[2] for line in lines if line[0] == nxt)
            for r, nxt in zip(rounds, rounds[1:])}
    groups = {}
    for line in lines:
        if line[2] <= s_end and (line[0] == last or line[2] < kept[line[0]]):
            groups.setdefault((line[0], line[2]), []).append(line)
    indices = [i for g in groups.values() for line in g for i in line[4]]
    missing = sum(len(world[r]) - len(g) for (r, _), g in groups.items())
    distinct = len(set(indices))
    return {"samples_checked": position[s_end], "samples_twice": len(indices) - distinct,
            "samples_skipped": position[s_end] - distinct - missing * args.batch_size,
            "victim_lines_missing": missing,
            "steps_rolled_back": sum(1 for line in lines if line[0] != last and not line[5]
                                     and line[2] >= kept[line[0]])}


def store_loss_table(results, cases, node_counts):
    """Medians per case (way:victim:backend), with each case's time lost over that of its way
    losing a member on c10d in the same run; for a job lost, its survivors' exits."""
    ways = {"inplace": "ddplaunch --in_place_recovery, build/train",
            "restart": "ddplaunch, build/train", "torch": "torchrun 1.13",
            "pt_inplace": "ddplaunch --in_place_recovery", "pt_restart": "ddplaunch (restart)",
            "pt_torchrun": "torchrun 2.x"}
    victims = {"member": "a member", "store_host": "the store's host"}
    rows = ["| case | nodes | runs ok | time lost, ms: median (min to max) | / member's loss "
            "| survivors told, ms | step ms before | samples trained twice (all runs) "
            "| samples skipped (all runs) | victim held group rank 0 | job lost "
            "| survivors exited after, ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in cases:
        variant, victim, backend = name.split(":")
        for n in node_counts:
            runs = [r for r in results if r.get("case") == name and r["nodes"] == n]
            ok = [r for r in runs if "lost_ms" in r]
            med, lost = median_range([r["lost_ms"] for r in ok])
            ref = [r["lost_ms"] for r in results if r.get("case") == f"{variant}:member:c10d"
                   and r["nodes"] == n and "lost_ms" in r]
            vs = f"{med / statistics.median(ref):.2f}x" if med and ref else "-"
            told = median_range([r["told_ms"] for r in ok if "told_ms" in r])[1]
            steps = [r["step_ms"] for r in ok if "step_ms" in r]
            step_ms = f"{statistics.median(steps):.2f}" if steps else "-"
            checked = [r for r in runs if "samples_twice" in r]
            twice = sum(r["samples_twice"] for r in checked) if checked else "-"
            skipped = sum(r["samples_skipped"] for r in checked) if checked else "-"
            rank0 = sum(1 for r in runs if "victim" in r and r["victim"] == r["printer_before"])
            lost_runs = [r for r in runs if r.get("job_lost")]
            exits = median_range([r["survivors_exit_ms"] for r in runs
                                  if "survivors_exit_ms" in r])[1]
            rows.append(f"| {ways.get(variant, variant)}, {victims[victim]} lost, {backend} | "
                        f"{n} | {len(ok)}/{len(runs)} | {lost} | {vs} | {told} | {step_ms} | "
                        f"{twice} | {skipped} | {rank0}/{len(runs)} | "
                        f"{len(lost_runs)}/{len(runs)} | {exits} |")
    return "\n".join(rows)
