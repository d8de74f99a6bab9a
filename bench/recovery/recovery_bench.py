"""Training time lost per node loss, driven by scripts/bench/recovery.sh.

N simulated nodes on loopback (one agent each, --nproc_per_node 1, a c10d rendezvous with
--nnodes N-1:N), the same MLP and data; once the step lines show step --kill_step, one node
(not node 0, the store's host, and not the rank printing the steps where N > 2 leaves a
choice) is SIGKILLed whole: its agent's process group and every process under the agent
(ddplaunch puts workers in process groups of their own). Three ways:
  torch    PyTorch 1.13 DDP (gloo) under Debian's torchrun, worker restart (--max_restarts)
           and checkpoint resume (bench/recovery/torch_ddp_recovery.py)
  restart  ddplaunch + build/train, default mode: process restart + checkpoint reload
  inplace  ddplaunch --in_place_recovery + build/train: the survivors re-form in place
and the same three for a PyTorch 2.x DDP script (examples/pytorch_in_place/train.py, gloo,
the venv of --torch_python):
  pt_torchrun  the venv's torchrun, worker restart (--max_restarts) + checkpoint resume
  pt_restart   ddplaunch, process restart + checkpoint reload
  pt_inplace   ddplaunch --in_place_recovery: ddplaunch_recovery re-forms the group in place
  pt_spare_hot   as pt_inplace with --nnodes N:N and one node more (node N), started once the
                 group trains: a spare, standing by with its worker started and parked; the
                 kill waits until it is ready (its workers_parked event); it takes the lost place
  pt_spare_cold  the same with --spare_workers cold: the spare's worker starts at admission
                 (the kill waits for its spare event)
Both trainers checkpoint every --checkpoint_every steps (default 1) and print one line per
step on rank 0.

A way may name its victim and rendezvous backend: way[:member|store_host][:c10d|etcd-v3]
(defaults --victim, --rdzv_backend). member: the node chosen above. store_host: the node
hosting the job's store: on c10d node 0, the agent at the --rdzv_endpoint's address (its store
moves to a survivor's standby); group ranks follow arrival order, so node 0 gets --host_lead_s
alone to take group rank 0 as well (each run records whether it did: victim == printer_before).
On etcd-v3 the node serving the workers' store, group rank 0, i.e. the printing node (the
survivors revoke its lease through the death witness; the lease is --etcd_lease_s long, so
only the witness explains a quick recovery), against one etcd member this driver starts.
A way that loses the job (every survivor's agent exits) is recorded as such: the survivors'
exit codes and the time from the kill to the last exit. pt_inplace runs also log the indices
each rank trained (the script's --sample_log); recovery_analysis.sample_check counts those
trained twice or skipped (see its docstring).

Times are taken on this driver: each agent's stdout is a pipe read by a thread of its own,
and a line's time is time.time() when readline returns it (arrival). Lost time = arrival of
the first step completed by a survivor after the loss - the time just before the kill
syscall. A step "after the loss" is one trained without the dead node: torch's lines carry
the world size; build/train's do not, so each progress line is matched (in order) with its
--metrics record, whose samples_seen grows by batch * world per step. Steps still completing
with the dead node's gradients (in flight when the kill landed) are pre-loss steps.
Steps redone = (samples of the last pre-loss step - samples at which the first post-loss
step started) / (batch * N): old-world steps trained twice.

This file runs the jobs; recovery_analysis.py turns a run's lines into its numbers.
Prints one JSON line per run (--results FILE appends them too) and, at the end, a markdown
table of medians with ratios to 'restart' and to 'torch' measured in the same run.
"""
import argparse
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import NamedTuple

from recovery_analysis import (analyse, read_jsonl, sample_check, spare_way, step_of,
                               store_loss_table, table)

