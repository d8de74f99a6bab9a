"""A PyTorch worker guarding a step with torch's file timer, as torchrun's users do.

Usage: file_timer_worker.py hang|finish
The FIFO comes from $TORCHELASTIC_TIMER_FILE (the agent's file-timer server). With "hang"
the step sleeps past its 1 s deadline and the server must kill the process; with "finish"
it ends in time, releases the timer and exits 0.
"""
import os
import sys
import time

import torch.distributed.elastic.timer as timer

mode = sys.argv[1]
timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
print("pid %d" % os.getpid(), flush=True)
with timer.expires(after=1, scope="step"):
    time.sleep(60 if mode == "hang" else 0.1)
print("released", flush=True)
