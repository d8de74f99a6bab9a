# Rank 1 fails inside PyTorch's @record, which writes TORCHELASTIC_ERROR_FILE in PyTorch's
# own format; rank 0 waits to be stopped.
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if os.environ["LOCAL_RANK"] == "1":
        raise ValueError("rank 1 found a NaN in the loss")
    time.sleep(60)


if __name__ == "__main__":
    main()
