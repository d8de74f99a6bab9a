"""In-place recovery for PyTorch DDP scripts under ``ddplaunch --in_place_recovery``.

No dependency beyond PyTorch: copy this file next to your script, put its folder on
PYTHONPATH, or install ddplaunch's .deb or wheel (which put it on the path). docs/recovery.md,
"PyTorch", has a whole script (examples/pytorch_in_place/train.py); the loop looks like::

    import ddplaunch_recovery as dr

    elastic = dr.Elastic(model, optimizer, scheduler, backend="gloo")  # init_process_group
    elastic.start(resume=load_checkpoint)   # every rank: the checkpoint, or the survivors' state
    sampler = dr.ResumableSampler(len(dataset), batch_size, seed=0, elastic=elastic)
    loader = DataLoader(dataset, batch_size, sampler=sampler, num_workers=2, drop_last=True)
    for epoch in elastic.epochs(num_epochs):
        for x, y in elastic.batches(loader):
            with elastic.step():                       # a membership change ends here
                optimizer.zero_grad()
                loss_fn(elastic.model(x), y).backward()  # elastic.model: the DDP wrapper
                optimizer.step()
                scheduler.step()
            if not elastic.step_done:                  # aborted: the new group redoes it
                continue
        if elastic.rank == 0:
            torch.save(elastic.state_dict(), "ckpt.pt")

On a membership change (ddplaunch's recovery channel, $DDPLAUNCH_RECOVERY_FD, says ``abort``
then ``round``) the step in flight fails (its gloo sockets are shut down; NCCL groups are
aborted), ``step()`` swallows the error, destroys the process group, builds the new round's
group from the values the agent sent, brings ranks lacking state (a new node, a replaced
rank, a rank a step ahead) to the survivors' agreed step by broadcast (parameters, buffers,
optimizer and scheduler state, the progress counters, the CPU RNG), wraps the model in DDP
again, and ``batches()`` goes on with the rest of the epoch split over the new world.
Without the channel (torchrun, or ddplaunch without the flag) it is a plain DDP loop: a
failure raises as usual.

The channel protocol is common/recovery_protocol.hpp's (lines ``<type> key=value ...``).
"""

import contextlib
import datetime
import inspect
import io
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

__all__ = ["Elastic", "ResumableSampler", "RecoveryError", "Channel", "ENV_FD", "ENV_SPARE",
           "ENV_STANDBY"]

ENV_FD = "DDPLAUNCH_RECOVERY_FD"
ENV_CHANGE_WAIT = "DDPLAUNCH_RECOVERY_CHANGE_WAIT"
# 1 for the workers of a spare node: started before the node is admitted, without RANK,
# WORLD_SIZE, MASTER_ADDR and the rest of the round's variables; Elastic() waits for them.
ENV_SPARE = "DDPLAUNCH_SPARE"
# 1 (with ENV_SPARE=1) for a standby worker (--standby_workers): parked to take the place of
# whichever worker of its node dies, so LOCAL_RANK is absent too; its round notice brings it.
ENV_STANDBY = "DDPLAUNCH_STANDBY"
_MAX_LINE = 4096
# After a change was announced, how long a worker waits for its round notice (the agent's
# re-join is bounded by its join_timeout).
_ROUND_WAIT_S = 600.0

try:  # the progress protocol (--hang_timeout), when its helper sits beside this file
    from ddplaunch_progress import progress as _progress
except ImportError:  # pragma: no cover - shipped together

    def _progress(step, **_):
        return False


def decide_state(table):
    """The state agreement from every rank's (live, step, lineage, round), indexed by rank.
    A live rank's state belongs to a lineage: the round in which its group last agreed. Ranks
    of different lineages hold different histories even at the same step (one paused while
    the others re-formed without it, restarted from a checkpoint and caught up): the newest
    lineage is the job's, and only its ranks may be the source. The step is the lowest among
    them (the last step every one of them completed); the source the lowest rank there.
    Returns {"source": rank or -1 (no rank holds state), "send": whether any rank must receive,
    "lineage": the round every rank's state belongs to afterwards}."""
    lineage = max(row[3] for row in table)
    live = [r for r, row in enumerate(table) if row[0]]
    if not live:
        return {"source": -1, "send": False, "lineage": lineage}
    newest = max(table[r][2] for r in live)
    current = [r for r in live if table[r][2] == newest]
    step = min(table[r][1] for r in current)
    source = min(r for r in current if table[r][1] == step)
    send = not all(row[0] and row[1] == step and row[2] == newest for row in table)
    return {"source": source, "send": send, "lineage": lineage}


