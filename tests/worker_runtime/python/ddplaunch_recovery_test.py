"""Units of worker_runtime/python/ddplaunch_recovery.py without a process group (ctest
python:ddplaunch_recovery, tier pytorch: it imports torch): the line format, the channel
against a fake agent on a socketpair, the sampler's re-split when the world changes, and the
state agreement's decision.
    python3 ddplaunch_recovery_test.py SOURCE_DIR
"""
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.join(sys.argv[1], "worker_runtime", "python"))
import ddplaunch_recovery as dr  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def test_lines():
    line = dr.format_line("joined", round=1, rank=2, step=5, source=-1, state_bytes=0)
    check(line == "joined round=1 rank=2 step=5 source=-1 state_bytes=0\n", "format: " + line)
    check(dr.parse_line(line) == ("joined", {"round": "1", "rank": "2", "step": "5",
                                             "source": "-1", "state_bytes": "0"}), "parse")
    check(dr.parse_line("round rank") is None, "a token without '=' is a bad line")
    check(dr.parse_line("") is None, "an empty line is a bad line")
    try:
        dr.format_line("x", addr="a b")
        check(False, "whitespace in a value must be refused")
    except ValueError:
        pass


def recv_line(sock):
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode()


def test_channel():
    agent, worker = socket.socketpair()
    aborted = []
    got_abort = threading.Event()

    def on_abort(why):
        aborted.append(why)
        got_abort.set()

    channel = dr.Channel(os.dup(worker.fileno()), 3, on_abort)
    worker.close()
    hello = recv_line(agent)
    check(hello == "hello pid=%d local_rank=3\n" % os.getpid(), "hello: " + hello)
    check(not channel.wait_change(0.05), "no change before the agent says one")
    agent.sendall(b"abort round=0 reason=node_lost\n")
    check(got_abort.wait(10), "abort reaches the group's abort")
    check("node_lost" in aborted[0], "the abort names its reason: %r" % aborted)
    check(recv_line(agent) == "aborted round=0\n", "the worker answers aborted")
    check(channel.change_pending(), "a change is pending after abort")
    check(channel.wait_change(1), "wait_change sees it")
    agent.sendall(b"round round=1 rank=0 world_size=2 group_rank=0 group_world_size=2 "
                  b"local_world_size=1 role_rank=0 role_world_size=2 master_addr=127.0.0.1 "
                  b"master_port=29500 restart_count=1 future_key=ignored\n")
    notice = channel.wait_round(10)
    check(notice["round"] == "1" and notice["world_size"] == "2" and
          notice["master_port"] == "29500", "round notice: %r" % notice)
    check(len(aborted) == 1, "a round after its abort aborts nothing more")
    check(not channel.change_pending(), "the change is taken with its notice")
    # A round without an abort before it still ends the current group.
    agent.sendall(b"round round=2 rank=1 world_size=3 group_rank=1 group_world_size=3 "
                  b"local_world_size=1 role_rank=1 role_world_size=3 master_addr=h "
                  b"master_port=1 restart_count=2\n")
    check(channel.wait_round(10)["rank"] == "1", "second round")
    check(len(aborted) == 2, "a round alone aborts the group")
    channel.send("stepped", round=2, step=9)
    check(recv_line(agent) == "stepped round=2 step=9\n", "stepped")
    agent.close()
    try:
        channel.wait_round(10)
        check(False, "wait_round must raise once the agent is gone")
    except dr.RecoveryError as e:
        check("closed" in str(e), "RecoveryError says the channel closed: %s" % e)