PY = "/usr/bin/python3"
VICTIMS = ("member", "store_host")
BACKENDS = ("c10d", "etcd-v3")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def descendants(pid):
    """Every process under pid (children first found through /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


class Node:
    """One agent in a session of its own; a thread stamps its stdout lines on arrival."""

    def __init__(self, index, cmd, log_path, lines, env):
        self.index = index
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.thread = threading.Thread(target=self._read, args=(lines,), daemon=True)
        self.thread.start()
        self.exited_at = None  # time.time() when the agent exited
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self):
        self.proc.wait()
        self.exited_at = time.time()

    def _read(self, lines):
        for raw in iter(self.proc.stdout.readline, b""):
            t = time.time()
            self.log.write(raw)
            lines.put((t, self.index, raw.decode(errors="replace")))
        self.log.close()

    def kill(self, pids=None):
        """SIGKILL the agent's process group and the processes under it now (pids: listed
        just before; only processes this driver started, never a pid it merely saw once)."""
        pids = descendants(self.proc.pid) if pids is None else pids
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        own = os.getpgrp()
        for p in pids:
            try:
                pgid = os.getpgid(p)
                if pgid != own:
                    os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


class Case(NamedTuple):
    """One way to run: the launcher and mode (variant), the node lost, the rendezvous backend."""
    variant: str
    victim: str = "member"
    backend: str = "c10d"

    @property
    def name(self):
        return f"{self.variant}:{self.victim}:{self.backend}"

    @property
    def default(self):
        return self.victim == "member" and self.backend == "c10d"


def parse_cases(args):
    """--variants entries way[:victim][:backend], the defaults from --victim, --rdzv_backend."""
    cases = []
    for entry in [e for e in args.variants.split(",") if e]:
        variant, *rest = entry.split(":")
        victim, backend = args.victim, args.rdzv_backend
        for token in rest:
            if token in VICTIMS:
                victim = token
            elif token in BACKENDS:
                backend = token
            else:
                sys.exit(f"recovery bench: {entry}: {token!r} is neither a victim {VICTIMS} "
                         f"nor a backend {BACKENDS}")
        if backend == "etcd-v3" and variant in ("torch", "pt_torchrun"):
            sys.exit(f"recovery bench: {entry}: etcd-v3 is for ddplaunch's ways only")
        cases.append(Case(variant, victim, backend))
    return cases


def rdzv_flags(args, case, port, run_id):
    """The rendezvous flags of every agent of a run (ddplaunch's and torchrun's spelling)."""
    if case.backend == "etcd-v3":
        return ["--rdzv_backend", "etcd-v3", "--rdzv_endpoint", args.etcd_endpoint,
                "--rdzv_id", run_id, "--rdzv_conf", f"lease_timeout={args.etcd_lease_s:g}"]
    return ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
            "--rdzv_id", run_id]


def commands(args, case, n, i, port, run_dir):
    """The agent command line of node i of n."""
    variant = case.variant
    ckpt = os.path.join(run_dir, "ckpt")
    nnodes = f"{n}:{n}" if spare_way(variant) else f"{n - 1}:{n}"
    rdzv = rdzv_flags(args, case, port, os.path.basename(run_dir))
    if variant.startswith("pt_"):
        script = [args.pt_script, "--rows", str(args.rows), "--batch_size", str(args.batch_size),
                  "--epochs", "1000", "--workers", "1", "--step_lines",
                  "--checkpoint_dir", ckpt, "--checkpoint_every", str(args.checkpoint_every)]
        if variant == "pt_torchrun":
            return [os.path.join(os.path.dirname(args.torch_python), "torchrun"),
                    "--log_dir", os.path.join(run_dir, f"tlogs.{i}"), "--nnodes", nnodes,
                    "--nproc_per_node", "1"] + rdzv + [
                    "--max_restarts", str(args.max_restarts)] + script
        cmd = [os.path.join(args.build, "ddplaunch"), "--nnodes", nnodes] + rdzv + [
               "--local_addr", f"127.0.0.{i + 1}", "--nproc_per_node", "1",
               "--max_restarts", str(args.max_restarts),
               "--events_file", os.path.join(run_dir, f"events.{i}")]
        if variant == "pt_inplace" or spare_way(variant):
            cmd.append("--in_place_recovery")
            script += ["--sample_log", os.path.join(run_dir, "samples")]
        if spare_way(variant):
            cmd += ["--spare_workers", variant.rsplit("_", 1)[1]]
        return cmd + script
    if variant == "torch":
        return [PY, "-m", "torch.distributed.run", "-r", "1", "-t", "1",
                "--log_dir", os.path.join(run_dir, f"tlogs.{i}"), "--nnodes", nnodes,
                "--nproc_per_node", "1"] + rdzv + [
                "--max_restarts", str(args.max_restarts), args.torch_script,
                "--batch_size", str(args.batch_size), "--rows", str(args.rows),
                "--checkpoint_dir", ckpt, "--checkpoint_every", str(args.checkpoint_every)]
    cmd = [os.path.join(args.build, "ddplaunch"), "--nnodes", nnodes] + rdzv + [
           "--local_addr", f"127.0.0.{i + 1}", "--nproc_per_node", "1",
           "--max_restarts", str(args.max_restarts),
           "--events_file", os.path.join(run_dir, f"events.{i}")]
    if variant == "inplace":
        cmd.append("--in_place_recovery")
    return cmd + [os.path.join(args.build, "train"), "--data", "synthetic",
                  "--synthetic_rows", str(args.rows), "--batch_size", str(args.batch_size),
                  "--max_steps", "1000000", "--epochs", "1000", "--log_every", "1",
                  "--blas_threads", "1", "--checkpoint_dir", ckpt,
                  "--checkpoint_every", str(args.checkpoint_every),
                  "--metrics", os.path.join(run_dir, f"metrics.{i}.jsonl")]


def choose_victim(case, n, printer):
    """The node to lose, once node `printer` (group rank 0) showed the kill step."""
    if case.victim == "member":
        # Not the store's host (node 0), not the printing rank where there is a choice.
        return ([k for k in range(n - 1, 0, -1) if k != printer] or [n - 1])[0]
    # c10d: node 0's address is the --rdzv_endpoint's, so its agent hosts the store. etcd-v3:
    # group rank 0's agent serves the workers' store, and group rank 0 prints the steps.
    return 0 if case.backend == "c10d" else printer


def spare_standing_by(variant, run_dir, n):
    """Whether the spare (node n) stands by, with its worker parked where it is hot."""
    wanted = "workers_parked" if variant.endswith("_hot") else "spare"
    return any(e.get("event") == wanted
               for e in read_jsonl(os.path.join(run_dir, f"events.{n}")))


def one_run(args, case, n, rep, work):
    variant = case.variant
    run_dir = os.path.join(work, f"{variant}_{case.victim}_{case.backend}_{n}_{rep}")
    os.makedirs(os.path.join(run_dir, "ckpt"))
    port = free_port()
    lines = queue.Queue()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON_EXEC=args.torch_python)
    nodes = []
    seen = []  # (arrival, node, text) of every line
    result = {"variant": variant, "case": case.name, "victim_kind": case.victim,
              "rdzv_backend": case.backend, "nodes": n, "run": rep}
    slow = variant == "torch" or variant.startswith("pt_")  # Python starts and imports torch
    startup = args.torch_startup_s if slow else args.startup_s
    victim_pids = []
    try:
        # Node 0 first, so it hosts the store (torchrun: the first agent up) and joins first
        # (so it is group rank 0 and prints the steps). No store of an agent on etcd.
        nodes.append(Node(0, commands(args, case, n, 0, port, run_dir),
                          os.path.join(run_dir, "log.0"), lines, env))
        deadline = time.time() + startup
        while case.backend == "c10d" and not port_open(port) and time.time() < deadline \
                and nodes[0].proc.poll() is None:
            time.sleep(0.02)
        if case.backend == "c10d":
            # Group ranks follow arrival order: a head start makes the store's host rank 0.
            time.sleep(args.host_lead_s)
        for i in range(1, n):
            nodes.append(Node(i, commands(args, case, n, i, port, run_dir),
                              os.path.join(run_dir, f"log.{i}"), lines, env))

        spare = spare_way(variant)  # node n joins once the group trains, and stands by
        t_kill, victim, after = None, None, 0
        # Enough survivors' steps to redo what the checkpoint lacked and pass it (the redone
        # old-world steps take n / (n - 1) new ones each).
        need_after = args.steps_after + n * (args.checkpoint_every if args.checkpoint_every > 0
                                             else args.kill_step)
        deadline = time.time() + startup
        while True:
            try:
                t, idx, text = lines.get(timeout=0.05)
                seen.append((t, idx, text))
            except queue.Empty:
                t, idx, text = None, None, None
            now = time.time()
            step = step_of(variant, text) if text else None
            if t_kill is None:
                if now > deadline:
                    result["error"] = f"no step {args.kill_step} within {startup} s"
                    break
                gone = [node for node in nodes if node.proc.poll() is not None]
                if gone and lines.empty():
                    # An agent ended before the kill: a refused flag, a bad build, a port taken.
                    last = [x[2].strip() for x in seen if x[1] == gone[0].index][-1:]
                    result["error"] = (f"node {gone[0].index}'s agent exited with "
                                       f"{gone[0].proc.returncode} before step {args.kill_step}"
                                       f": {last[0] if last else '(no output)'}")
                    result["agent_exited"] = True
                    break
                if step is None:
                    continue
                if spare and len(nodes) == n:
                    nodes.append(Node(n, commands(args, case, n, n, port, run_dir),
                                      os.path.join(run_dir, f"log.{n}"), lines, env))
                if step >= args.kill_step and (not spare or
                                               spare_standing_by(variant, run_dir, n)):
                    # Its processes are listed before the clock starts.
                    victim = choose_victim(case, n, idx)
                    victim_pids = descendants(nodes[victim].proc.pid)
                    t_kill = time.time()
                    nodes[victim].kill(victim_pids)
                    result["victim"] = victim
                    result["printer_before"] = idx  # the node of group rank 0
                    deadline = t_kill + (args.torch_recover_s if slow else args.recover_s)
                continue
            if step is not None and idx != victim and t > t_kill:
                after += 1
                if after >= need_after:
                    break
            survivors = [node for node in nodes if node.index != victim]
            if all(node.exited_at for node in survivors) and lines.empty():
                # The job is over without the victim: lost, unless the survivors exited 0.
                result["survivor_rcs"] = [node.proc.returncode for node in survivors]
                result["job_lost"] = all(node.proc.returncode != 0 for node in survivors)
                result["survivors_exit_ms"] = round(
                    1e3 * (max(node.exited_at for node in survivors) - t_kill), 1)
                break
            if now > deadline:
                result["error"] = f"fewer than {need_after} steps within the bound after the kill"
                result["survivors_running"] = True
                break
    finally:
        for node in nodes:
            node.kill()
        for node in nodes:
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            node.thread.join(timeout=5)
    while not lines.empty():
        seen.append(lines.get())
    if t_kill is None:
        return result
    if not result.get("job_lost"):
        result.update(analyse(args, variant, n, run_dir, seen, t_kill, victim))
    if variant == "pt_inplace" or spare_way(variant):
        result.update(sample_check(args, run_dir, seen, victim_pids))
    return result


def in_place_supported(build):
    try:
        out = subprocess.run([os.path.join(build, "ddplaunch"), "--help"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--in_place_recovery" in out


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Etcd:
    """One etcd member on free loopback ports with a temporary data dir (as
    scripts/bench/rdzv_etcd.sh starts it), for the etcd-v3 ways; stopped on exit."""

    def __init__(self, binary, work):
        client, peer = free_port(), free_port()
        self.endpoint = f"127.0.0.1:{client}"
        self.log = open(os.path.join(work, "etcd.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--name", "bench", "--data-dir", os.path.join(work, "etcd"),
             "--listen-client-urls", f"http://{self.endpoint}",
             "--advertise-client-urls", f"http://{self.endpoint}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"bench=http://127.0.0.1:{peer}"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline and self.proc.poll() is None:
            try:
                urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        sys.exit(f"recovery bench: etcd did not answer on {self.endpoint} (log: {work}/etcd.log)")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--variants", default="torch,restart,inplace",
                   help="ways, each way[:member|store_host][:c10d|etcd-v3]")
    p.add_argument("--victim", choices=VICTIMS, default="member",
                   help="the node lost, for ways that do not name one")
    p.add_argument("--rdzv_backend", choices=BACKENDS, default="c10d",
                   help="for ways that do not name one")
    p.add_argument("--etcd", default="etcd", help="the etcd binary of the etcd-v3 ways")
    p.add_argument("--etcd_lease_s", type=float, default=30,
                   help="the agents' lease on etcd-v3 (--rdzv_conf lease_timeout)")
    p.add_argument("--host_lead_s", type=float, default=1.0,
                   help="c10d: node 0 alone this long after its store listens, so that it "
                        "arrives first and takes group rank 0")
    p.add_argument("--nodes", default="2,3,4", help="node counts")
    p.add_argument("--repeats", type=int, default=5, help="runs per ddplaunch row")
    p.add_argument("--torch_repeats", type=int, default=3,
                   help="runs per torchrun row (each waits ~45 s for its re-rendezvous)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 nodes, one run each")
    p.add_argument("--kill_step", type=int, default=40)
    p.add_argument("--steps_after", type=int, default=20,
                   help="survivors' step lines to wait for after the kill")
    p.add_argument("--checkpoint_every", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--rows", type=int, default=140000)
    p.add_argument("--max_restarts", type=int, default=3)
    p.add_argument("--startup_s", type=float, default=60)
    p.add_argument("--torch_startup_s", type=float, default=120)
    p.add_argument("--recover_s", type=float, default=60)
    p.add_argument("--torch_recover_s", type=float, default=120)
    p.add_argument("--torch_script", default=os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "torch_ddp_recovery.py"))
    p.add_argument("--torch_python", default="/var/cache/ddplaunch/venvs/torch-2.15.0/bin/python",
                   help="the PyTorch 2.x of the pt_* ways (its venv's torchrun for pt_torchrun)")
    p.add_argument("--pt_script", default=os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "..", "..", "examples", "pytorch_in_place", "train.py"))
    p.add_argument("--results", help="append each run's JSON line here too")
    p.add_argument("--keep", action="store_true", help="keep the runs' logs and metrics")
    args = p.parse_args()
    cases = parse_cases(args)
    node_counts = [int(x) for x in args.nodes.split(",")]
    if args.quick:
        node_counts, args.repeats, args.torch_repeats = [2], 1, 1
    if any(c.variant == "inplace" for c in cases) and not in_place_supported(args.build):
        print(f"recovery bench: (c) skipped: {args.build}/ddplaunch has no --in_place_recovery "
              "(the flag is not on this branch yet); run again once it lands", file=sys.stderr)
        cases = [c for c in cases if c.variant != "inplace"]

    work = tempfile.mkdtemp(prefix="recoverybench.")
    etcd = Etcd(args.etcd, work) if any(c.backend == "etcd-v3" for c in cases) else None
    args.etcd_endpoint = etcd.endpoint if etcd else None
    results = []
    print(f"recovery bench: load before {load()}", file=sys.stderr)
    try:
        for n in node_counts:
            for rep in range(1, max(args.repeats, args.torch_repeats) + 1):
                for c in list(cases):  # interleaved, so machine noise hits every way alike
                    if c not in cases or rep > (args.torch_repeats
                                                if c.variant in ("torch", "pt_torchrun")
                                                else args.repeats):
                        continue
                    r = one_run(args, c, n, rep, work)
                    if c.variant == "inplace" and r.get("agent_exited"):
                        print(f"recovery bench: (c) skipped: ddplaunch --in_place_recovery did "
                              f"not run: {r['error']}", file=sys.stderr)
                        cases.remove(c)
                    results.append(r)
                    print(json.dumps(r), flush=True)
                    if args.results:
                        with open(args.results, "a") as f:
                            f.write(json.dumps(r) + "\n")
    finally:
        if etcd:
            etcd.stop()
    print(f"recovery bench: load after {load()}", file=sys.stderr)
    print()
    if all(c.default for c in cases):
        print(table(results, [c.variant for c in cases], node_counts))
    else:
        print(store_loss_table(results, [c.name for c in cases], node_counts))
    if args.keep:
        print(f"recovery bench: kept {work}", file=sys.stderr)
    else:
        subprocess.run(["rm", "-rf", work], check=False)

if __name__ == "__main__":
    main()