class RecoveryError(RuntimeError):
    """The agent is gone or sent no round notice in time: recovery cannot go on."""


def format_line(kind, **fields):
    """One protocol line, newline included."""
    parts = [kind] + ["%s=%s" % (k, v) for k, v in fields.items()]
    line = " ".join(parts) + "\n"
    if len(line) > _MAX_LINE or any(c.isspace() for p in parts for c in str(p)):
        raise ValueError("bad recovery line: %r" % line)
    return line


def parse_line(line):
    """(type, {key: value}) of one line, or None when it is not a protocol line."""
    tokens = line.strip().split(" ")
    if not tokens or not tokens[0]:
        return None
    fields = {}
    for token in tokens[1:]:
        key, eq, value = token.partition("=")
        if not eq or not key or not value:
            return None
        fields[key] = value
    return tokens[0], fields


_ROUND_FIELDS = {
    # notice field -> the env contract's variable (what a worker started now would get)
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "group_rank": "GROUP_RANK",
    "group_world_size": "GROUP_WORLD_SIZE",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "role_rank": "ROLE_RANK",
    "role_world_size": "ROLE_WORLD_SIZE",
    "master_addr": "MASTER_ADDR",
    "master_port": "MASTER_PORT",
    "restart_count": "TORCHELASTIC_RESTART_COUNT",
}


def _change_wait():
    """$DDPLAUNCH_RECOVERY_CHANGE_WAIT in seconds (default 60), as the native runtime reads it."""
    text = os.environ.get(ENV_CHANGE_WAIT, "")
    if not text:
        return 60.0
    if not text.isdigit() or not 1 <= int(text) <= 86400:
        raise ValueError("%s=%r: expected whole seconds from 1 to 86400" % (ENV_CHANGE_WAIT, text))
    return float(text)


def _channel_fd():
    """$DDPLAUNCH_RECOVERY_FD as an open descriptor, or None when unset or empty."""
    text = os.environ.get(ENV_FD, "")
    if not text:
        return None
    try:
        fd = int(text)
        os.fstat(fd)
    except (ValueError, OSError):
        raise ValueError("%s=%r is not an open descriptor (expected the number of the agent's "
                         "recovery channel, e.g. 3)" % (ENV_FD, text)) from None
    return fd


class Channel:
    """The worker's end of the agent's recovery channel (a reader thread answers ``abort``)."""

    def __init__(self, fd, local_rank, on_abort):
        self._sock = socket.socket(fileno=fd)  # AF_UNIX stream; close-on-exec from now on
        self._sock.set_inheritable(False)
        self._on_abort = on_abort
        self._write_lock = threading.Lock()
        self._cv = threading.Condition()
        self._pending = None  # the round notice not yet taken (a dict)
        self._changes = 0  # announced changes
        self._taken = 0  # _changes when a notice was last taken
        self._notice_changes = 0
        self._announced = False
        self._eof = None  # why the agent closed the channel
        self.change_wait = _change_wait()
        self.send("hello", pid=os.getpid(), local_rank=local_rank)
        self._reader = threading.Thread(target=self._read_loop, name="ddplaunch-recovery",
                                        daemon=True)
        self._reader.start()

    def send(self, kind, **fields):
        data = format_line(kind, **fields).encode()
        with self._write_lock:
            try:
                self._sock.sendall(data)
            except OSError as e:
                raise RecoveryError("cannot write to the agent's recovery channel: %s" % e)

    def change_pending(self):
        with self._cv:
            return self._changes > self._taken

    def wait_change(self, timeout):
        """True when a membership change came within timeout (False: a plain failure)."""
        with self._cv:
            self._cv.wait_for(lambda: self._changes > self._taken or self._pending
                              or self._eof, timeout)
            if self._changes > self._taken or self._pending:
                return True
            if self._eof:
                raise RecoveryError("the agent closed the recovery channel while this worker "
                                    "waited for a membership change (%s)" % self._eof)
            return False

    def wait_round(self, timeout):
        """The round notice not yet taken (a dict of the `round` line's fields); timeout None:
        as long as the channel is open."""
        with self._cv:
            ready = self._cv.wait_for(lambda: self._pending or self._eof, timeout)
            if self._pending:
                notice, self._pending = self._pending, None
                self._taken = self._notice_changes
                return notice
            if not ready and timeout is not None:
                raise RecoveryError("no round notice from the agent within %.0f s" % timeout)
            raise RecoveryError("the agent closed the recovery channel while this worker "
                                "waited for the round notice (%s)" % self._eof)

    def _read_loop(self):
        buffer = b""
        reason = "end of file"
        while True:
            try:
                chunk = self._sock.recv(4096)
            except InterruptedError:
                continue
            except OSError as e:
                reason = str(e)
                break
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = parse_line(line.decode("utf-8", "replace"))
                if message is None:
                    print("ddplaunch_recovery: ignoring a bad line from the agent: %r" % line,
                          file=sys.stderr)
                    continue
                try:
                    self._handle(*message)
                except Exception as e:  # a bad field: logged, never fatal to the reader
                    print("ddplaunch_recovery: ignoring %r: %s" % (line, e), file=sys.stderr)
            if len(buffer) > _MAX_LINE:
                buffer = b""
        with self._cv:
            self._eof = reason
            self._cv.notify_all()

    def _handle(self, kind, fields):
        if kind == "abort":
            self._change("the agent aborted round %s (%s)" % (fields["round"],
                                                               fields.get("reason", "no reason")))
            self.send("aborted", round=int(fields["round"]))
        elif kind == "round":
            notice = {k: fields[k] for k in ["round"] + list(_ROUND_FIELDS)}
            if "local_rank" in fields:  # optional: older agents leave it out
                notice["local_rank"] = fields["local_rank"]
            with self._cv:
                announced = self._announced
            if not announced:
                self._change("round %s began" % notice["round"])
            with self._cv:
                self._announced = False
                self._notice_changes = self._changes
                self._pending = notice
                self._cv.notify_all()

    def _change(self, why):
        with self._cv:
            self._changes += 1
            self._announced = True
            self._cv.notify_all()
        self._on_abort(why)