def test_spare_admission():
    """A spare's worker (DDPLAUNCH_SPARE=1) waits in Elastic() for the round that admits its
    node, then has that round's environment; without a channel it is refused."""
    agent, worker = socket.socketpair()
    elastic = dr.Elastic.__new__(dr.Elastic)  # the parts _await_admission uses
    elastic.channel = dr.Channel(os.dup(worker.fileno()), 0, lambda why: None)
    worker.close()
    elastic.round = 0
    elastic._report_stepped = False
    recv_line(agent)  # hello
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
        os.environ.pop(var, None)
    os.environ[dr.ENV_SPARE] = "1"
    waiter = threading.Thread(target=elastic._await_admission)
    waiter.start()
    waiter.join(0.2)
    check(waiter.is_alive(), "a spare's worker waits while its node stands by")
    agent.sendall(b"round round=3 rank=1 world_size=2 group_rank=1 group_world_size=2 "
                  b"local_world_size=1 role_rank=1 role_world_size=2 master_addr=10.0.0.1 "
                  b"master_port=29400 restart_count=3\n")
    waiter.join(10)
    check(not waiter.is_alive(), "admission ends the wait")
    check(os.environ.get("RANK") == "1" and os.environ.get("WORLD_SIZE") == "2" and
          os.environ.get("MASTER_ADDR") == "10.0.0.1" and
          os.environ.get("TORCHELASTIC_RESTART_COUNT") == "3",
          "the round's values are the environment now")
    check(dr.ENV_SPARE not in os.environ, "its DataLoader processes are no spares")
    check(elastic.round == 3, "the round is the admitting one: %r" % elastic.round)
    check(elastic._report_stepped, "the first step after admission is reported to the agent")
    agent.close()
    for var in ("RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
                "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
        os.environ.pop(var, None)
    alone = dr.Elastic.__new__(dr.Elastic)
    alone.channel = None
    try:
        alone._await_admission()
        check(False, "a spare without a channel must be refused")
    except ValueError as e:
        check("DDPLAUNCH_SPARE=1 without DDPLAUNCH_RECOVERY_FD" in str(e),
              "the error names both variables: %s" % e)


_ROUND_VARS = ("RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE",
               "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "TORCHELASTIC_RESTART_COUNT", "LOCAL_RANK")


def parked(agent_notice):
    """An Elastic (the parts _await_admission uses, on the CPU) of a standby worker whose agent
    already sent agent_notice; returns (elastic, agent, hello line)."""
    agent, worker = socket.socketpair()
    for var in _ROUND_VARS:
        os.environ.pop(var, None)
    os.environ[dr.ENV_SPARE] = "1"
    os.environ[dr.ENV_STANDBY] = "1"
    elastic = dr.Elastic.__new__(dr.Elastic)
    elastic.channel = dr.Channel(os.dup(worker.fileno()), 0, lambda why: None)
    worker.close()
    elastic.round = 0
    elastic._report_stepped = False
    elastic.device = dr.torch.device("cpu")
    hello = recv_line(agent)
    agent.sendall(agent_notice)
    return elastic, agent, hello


def test_standby_admission():
    """A standby worker (DDPLAUNCH_STANDBY=1 and DDPLAUNCH_SPARE=1, no LOCAL_RANK) learns its
    local rank from the notice that promotes it; a notice without one is refused, naming it."""
    check("ENV_STANDBY" in dr.__all__ and dr.ENV_STANDBY == "DDPLAUNCH_STANDBY", "ENV_STANDBY")
    elastic, agent, hello = parked(
        b"round round=5 rank=6 world_size=8 group_rank=1 group_world_size=2 "
        b"local_world_size=4 role_rank=6 role_world_size=8 master_addr=10.0.0.1 "
        b"master_port=29400 restart_count=5 local_rank=2\n")
    check(hello == "hello pid=%d local_rank=0\n" % os.getpid(), "a standby's hello: " + hello)
    elastic._await_admission()
    check(os.environ.get("LOCAL_RANK") == "2", "LOCAL_RANK from the notice: %r"
          % os.environ.get("LOCAL_RANK"))
    check(os.environ.get("RANK") == "6" and os.environ.get("LOCAL_WORLD_SIZE") == "4",
          "the round's values are the environment now")
    check(dr.ENV_STANDBY not in os.environ and dr.ENV_SPARE not in os.environ,
          "no longer a standby nor a spare")
    check(elastic.round == 5, "the promoting round: %r" % elastic.round)
    check(elastic.device == dr.torch.device("cpu"), "a CPU model stays where it is")
    agent.close()

    elastic, agent, _ = parked(
        b"round round=5 rank=6 world_size=8 group_rank=1 group_world_size=2 "
        b"local_world_size=4 role_rank=6 role_world_size=8 master_addr=10.0.0.1 "
        b"master_port=29400 restart_count=5\n")
    try:
        elastic._await_admission()
        check(False, "a standby's notice without local_rank must be refused")
    except dr.RecoveryError as e:
        check("local_rank" in str(e) and "DDPLAUNCH_STANDBY=1" in str(e),
              "the error names local_rank and the standby: %s" % e)
    check("LOCAL_RANK" not in os.environ, "no LOCAL_RANK made up")
    agent.close()

    os.environ.pop(dr.ENV_SPARE, None)
    os.environ[dr.ENV_STANDBY] = "1"
    lone = dr.Elastic.__new__(dr.Elastic)
    lone.channel = None
    try:
        lone._await_admission()
        check(False, "a standby that is no spare must be refused")
    except ValueError as e:
        check("DDPLAUNCH_STANDBY=1 without DDPLAUNCH_SPARE=1" in str(e),
              "the error names both variables: %s" % e)
    for var in _ROUND_VARS + (dr.ENV_SPARE, dr.ENV_STANDBY):
        os.environ.pop(var, None)


def test_sampler_resplit():
    class Fake:
        batch_size = None

    rows, batch = 1000, 16
    sampler = dr.ResumableSampler(rows, batch, Fake(), seed=3)
    seen = []
    # 7 steps at world 3, then the rest of the epoch at world 2.
    position = 0
    for _ in range(7):
        for rank in range(3):
            share = sampler.indices(0, position, rank, 3)
            seen += share[:batch]
        position += batch * 3
    rest = [sampler.indices(0, position, rank, 2) for rank in range(2)]
    check(len(rest[0]) == len(rest[1]) and len(rest[0]) % batch == 0, "whole batches per rank")
    for rank in range(2):
        seen += rest[rank]
    check(len(seen) == len(set(seen)), "no sample twice in the epoch")
    expected = position + (rows - position) // 2 // batch * batch * 2
    check(len(seen) == expected, "%d samples trained, expected %d" % (len(seen), expected))
    # The samples consumed so far are exactly the permutation's first `position`.
    full = sampler.indices(0, 0, 0, 1)
    check(set(seen[:position]) == set(full[:position]), "the world's steps take the "
          "permutation's contiguous blocks")


def test_env_errors():
    os.environ[dr.ENV_FD] = "x"
    try:
        dr._channel_fd()
        check(False, "a bad fd must be refused")
    except ValueError as e:
        check("DDPLAUNCH_RECOVERY_FD='x'" in str(e), "the error names the variable: %s" % e)
    os.environ[dr.ENV_FD] = ""
    check(dr._channel_fd() is None, "empty: no channel")
    os.environ[dr.ENV_CHANGE_WAIT] = "0"
    try:
        dr._change_wait()
        check(False, "a change wait of 0 must be refused")
    except ValueError as e:
        check("1 to 86400" in str(e), "the error says the range: %s" % e)
    os.environ[dr.ENV_CHANGE_WAIT] = "7"
    check(dr._change_wait() == 7.0, "a good change wait")
    del os.environ[dr.ENV_CHANGE_WAIT]


def test_state_agreement():
    # (live, step, lineage, round) per rank.
    # Survivors of round 3 (lineage 3) and a new rank: the lowest survivor step, sent.
    plan = dr.decide_state([(1, 12, 3, 4), (1, 11, 3, 4), (0, 0, -1, 4)])
    check(plan == {"source": 1, "send": True, "lineage": 4}, "survivors and a new rank: %s" % plan)
    # Everyone live, same step, same lineage: nothing to send.
    plan = dr.decide_state([(1, 7, 2, 3), (1, 7, 2, 3)])
    check(plan == {"source": 0, "send": False, "lineage": 3}, "all agree: %s" % plan)
    # A rank paused in round 0 comes back at step 2535; the others restarted in round 2 from a
    # checkpoint and caught up to the same step: the same step is not the same state. The
    # newer lineage is the job's, and the paused rank receives it.
    plan = dr.decide_state([(1, 2535, 0, 3), (1, 2535, 2, 3), (1, 2535, 2, 3)])
    check(plan == {"source": 1, "send": True, "lineage": 3}, "older lineage receives: %s" % plan)
    # Even one step ahead, an older lineage is never the source.
    plan = dr.decide_state([(1, 2536, 0, 3), (1, 2535, 2, 3)])
    check(plan["source"] == 1 and plan["send"], "older lineage never sends: %s" % plan)
    # No rank live: no source, every rank loads the checkpoint.
    plan = dr.decide_state([(0, 0, -1, 5), (0, 0, -1, 5)])
    check(plan == {"source": -1, "send": False, "lineage": 5}, "none live: %s" % plan)


test_lines()
test_state_agreement()
test_env_errors()
test_channel()
test_spare_admission()
test_standby_admission()
test_sampler_resplit()
if failures:
    sys.exit("%d check(s) failed" % len(failures))
print("ddplaunch_recovery units: all passed")
