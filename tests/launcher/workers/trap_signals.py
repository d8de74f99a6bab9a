# Writes its pid to $OUT_DIR/ready_<LOCAL_RANK> once its handlers are in place.
# Records the first signal it gets in $OUT_DIR/signal_<LOCAL_RANK>, then exits 0.
# Without a signal, it stops when $OUT_DIR/go appears (or fails after 60 s).
# (Python rather than a bash trap: bash's SIGINT handling around `wait` is not reliable.)
import os
import signal
import sys
import time

out_dir = os.environ["OUT_DIR"]
local_rank = os.environ["LOCAL_RANK"]


def on_signal(signum, _frame):
    name = signal.Signals(signum).name[3:]
    with open(os.path.join(out_dir, f"signal_{local_rank}"), "w") as f:
        f.write(name + "\n")
    sys.exit(0)


for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2):
    # A signal ignored at start (SIGHUP under nohup) stays ignored, as a shell would leave it.
    if signal.getsignal(sig) != signal.SIG_IGN:
        signal.signal(sig, on_signal)
with open(os.path.join(out_dir, f"ready_{local_rank}"), "w") as f:
    f.write(str(os.getpid()))
for _ in range(600):
    if os.path.exists(os.path.join(out_dir, "go")):
        print(f"rank {os.environ['RANK']} done")
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
