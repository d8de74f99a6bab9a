"""Detection-latency worker for scripts/bench/hang.sh (runs under torchrun or ddplaunch with
TORCHELASTIC_ENABLE_FILE_TIMER=1). Attempt 0: rank 1 arms a file-timer scope of AFTER
seconds around a sleep that never ends, after recording the scope's deadline and starting a
watcher (its own session, so stopping the group leaves it) that records when rank 1 is gone.
Attempt 1: every rank records when it started and exits 0.
Files in $OUT: deadline, reaped, restarted (wall-clock seconds)."""
import os
import sys
import time

out = os.environ["OUT"]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
after = float(os.environ.get("AFTER", "1"))


def record(name, value):
    with open(os.path.join(out, name), "w") as f:
        f.write(f"{value:.6f}\n")


if attempt > 0:
    if rank == 0:
        record("restarted", time.time())
    sys.exit(0)
if rank != 1:
    time.sleep(600)
    sys.exit(0)

from torch.distributed.elastic.timer import FileTimerClient, configure, expires

configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
parent = os.getpid()
if os.fork() == 0:
    os.setsid()
    while True:
        try:
            os.kill(parent, 0)
            with open(f"/proc/{parent}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.001)
    record("reaped", time.time())
    os._exit(0)
with expires(after=after, scope="bench_step"):
    record("deadline", time.time() + after)
    time.sleep(600)
