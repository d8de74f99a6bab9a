"""Progress reports from a Python (e.g. PyTorch) worker to its ddplaunch agent.

Dependency-free: copy this file next to your script or put its folder on PYTHONPATH.

Usage::

    from ddplaunch_progress import progress

    for step, batch in enumerate(loader):
        progress(step)                      # "I am at step N"
        loss = model(batch).sum()
        loss.backward()
        progress(step, op="allreduce", seq=step, phase="enter")
        ...

``progress()`` is a no-op unless ``$DDPLAUNCH_PROGRESS_FILE`` is set (ddplaunch sets it for
every worker). It never blocks and never raises because the agent is slow or gone: a line
that cannot be written at once is dropped.

The protocol (docs/hangs.md, "The progress protocol"): one line per report, written with a
single write(2) to the FIFO named by ``$DDPLAUNCH_PROGRESS_FILE``::

    v1 rank=<int> pid=<int> step=<int64> [op=<name> seq=<int64> phase=enter|exit]\\n

- ``v1`` first, then space-separated ``key=value`` tokens; readers ignore keys they do not
  know, so later versions may add some.
- ``rank`` is the global rank ($RANK), ``pid`` the writer's pid, ``step`` a counter that
  grows while work gets done (>= 0).
- ``op`` names the operation being entered or left (no whitespace), ``seq`` its sequence
  number (for collectives: the same on every rank), ``phase`` whether it starts or ends.
- A line is at most PIPE_BUF (4096) bytes, so each write is atomic and the lines of
  different workers never interleave.

Any program can speak it: ``echo "v1 rank=$RANK pid=$$ step=7" > "$DDPLAUNCH_PROGRESS_FILE"``
(a shell's ``>`` blocks while no agent reads, where this module drops the line instead).
"""

import errno
import os
import stat
import time

__all__ = ["ENV_VAR", "format_line", "progress"]

ENV_VAR = "DDPLAUNCH_PROGRESS_FILE"

_PIPE_BUF = 4096
_MAX_OP_BYTES = 256
# After a failed open (no agent reading yet, or gone), wait this long before trying again.
_REOPEN_AFTER_S = 1.0

_fd = None  # the FIFO, opened once
_fd_path = None  # the path _fd was opened for
_next_open = 0.0  # time.monotonic() before which no open is tried


def format_line(rank, pid, step, op=None, seq=None, phase=None):
    """One protocol line, newline included. Whitespace in op becomes '_'."""
    if int(step) < 0 or (seq is not None and int(seq) < 0):
        raise ValueError("step and seq must be >= 0, not %r and %r" % (step, seq))
    parts = ["v1", "rank=%d" % int(rank), "pid=%d" % int(pid), "step=%d" % int(step)]
    if op:
        op = "".join("_" if ord(c) <= 32 or ord(c) == 127 else c for c in str(op))
        parts.append("op=" + op.encode("utf-8")[:_MAX_OP_BYTES].decode("utf-8", "ignore"))
    if seq is not None:
        parts.append("seq=%d" % int(seq))
    if phase is not None:
        if phase not in ("enter", "exit"):
            raise ValueError("phase must be 'enter' or 'exit', not %r" % (phase,))
        parts.append("phase=" + phase)
    return " ".join(parts) + "\n"


def _close():
    global _fd, _fd_path
    if _fd is not None:
        try:
            os.close(_fd)
        except OSError:
            pass
    _fd = None
    _fd_path = None


def _open(path):
    """The FIFO at path opened for writing without blocking, or None (retried later)."""
    global _fd, _fd_path, _next_open
    if _fd is not None and _fd_path == path:
        return _fd
    _close()
    now = time.monotonic()
    if now < _next_open:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        # ENXIO: no agent reads the FIFO; ENOENT: it is not there (yet, or any more).
        _next_open = now + _REOPEN_AFTER_S
        return None
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        # Never write over a regular file someone named in the variable.
        os.close(fd)
        _next_open = float("inf")
        return None
    _fd, _fd_path = fd, path
    return fd


def progress(step, op=None, seq=None, phase=None):
    """Reports that this worker reached step (and, optionally, entered or left op number seq).

    Returns True when the line was written, False when it was dropped or reporting is off
    ($DDPLAUNCH_PROGRESS_FILE unset). Raises ValueError only for bad arguments.
    """
    path = os.environ.get(ENV_VAR)
    if not path:
        return False
    try:
        rank = int(os.environ.get("RANK", ""))
    except ValueError:
        return False
    line = format_line(rank, os.getpid(), step, op, seq, phase).encode("utf-8")
    if len(line) > _PIPE_BUF:
        return False
    fd = _open(path)
    if fd is None:
        return False
    try:
        return os.write(fd, line) == len(line)
    except OSError as e:
        # EAGAIN: the pipe is full (the agent is not reading); EPIPE: the agent is gone.
        if e.errno != errno.EAGAIN:
            _close()
            _next_open = time.monotonic() + _REOPEN_AFTER_S
        return False