def _tcp_sockets():
    """The descriptors of this process' TCP connections (listening sockets left out)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink("/proc/self/fd/" + name).startswith("socket:"):
                continue
            fd = int(name)
            probe = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            # Connections only: gloo's listener aborts the process when its accept() fails.
            if probe.family in (socket.AF_INET, socket.AF_INET6) and \
                    probe.type == socket.SOCK_STREAM and \
                    not probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                found.add(fd)
        finally:
            probe.close()
    return found


def _shutdown_sockets(fds):
    """Shuts the TCP connections among fds down (not closed: their owner closes them), so
    every read or write on them fails at once: the gloo collective in flight raises. A number
    that is no longer a TCP connection (closed and reused since) is left alone."""
    for fd in fds & _tcp_sockets():
        try:
            probe = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            probe.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            probe.close()


class Elastic:
    """A DDP model, its optimizer and scheduler, and the loop's progress, kept through
    membership changes. elastic.model is the DDP wrapper to call; rank and world_size are the
    current round's."""

    def __init__(self, module, optimizer=None, scheduler=None, backend=None, device=None,
                 ddp_kwargs=None, extra_state=None, timeout_s=300):
        self.module = module
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.device = torch.device(device) if device else next(module.parameters()).device
        self.backend = backend or ("nccl" if self.device.type == "cuda" else "gloo")
        self.ddp_kwargs = dict(ddp_kwargs or {})
        # Optional (get, set) pair of callables for more state to carry (e.g. an EMA).
        self.extra_state = extra_state
        self.timeout_s = timeout_s
        self.model = None
        self.epoch = 0  # epochs completed
        self.position = 0  # samples of this epoch consumed by all ranks together
        self.global_step = 0  # optimizer steps completed
        self.batch_size = None  # per rank, set by ResumableSampler
        self.round = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        self.recoveries = 0
        self.generation = 0  # bumped by every recovery: batches() rebuilds its iterator
        self.last_recovery = None  # dict: round, step, source, state_bytes, seconds
        # False after a step() whose step was aborted by a change (redone by the new group).
        self.step_done = False
        self._live = False
        # The round in which this rank's state was last agreed (its lineage; -1 before any
        # agreement; rounds only grow over a job): see decide_state.
        self._lineage = -1
        self._resume = None  # start()'s resume, for a recovery in which no rank holds state
        self._group_fds = set()
        self._building = False
        self._fds_before = set()
        self._report_stepped = False
        self._stepped = False
        self._lock = threading.Lock()
        self._aborted = False
        if optimizer is not None:
            optimizer.register_step_post_hook(self._on_optimizer_step)
        fd = _channel_fd()
        # A standby has no LOCAL_RANK before its notice: its hello says 0 (the agent knows each
        # worker by its channel).
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
        # hello before the group is built (building waits for every rank).
        self.channel = Channel(fd, local_rank, self._abort) if fd is not None else None
        if os.environ.get(ENV_SPARE) == "1" or os.environ.get(ENV_STANDBY) == "1":
            self._await_admission()
        self._build()
        if self.channel:
            self.channel.send("built", round=self.round)

    # -- the group ------------------------------------------------------------------------

    @property
    def rank(self):
        return dist.get_rank()

    @property
    def world_size(self):
        return dist.get_world_size()

    def _build(self):
        """init_process_group from the environment, remembering the group's sockets."""
        with self._lock:
            self._fds_before = _tcp_sockets()
            self._building = True
            self._aborted = False
        try:
            kwargs = {}
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
                if "device_id" in inspect.signature(dist.init_process_group).parameters:
                    kwargs["device_id"] = self.device  # 2.3+: the communicator at once
            dist.init_process_group(self.backend, init_method="env://",
                                    timeout=datetime.timedelta(seconds=self.timeout_s),
                                    **kwargs)
        finally:
            with self._lock:
                self._building = False
                self._group_fds = _tcp_sockets() - self._fds_before
                if self._aborted:  # a change came while it was built: it is over already
                    _shutdown_sockets(self._group_fds)

    def _await_admission(self):
        """A spare's worker: the model and optimizer are built (torch imported, the script's
        set-up done); the round that admits this node brings the rest of the environment. A
        standby's brings its LOCAL_RANK too."""
        standby = os.environ.get(ENV_STANDBY) == "1"
        if standby and os.environ.get(ENV_SPARE) != "1":
            raise ValueError("%s=1 without %s=1: a standby worker is a parked spare; the agent "
                             "sets both" % (ENV_STANDBY, ENV_SPARE))
        if self.channel is None:
            raise ValueError("%s=1 without %s: a spare's worker waits for its place on the "
                             "agent's recovery channel" % (ENV_SPARE, ENV_FD))
        notice = self.channel.wait_round(None)
        if standby and not notice.get("local_rank", "").isdigit():
            raise RecoveryError("the round notice %s that promotes this standby worker (%s=1) "
                                "has local_rank=%s: expected local_rank=<int> >= 0, the place "
                                "it takes (an agent older than --standby_workers?)"
                                % (notice["round"], ENV_STANDBY,
                                   notice.get("local_rank", "<absent>")))
        for key, var in _ROUND_FIELDS.items():
            os.environ[var] = notice[key]
        # Only a standby takes LOCAL_RANK from the notice: a spare's was set when it started,
        # its place already known, and may be virtual (--virtual_local_rank: 0).
        if standby:
            os.environ["LOCAL_RANK"] = notice["local_rank"]
        os.environ.pop(ENV_SPARE, None)  # the DataLoader's processes are no spares
        os.environ.pop(ENV_STANDBY, None)
        self.round = int(notice["round"])
        self._report_stepped = True  # the agent times the admission to the first step
        if standby and self.device.type == "cuda":
            # The script chose cuda:$LOCAL_RANK before Elastic(), a guess on a standby: its GPU
            # is the place it took. module.to() moves the tensors inside the same Parameter
            # objects the optimizer holds, and a parked standby never stepped (no state yet).
            device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
            if device != self.device:
                self.module.to(device)
                self.device = device

    def _abort(self, why):
        """On the reader thread: make the collective in flight fail now."""
        with self._lock:
            self._aborted = True
            if self._building:
                # The store connection and pairs opened so far: the build fails at once.
                _shutdown_sockets(_tcp_sockets() - self._fds_before)
                return
            fds = set(self._group_fds)
        if self.backend == "nccl" and dist.is_initialized():
            pg = dist.distributed_c10d._get_default_group()
            if hasattr(pg, "abort"):  # ncclCommAbort (PyTorch 2.6+)
                try:
                    pg.abort()
                except Exception as e:
                    print("ddplaunch_recovery: abort() failed: %s" % e, file=sys.stderr)
            # Without abort(): the collective ends at the group's timeout (timeout_s).
        _shutdown_sockets(fds)

    def _destroy(self):
        self.model = None
        with self._lock:
            fds, self._group_fds = self._group_fds, set()
        _shutdown_sockets(fds)  # already, unless no collective was in flight
        if not dist.is_initialized():
            return
        try:
            if self.backend == "nccl" and hasattr(dist.distributed_c10d,
                                                  "_abort_process_group"):
                dist.distributed_c10d._abort_process_group()
            else:
                dist.destroy_process_group()
        except Exception as e:
            print("ddplaunch_recovery: destroying the old group: %s" % e, file=sys.stderr)

    # -- state ------------------------------------------------------------------------------

    def state_dict(self):
        """Everything a checkpoint needs (model, optimizer, scheduler, progress)."""
        state = {
            "model": self.module.state_dict(),
            "progress": {"epoch": self.epoch, "position": self.position,
                         "global_step": self.global_step},
        }
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        if self.extra_state is not None:
            state["extra"] = self.extra_state[0]()
        return state

    def load_state_dict(self, state):
        self.module.load_state_dict(state["model"])
        if self.optimizer is not None and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.extra_state is not None and "extra" in state:
            self.extra_state[1](state["extra"])
        progress = state.get("progress", {})
        self.epoch = int(progress.get("epoch", 0))
        self.position = int(progress.get("position", 0))
        self.global_step = int(progress.get("global_step", 0))

    def _comm_device(self):
        return self.device if self.backend == "nccl" else torch.device("cpu")

    def _agree(self, resume):
        """Every rank, after every build: agree on the step, send the state where needed.
        Returns (source rank or -1, bytes sent)."""
        dev = self._comm_device()
        mine = torch.tensor([1 if self._live else 0, self.global_step, self._lineage, self.round],
                            dtype=torch.int64, device=dev)
        everyone = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(everyone, mine)
        table = [tuple(int(x) for x in t) for t in everyone]
        plan = decide_state(table)
        if plan["source"] < 0:
            if resume is not None:
                resume()  # no rank holds state: every rank loads the checkpoint itself
            sent = 0
        elif plan["send"]:
            if self.rank != plan["source"]:
                self._live = False  # a mix of two states until the broadcast ends
            sent = self._send_state(plan["source"])
        else:
            sent = 0
        self._lineage = plan["lineage"]
        return (plan["source"] if plan["send"] else -1), sent

    def _send_state(self, source):
        dev = self._comm_device()
        sent = 0
        with torch.no_grad():
            for tensor in list(self.module.parameters()) + list(self.module.buffers()):
                staged = tensor.data if tensor.device == dev else tensor.data.to(dev)
                dist.broadcast(staged, src=source)
                if staged is not tensor.data:
                    tensor.data.copy_(staged)
                sent += tensor.numel() * tensor.element_size()
        length = torch.zeros(1, dtype=torch.int64, device=dev)
        if self.rank == source:
            state = self.state_dict()
            del state["model"]  # sent above, tensor by tensor
            state["rng"] = torch.get_rng_state()
            buf = io.BytesIO()
            torch.save(state, buf)
            blob = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8).to(dev)
            length[0] = blob.numel()
        dist.broadcast(length, src=source)
        if self.rank != source:
            blob = torch.empty(int(length[0]), dtype=torch.uint8, device=dev)
        dist.broadcast(blob, src=source)
        sent += int(length[0])
        if self.rank != source:
            state = torch.load(io.BytesIO(blob.cpu().numpy().tobytes()), weights_only=False)
            state["model"] = self.module.state_dict()  # already received
            self.load_state_dict(state)
            torch.set_rng_state(state["rng"])
        return sent

    def _wrap(self):
        kwargs = dict(self.ddp_kwargs)
        if self.device.type == "cuda":
            kwargs.setdefault("device_ids", [self.device])
        self.model = DistributedDataParallel(self.module, **kwargs)

    def start(self, resume=None):
        """The first state agreement. resume() is called on every rank when no rank holds
        live state (the job's first start, or every rank restarted): load a checkpoint there
        (load_state_dict). A rank started into a running job gets the survivors' state. A
        change during it is recovered from, as in step()."""
        self._resume = resume
        try:
            self._sync()
        except Exception:
            if self.channel is None or not self.channel.wait_change(self.channel.change_wait):
                raise
            self._recover()

    def _sync(self):
        source, sent = self._agree(self._resume)
        self._live = True
        self._wrap()
        if self.channel:
            self.channel.send("joined", round=self.round, rank=self.rank,
                              step=self.global_step, source=source, state_bytes=sent)
        return source, sent

    def close(self):
        """Destroys the process group (call once the loop is done)."""
        # Progress once more: what follows (PyTorch's teardown at exit, seconds on a loaded
        # machine) starts a fresh --hang_timeout window instead of the last step's.
        _progress(self.global_step)
        self.model = None
        if dist.is_initialized():
            dist.destroy_process_group()

    # -- recovery ---------------------------------------------------------------------------

    def _recover(self):
        """The new round's group, in place. Loops while changes keep coming during builds."""
        began = time.monotonic()
        while True:
            notice = self.channel.wait_round(_ROUND_WAIT_S)
            self._destroy()
            for key, var in _ROUND_FIELDS.items():
                os.environ[var] = notice[key]
            self.round = int(notice["round"])
            try:
                self._build()
                self.channel.send("built", round=self.round)
                source, sent = self._sync()
            except RecoveryError:
                raise
            except Exception:
                # Another change while the group formed: recover again, else a failure.
                if self.channel.change_pending() or self.channel.wait_change(
                        self.channel.change_wait):
                    continue
                raise
            break
        self.recoveries += 1
        self.generation += 1
        self._report_stepped = True
        self.last_recovery = {"round": self.round, "step": self.global_step, "source": source,
                              "state_bytes": sent, "seconds": time.monotonic() - began}
        print("ddplaunch_recovery: in-place recovery: round %d, world %d, rank %d, resumed at "
              "step %d (state from rank %d, %d bytes) in %.3f s" %
              (self.round, self.world_size, self.rank, self.global_step, source, sent,
               self.last_recovery["seconds"]), file=sys.stderr, flush=True)

    def _on_optimizer_step(self, *_):
        self._stepped = True

    @contextlib.contextmanager
    def step(self):
        """One training step. The step counts as done once optimizer.step() ran (or the block
        ended without one, if no optimizer is tracked). A failure here is a membership change
        when the agent announces one: it is recovered from and swallowed; otherwise it raises."""
        self._stepped = False
        self.step_done = False
        _progress(self.global_step)
        try:
            yield
        except Exception:
            if self._stepped:
                self._advance()
                self.step_done = True
            if self.channel is None or not self.channel.wait_change(self.channel.change_wait):
                raise
            if self.optimizer is not None:
                self.optimizer.zero_grad(set_to_none=True)
            self._recover()
            return
        self._advance()
        self.step_done = True

    def _advance(self):
        self.global_step += 1
        self.position += (self.batch_size or 0) * self.world_size
        if self._report_stepped and self.channel:
            self._report_stepped = False
            self.channel.send("stepped", round=self.round, step=self.global_step)

    # -- the loop ---------------------------------------------------------------------------

    def epochs(self, count):
        """The epochs still to train (from the agreed one), ending each as the body returns."""
        while self.epoch < count:
            yield self.epoch
            self.epoch += 1
            self.position = 0

    def batches(self, loader):
        """The loader's batches from the current position; rebuilt for the new world after a
        recovery (the loader's sampler must be a ResumableSampler of this Elastic)."""
        while True:
            generation = self.generation
            iterator = iter(loader)
            for batch in iterator:
                if self.channel and self.channel.change_pending():
                    # Announced between steps: recover before starting another.
                    self._recover()
                if self.generation != generation:
                    break
                yield batch
                if self.generation != generation:
                    break
            else:
                return
            del iterator  # its workers end; the next one starts at the new position


class ResumableSampler(torch.utils.data.Sampler):
    """DistributedSampler-style sharding that follows an Elastic's rank, world and position:
    the epoch's permutation (seed + epoch), from the samples all ranks consumed so far, split
    rank-strided over the current world, in whole batches per rank (the tail of an epoch that
    does not fill a batch on every rank is dropped, as at any world size)."""

    def __init__(self, length, batch_size, elastic, seed=0, shuffle=True):
        self.length = length
        self.batch_size = batch_size
        self.elastic = elastic
        self.seed = seed
        self.shuffle = shuffle
        elastic.batch_size = batch_size

    def indices(self, epoch, position, rank, world):
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + epoch)
            order = torch.randperm(self.length, generator=g).tolist()
        else:
            order = list(range(self.length))
        rest = order[position:]
        per_rank = len(rest) // world // self.batch_size * self.batch_size
        return rest[rank::world][:per_rank]

    def __iter__(self):
        e = self.elastic
        return iter(self.indices(e.epoch, e.position, e.rank, e.world_size))

    def __len__(self):
        e = self.elastic
        return len(self.indices(e.epoch, e.position, e.rank, e.world_size))
