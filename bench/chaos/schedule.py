"""A seeded schedule of faults, the same for every way a job is run (bench/chaos/chaos.py).

A fault is a dict: t (seconds after the first step), kind, length (what the fault itself
takes away: a blip's or a pause's seconds, else 0), pick (a number in [0, 1) that chooses the
node among those the kind may hit, when it is applied: the store's host after a loss, and so
the candidates, are only known then).

Kinds: worker_crash (SIGKILL one worker), worker_hang (SIGSTOP one worker; the agent's
--hang_timeout ends it), agent_kill (SIGKILL the agent of a node that does not host the
store), host_kill (SIGKILL the store host's agent), cut (the node's switch port down for
good), blip (down, then up after `length` s), pause (SIGSTOP every process of the node for
`length` s, then SIGCONT), join (a new node starts). The run ends with a SIGTERM to every
agent at `duration`.
"""
import random

KINDS = ("worker_crash", "worker_hang", "agent_kill", "host_kill", "cut", "blip", "pause", "join")
PAUSE_S = 20.0


def short_schedule():
    """The CI mode's fixed schedule: 3 nodes, about 100 s of training."""
    faults = [
        {"t": 12.0, "kind": "worker_crash", "length": 0.0, "pick": 0.7},
        {"t": 24.0, "kind": "blip", "length": 4.0, "pick": 0.4},
        {"t": 38.0, "kind": "agent_kill", "length": 0.0, "pick": 0.9},
        {"t": 50.0, "kind": "join", "length": 0.0, "pick": 0.0},
        {"t": 66.0, "kind": "host_kill", "length": 0.0, "pick": 0.0},
    ]
    return {"seed": 1, "nodes": 3, "max_nodes": 4, "duration": 85.0, "faults": faults}


def make_schedule(seed, duration, interval, nodes, max_nodes, kinds=KINDS):
    """One fault every `interval` s (each moved by up to a fifth of it), none in the last
    interval; the kind drawn among those the job can take at that point: node losses only
    while at least 3 nodes are in (2 survivors keep a majority), joins while slots are free
    (a node lost or cut leaves its slot used; a join takes a new one)."""
    rng = random.Random(seed)
    alive, started, faults = nodes, nodes, []
    t = interval
    while t <= duration - interval + 1e-9:
        allowed = [k for k in kinds if k in ("worker_crash", "worker_hang", "blip", "pause")]
        if alive >= 3:
            allowed += [k for k in kinds if k in ("agent_kill", "host_kill", "cut")]
        if started < max_nodes and "join" in kinds:
            allowed.append("join")
            if alive <= 2:
                allowed += ["join", "join"]  # bring the job back up rather than wear it down
        kind = rng.choice(allowed)
        length = {"blip": float(rng.randint(2, 10)), "pause": PAUSE_S}.get(kind, 0.0)
        jitter = rng.uniform(-interval / 5, interval / 5)
        faults.append({"t": round(t + jitter, 1), "kind": kind, "length": length,
                       "pick": round(rng.random(), 4)})
        if kind in ("agent_kill", "host_kill", "cut"):
            alive -= 1
        elif kind == "join":
            alive += 1
            started += 1
        t += interval
    return {"seed": seed, "nodes": nodes, "max_nodes": max_nodes, "duration": duration,
            "faults": faults}


def slots_needed(schedule):
    return schedule["nodes"] + sum(1 for f in schedule["faults"] if f["kind"] == "join")


def parse_plan(text):
    """--plan t:kind[:length[:pick]],... as faults."""
    faults = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) < 2 or parts[1] not in KINDS:
            raise SystemExit("chaos: bad --plan item %r (t:kind[:length[:pick]], kinds %s)" %
                             (item, ", ".join(KINDS)))
        faults.append({"t": float(parts[0]), "kind": parts[1],
                       "length": float(parts[2]) if len(parts) > 2 else 0.0,
                       "pick": float(parts[3]) if len(parts) > 3 else 0.0})
    return sorted(faults, key=lambda f: f["t"])
