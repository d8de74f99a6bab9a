"""Reads what scripts/gpu/run.sh's steps wrote and prints or writes the results (docs/gpu.md).

  summarize.py compare NAME NATIVE.jsonl TORCH.jsonl   build/train against torch_mlp.py
  summarize.py launch DIR TIMED.txt                    ddplaunch against torchrun
  summarize.py store STORE.txt                         ddpstore against PyTorch's TCPStore
  summarize.py init INIT.txt                           init.sh: N ranks' init, ours and PyTorch's
  summarize.py final WORK OUT DRY                      OUT/summary.{txt,json} from every step

The step commands print "result key=value ..." lines; `final` collects them per step from
WORK/<step>.step.log, with WORK/steps.txt (name outcome seconds rc [note]).
"""
import json
import os
import statistics
import sys


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rate_median(train_records):
    """Median samples/s over the logged intervals after the first (warm-up)."""
    rates = [r["samples_per_s"] for r in train_records]
    return statistics.median(rates[1:] if len(rates) > 1 else rates) if rates else 0.0


def compare(name, native_path, torch_path):
    out = {}
    curves = {}
    missing = []
    for who, path in (("native", native_path), ("torch", torch_path)):
        recs = read_jsonl(path) if os.path.exists(path) else []
        train = [r for r in recs if r.get("kind") == "train"]
        val = [r for r in recs if r.get("kind") == "val"]
        if not train:
            missing.append(who)
            continue
        out[f"{name}_{who}_samples_per_s"] = round(rate_median(train))
        out[f"{name}_{who}_final_loss"] = round(train[-1]["loss"], 4)
        if val:
            out[f"{name}_{who}_val_accuracy"] = round(val[-1]["accuracy"], 4)
        curves[who] = {r["step"]: r["loss"] for r in train}
    if missing:
        print("result " + " ".join(f"{k}={v}" for k, v in out.items()) +
              f" {name}_no_records={','.join(missing)}")
        raise SystemExit(f"compare {name}: no train records from {', '.join(missing)}")
    if out[f"{name}_torch_samples_per_s"]:
        out[f"{name}_native_over_torch"] = round(
            out[f"{name}_native_samples_per_s"] / out[f"{name}_torch_samples_per_s"], 2)
    steps = sorted(set(curves["native"]) & set(curves["torch"]))
    curve = [[s, round(curves["native"][s], 4), round(curves["torch"][s], 4)] for s in steps]
    print("result " + " ".join(f"{k}={v}" for k, v in out.items()))
    print("curve " + json.dumps({name: curve}))


def launch(directory, timed_path):
    timed = {}
    with open(timed_path) as f:
        for line in f:
            name, seconds, rc = line.split()
            timed[name] = (float(seconds), int(rc))
    out = {}
    for what in ("launch", "restart"):
        for who in ("ddplaunch", "torchrun"):
            runs = [s for n, (s, rc) in timed.items() if n.startswith(f"{what}_{who}_") and rc == 0]
            failed = [n for n, (s, rc) in timed.items() if n.startswith(f"{what}_{who}_") and rc != 0]
            if runs:
                out[f"{what}_{who}_wall_s"] = round(statistics.median(runs), 3)
            if failed:
                out[f"{what}_{who}_failed"] = ",".join(failed)
    # Per launcher: launcher start -> worker script start is not visible here (no launcher
    # timestamp), so the worker-side numbers are: init (start -> init_process_group returned)
    # and, for restarts, crash (attempt 0 exit) -> attempt 1 start and -> attempt 1 ready.
    for who in ("ddplaunch", "torchrun"):
        inits, to_start, to_ready = [], [], []
        for fname in sorted(os.listdir(directory)):
            if not fname.startswith(f"times-{who}") or not fname.endswith(".jsonl"):
                continue
            recs = read_jsonl(os.path.join(directory, fname))
            inits += [r["init"] - r["start"] for r in recs]
            first = [r for r in recs if r["attempt"] == 0 and r["failing"]]
            second = [r for r in recs if r["attempt"] == 1]
            if first and second:
                to_start.append(second[0]["start"] - first[0]["exit"])
                to_ready.append(second[0]["allreduce"] - first[0]["exit"])
        if inits:
            out[f"{who}_worker_init_s"] = round(statistics.median(inits), 3)
        if to_start:
            out[f"restart_{who}_crash_to_worker_start_s"] = round(statistics.median(to_start), 3)
            out[f"restart_{who}_crash_to_allreduce_s"] = round(statistics.median(to_ready), 3)
    # The environment each launcher gave rank 0 of its first plain launch.
    envs = {}
    for who in ("ddplaunch", "torchrun"):
        path = os.path.join(directory, f"env-{who}-r0-a0.json")
        if os.path.exists(path):
            with open(path) as f:
                envs[who] = json.load(f)
    diff = {}
    if len(envs) == 2:
        a, b = envs["ddplaunch"], envs["torchrun"]
        for key in sorted(set(a) | set(b)):
            if key != "_" and a.get(key) != b.get(key):  # "_": the shell's last command
                diff[key] = {"ddplaunch": a.get(key), "torchrun": b.get(key)}
                if "SECRET" in key:  # the job's one-off secret: its presence, not its value
                    diff[key] = {k: v and "(set)" for k, v in diff[key].items()}
        out["env_keys_only_ddplaunch"] = ",".join(k for k in diff if k not in b) or "none"
        out["env_keys_only_torchrun"] = ",".join(k for k in diff if k not in a) or "none"
        out["env_keys_differing"] = ",".join(k for k in diff if k in a and k in b) or "none"
    print("result " + " ".join(f"{k}={v}" for k, v in out.items()))
    print("envdiff " + json.dumps(diff))


