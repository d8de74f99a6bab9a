"""Hang test worker (run by ddplaunch under /usr/bin/python3). HANG_MODE selects:

slow   -- reports a new step every 0.4 s for STEPS steps, then exits 0: slow but progressing.
stuck  -- rank 1 reports step 1 and then sleeps inside stuck_in_here(); the others reach
          step 2 and wait: rank 1 is behind, so it is the culprit (its traceback is dumped).
timer  -- torchrun's file timer: on the first attempt rank 1 sleeps inside
          expires(after=2, scope="stuck_step"); everyone else, and every rank of a restart,
          finishes at once.
"""
import os
import sys
import time

mode = os.environ["HANG_MODE"]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"WORKER RANK={rank} ATTEMPT={attempt} MODE={mode}", flush=True)


def stuck_in_here():
    time.sleep(600)


if mode == "slow":
    from ddplaunch_progress import progress

    for step in range(int(os.environ.get("STEPS", "10"))):
        progress(step)
        time.sleep(0.4)
elif mode == "stuck":
    from ddplaunch_progress import progress

    progress(1)
    if attempt == 0 and rank == 1:
        stuck_in_here()
    progress(2)
    if attempt == 0:
        time.sleep(600)  # waits for rank 1, as in a collective
elif mode == "timer":
    if attempt == 0 and rank == 1:
        from torch.distributed.elastic.timer import FileTimerClient, configure, expires

        configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
        with expires(after=2, scope="stuck_step"):
            stuck_in_here()
else:
    sys.exit(f"unknown HANG_MODE {mode}")
print(f"WORKER RANK={rank} DONE", flush=True)
