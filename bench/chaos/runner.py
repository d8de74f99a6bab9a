"""One run of a job under a schedule of faults: agents on netns hosts, faults applied on time,
the SIGTERM at the end, exit statuses, leftover processes (bench/chaos/chaos.py drives it).

Ways (`mode`):
  inplace   ddplaunch --in_place_recovery (c10d, --nnodes 1:MAX)
  restart   ddplaunch without it: workers restarted from the last checkpoint at a change
  torchrun  python -m torch.distributed.run of the venv (c10d, --nnodes 1:MAX)
Every node runs one worker: examples/pytorch_in_place/train.py with --sample_log and
--chaos_fields (each step's time, world, position and parameter checksum on every rank).
"""
import json
import os
import re
import signal
import subprocess
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "examples", "pytorch_in_place", "train.py")
PORT = 29400
STORE_MOVED = re.compile(r"the store is now \[?([0-9a-fA-F.:]+?)\]?:(\d+)")


def children(pid):
    out = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(k) for k in f.read().split()]
        except OSError:
            pass
    return out


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def signal_pid(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


class Agent:
    def __init__(self, slot, proc, log_path, started, events_path=None):
        self.slot = slot
        self.events_path = events_path
        self.proc = proc
        self.log_path = log_path
        self.started = started
        self.fate = "running"  # running, killed (by the harness), cut (its link, for good)
        self.exit = None
        self.exited_at = None

    def workers(self):
        """The agent's worker processes (the script's main processes, not their loaders, nor a
        standby worker that waits to take a place: ddplaunch's events name the current one)."""
        ws = [p for p in children(self.proc.pid)
              if os.path.basename(cmdline(p).split(" ")[0]).startswith("python") and
              "train.py" in cmdline(p)]  # not ddplaunch's orphan guardian (a fork of it)
        current = self.current_worker()
        return [current] if current in ws else ([] if current else ws)

    def current_worker(self):
        """The pid of the last worker_start in this agent's events (ddplaunch), else 0."""
        pid = 0
        try:
            with open(self.events_path) as f:
                for line in f:
                    if '"worker_start"' in line:
                        try:
                            pid = int(json.loads(line).get("pid", 0))
                        except ValueError:
                            pass
        except (OSError, TypeError):
            return 0
        return pid


class Run:
    def __init__(self, cluster, mode, schedule, run_dir, opts, log):
        self.cluster = cluster
        self.mode = mode
        self.schedule = schedule
        self.dir = run_dir
        self.o = opts
        self.log = log
        self.agents = {}
        self.store_slot = 0
        self.events = []  # the faults as applied
        self.notes = []
        self.samples = os.path.join(run_dir, "samples")
        self.ckpt = os.path.join(run_dir, "ckpt")
        os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
        self.threads = []

    # -- agents -------------------------------------------------------------------------------
    def command(self, slot, endpoint):
        o = self.o
        nnodes = "1:%d" % self.schedule["max_nodes"]
        # The first round closes this long after the first node is in (both default to 30 s).
        conf = "last_call_timeout=%g" % o.last_call_s
        script = [SCRIPT, "--rows", str(o.rows), "--batch_size", str(o.batch_size),
                  "--epochs", "100000", "--workers", "1", "--slow_step_ms", str(o.step_ms),
                  "--lr_step_size", "1000000000",  # the parameters keep changing
                  "--sample_log", self.samples, "--chaos_fields",
                  "--checkpoint_dir", self.ckpt, "--checkpoint_every", str(o.checkpoint_every)]
        if self.mode == "torchrun":
            return [o.python, "-m", "torch.distributed.run", "--nnodes", nnodes,
                    "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", endpoint, "--rdzv_id", "chaos", "--rdzv_conf",
                    # Its host test matches the host name, which resolves to loopback here.
                    conf + ",is_host=%s" % ("true" if slot == self.store_slot else "false"),
                    "--local_addr", self.cluster.addrs[slot],  # else MASTER_ADDR=localhost
                    "--max_restarts", str(o.max_restarts), "--monitor_interval", "0.5"] + script
        cmd = [os.path.join(o.build, "ddplaunch"), "--nnodes", nnodes, "--nproc_per_node", "1",
               "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "chaos",
               "--rdzv_conf", conf,
               "--max_restarts", str(o.max_restarts), "--hang_timeout", str(o.hang_timeout),
               "--events_file", os.path.join(self.dir, "logs", "events.%d" % slot)]
        if self.mode == "inplace":
            cmd += ["--in_place_recovery", "--standby_workers", str(o.standby_workers)]
        return cmd + script

    def start_agent(self, slot):
        endpoint = "%s:%d" % (self.cluster.addrs[self.store_slot], PORT)
        log_path = os.path.join(self.dir, "logs", "agent.%d.log" % slot)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON_EXEC=self.o.python,
                   PYTHONUNBUFFERED="1",
                   GLOO_SOCKET_IFNAME="eth0")  # the host name resolves to loopback
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(self.cluster.exec_prefix(slot) + self.command(slot, endpoint),
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        events = (os.path.join(self.dir, "logs", "events.%d" % slot)
                  if self.mode != "torchrun" else None)
        self.agents[slot] = Agent(slot, proc, log_path, time.time(), events)
        self.log("  node %d (%s) started: pid %d, store %s" % (slot, self.cluster.addrs[slot],
                                                              proc.pid, endpoint))

    def live(self, include_cut=False):
        for a in self.agents.values():
            if a.exited_at is None and a.proc.poll() is not None:
                a.exited_at = time.time()
        return [a for a in self.agents.values() if a.proc.poll() is None and
                (a.fate == "running" or (include_cut and a.fate == "cut"))]

    def resolve_store(self):
        """Where the store is now: the last 'the store is now A:P' line of the live agents'
        logs (ddplaunch moves it to a survivor when its host is lost); torchrun never moves."""
        if self.mode == "torchrun":
            return self.store_slot
        votes = {}
        for a in self.live():
            try:
                with open(a.log_path, errors="replace") as f:
                    found = STORE_MOVED.findall(f.read())
            except OSError:
                continue
            if found:
                addr = found[-1][0]
                if addr in self.cluster.addrs:
                    slot = self.cluster.addrs.index(addr)
                    votes[slot] = votes.get(slot, 0) + 1
        if votes:
            self.store_slot = max(votes, key=votes.get)
        return self.store_slot

    # -- faults -------------------------------------------------------------------------------
    def pick(self, fault, candidates):
        if not candidates:
            return None
        candidates = sorted(candidates, key=lambda a: a.slot)
        return candidates[int(fault["pick"] * len(candidates)) % len(candidates)]

    def apply(self, fault, t0):
        kind = fault["kind"]
        now = time.time()
        ev = {"kind": kind, "t": round(now - t0, 2), "length": fault["length"],
              "planned_t": fault["t"]}
        store = self.resolve_store()
        live = self.live()
        target = None
        if kind in ("worker_crash", "worker_hang", "blip", "pause"):
            target = self.pick(fault, live)
        elif kind in ("agent_kill", "cut"):
            target = self.pick(fault, [a for a in live if a.slot != store])
        elif kind == "host_kill":
            target = self.agents.get(store)
            if target not in live:
                target = None
        if kind == "join":
            slot = next((s for s in range(len(self.cluster.names)) if s not in self.agents), None)
            if slot is None:
                ev["skipped"] = "no free host"
            else:
                self.start_agent(slot)
                ev["node"] = slot
        elif target is None:
            ev["skipped"] = "no node to hit"
        else:
            ev["node"] = target.slot
            getattr(self, "do_" + kind)(target, fault, ev)
        self.events.append(ev)
        self.log("  t=%6.1f s %-12s node %s %s" % (ev["t"], kind, ev.get("node", "-"),
                                                  ev.get("skipped", ev.get("detail", ""))))

    @staticmethod
    def _signal_worker(agent, ev, sig, name):
        """Sends sig to the node's first worker (a crash: SIGKILL, a hang: SIGSTOP)."""
        ws = agent.workers()
        ev["detail"] = "%s worker %s" % (name, ws)
        for p in ws[:1]:
            signal_pid(p, sig)
        if not ws:
            ev["skipped"] = "no worker running on the node"

    def do_worker_crash(self, agent, fault, ev):
        self._signal_worker(agent, ev, signal.SIGKILL, "SIGKILL")

    def do_worker_hang(self, agent, fault, ev):
        self._signal_worker(agent, ev, signal.SIGSTOP, "SIGSTOP")

    def do_agent_kill(self, agent, fault, ev):
        agent.fate = "killed"
        signal_pid(agent.proc.pid, signal.SIGKILL)
        ev["detail"] = "SIGKILL agent %d" % agent.proc.pid

    do_host_kill = do_agent_kill

    def do_cut(self, agent, fault, ev):
        agent.fate = "cut"
        self.cluster.cut(agent.slot)
        ev["detail"] = "switch port h%d down for good" % agent.slot

    def do_blip(self, agent, fault, ev):
        self.cluster.cut(agent.slot)
        ev["detail"] = "switch port h%d down for %.0f s" % (agent.slot, fault["length"])
        self.later(fault["length"], lambda: self.cluster.restore(agent.slot))

    def do_pause(self, agent, fault, ev):
        # As a frozen machine: the agent stops first and resumes last, so that it never sees
        # its own workers stopped (which it would take for a hang).
        pids = [agent.proc.pid] + [p for p in self.cluster.pids(agent.slot)
                                   if p != agent.proc.pid]
        for p in pids:
            signal_pid(p, signal.SIGSTOP)
        ev["detail"] = "SIGSTOP %d processes for %.0f s" % (len(pids), fault["length"])
        self.later(fault["length"], lambda: [signal_pid(p, signal.SIGCONT)
                                             for p in reversed(pids)])

    def later(self, seconds, fn):
        th = threading.Timer(seconds, fn)
        th.start()
        self.threads.append(th)

    # -- the run ------------------------------------------------------------------------------
    def first_step_time(self, deadline):
        while time.time() < deadline:
            if os.path.isdir(self.samples):
                for name in os.listdir(self.samples):
                    if os.path.getsize(os.path.join(self.samples, name)) > 0:
                        return time.time()
            if not self.live():
                return None
            time.sleep(0.1)
        return None

    def run(self):
        res = {"mode": self.mode}
        launched = time.time()
        for slot in range(self.schedule["nodes"]):
            self.start_agent(slot)
            time.sleep(0.3 if slot == 0 else 0.05)
        t0 = self.first_step_time(launched + self.o.startup_s)
        res["launched"] = launched
        if t0 is None:
            res["stopped"] = "no step within %.0f s of the start" % self.o.startup_s
            t0 = time.time()
        else:
            res["first_step_s"] = round(t0 - launched, 2)
            for fault in self.schedule["faults"]:
                while time.time() < t0 + fault["t"] and self.live(include_cut=True):
                    time.sleep(0.05)
                if not self.live(include_cut=True):
                    break
                self.apply(fault, t0)
            while time.time() < t0 + self.schedule["duration"] and self.live(include_cut=True):
                time.sleep(0.1)
        if not self.live(include_cut=True):
            gone = [a for a in self.agents.values() if a.fate != "killed"]
            res["stopped"] = res.get("stopped") or (
                "every agent had exited at t=%.1f s, before the end" %
                (max((a.exited_at or time.time()) for a in gone) - t0 if gone else 0))
        for th in self.threads:  # blips end and paused nodes resume before the end
            th.join()
        res["t0"] = t0
        res["end"] = time.time()
        res["planned_end"] = t0 + self.schedule["duration"]
        self.finish(res)
        res["events"] = self.events
        res["agents"] = {a.slot: {"fate": a.fate, "exit": a.exit, "pid": a.proc.pid,
                                  "exited_s": None if a.exited_at is None else
                                  round(a.exited_at - t0, 2),
                                  "started_s": round(a.started - t0, 2)}
                         for a in self.agents.values()}
        res["notes"] = self.notes
        return res

    def finish(self, res):
        """SIGTERM to every agent still running (the whole job), their exit statuses, then
        whatever is left in the hosts' namespaces (orphans: recorded, then killed)."""
        for a in self.agents.values():
            if a.proc.poll() is None:
                signal_pid(a.proc.pid, signal.SIGTERM)
        deadline = time.time() + self.o.exit_s
        while time.time() < deadline:
            for a in self.agents.values():
                if a.exited_at is None and a.proc.poll() is not None:
                    a.exited_at = time.time()
            if all(a.proc.poll() is not None for a in self.agents.values()):
                break
            time.sleep(0.05)
        for a in self.agents.values():
            if a.proc.poll() is None:
                self.notes.append("node %d: the agent was still running %.0f s after SIGTERM "
                                  "(SIGKILLed)" % (a.slot, self.o.exit_s))
                res.setdefault("hung_agents", []).append(a.slot)
                signal_pid(a.proc.pid, signal.SIGKILL)
                a.proc.wait()
            rc = a.proc.returncode
            a.exit = 128 - rc if rc < 0 else rc  # a signal's death as a shell shows it
        time.sleep(self.o.orphan_grace_s)
        orphans = []
        for slot in range(len(self.cluster.names)):
            for p in self.cluster.pids(slot):
                orphans.append({"node": slot, "pid": p, "cmd": cmdline(p)[:200]})
                signal_pid(p, signal.SIGCONT)
                signal_pid(p, signal.SIGKILL)
        res["orphans"] = orphans