def store(path):
    runs = {"ours": [], "torch": []}
    with open(path) as f:
        for line in f:
            fields = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
            if "p99_us" in fields:
                runs[fields["server"]].append(fields)
    out = {}
    for server, rows in runs.items():
        if rows:
            out[f"store_{server}_clients"] = rows[0]["clients"]
            out[f"store_{server}_p99_us"] = statistics.median(float(r["p99_us"]) for r in rows)
            out[f"store_{server}_req_per_s"] = statistics.median(
                float(r["req_per_s"]) for r in rows)
    if out.get("store_ours_p99_us") and out.get("store_torch_p99_us"):
        out["store_p99_ours_over_torch"] = round(
            out["store_ours_p99_us"] / out["store_torch_p99_us"], 3)
    if not runs["ours"] or not runs["torch"]:
        print("result " + " ".join(f"{k}={v}" for k, v in out.items()))
        raise SystemExit("store: a server produced no measurement")
    print("result " + " ".join(f"{k}={v}" for k, v in out.items()))


def init(path):
    """scripts/bench/init.sh's run lines: time, server CPU and peak RSS per server."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 4 or parts[0] != "run":
                continue
            server = parts[2]
            fields = dict(p.split("=", 1) for p in parts[4:] if "=" in p)
            out["init_ranks"] = fields["ranks"]
            if parts[3] == "timeout":
                out[f"init_{server}_s"] = f"over_{fields['limit_s']}"
                continue
            out[f"init_{server}_s"] = float(fields["seconds"])
            out[f"init_{server}_server_cpu_s"] = float(fields["server_cpu_s"])
            out[f"init_{server}_server_peak_rss_mib"] = round(float(fields["server_hwm_kib"]) / 1024, 1)
            for phase in ("connect", "init", "exchange", "barrier"):
                out[f"init_{server}_{phase}_p99_ms"] = float(fields[f"{phase}_p99_ms"])
    if isinstance(out.get("init_ours_s"), float) and isinstance(out.get("init_torch_s"), float):
        out["init_torch_over_ours"] = round(out["init_torch_s"] / out["init_ours_s"], 2)
    print("result " + " ".join(f"{k}={v}" for k, v in out.items()))
    if not isinstance(out.get("init_ours_s"), float):
        raise SystemExit("init: no measurement of ours")


def final(work, out_dir, dry):
    steps = []
    path = os.path.join(work, "steps.txt")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                name, outcome, seconds, rc, *note = line.split()
                steps.append({"step": name, "outcome": outcome, "seconds": int(seconds),
                              "rc": int(rc), "note": " ".join(note)})
    extra = {}
    for s in steps:
        log = os.path.join(work, f"{s['step']}.step.log")
        results, curves, envdiff = {}, {}, None
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                for line in f:
                    if line.startswith("result "):
                        for pair in line.split()[1:]:
                            if "=" in pair:
                                k, v = pair.split("=", 1)
                                results[k] = v
                    elif line.startswith("curve "):
                        curves.update(json.loads(line[6:]))
                    elif line.startswith("envdiff "):
                        envdiff = json.loads(line[8:])
        s["results"] = results
        if curves:
            extra["loss_curves"] = {**extra.get("loss_curves", {}), **curves}
        if envdiff is not None:
            extra["env_diff"] = envdiff
    summary = {"dry_run": dry == "1", "steps": steps, **extra}
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out_dir, "summary.txt"), "w") as f:
        f.write(f"GPU run{' (dry run)' if dry == '1' else ''}: step outcome seconds results\n")
        for s in steps:
            res = " ".join(f"{k}={v}" for k, v in s["results"].items())
            f.write(f"{s['step']:10} {s['outcome']:8} {s['seconds']:4} {s['note']} {res}\n")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"compare": compare, "launch": launch, "store": store, "init": init, "final": final}[cmd](*args)


if __name__ == "__main__":
    main()
