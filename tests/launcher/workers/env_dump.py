"""Writes this worker's whole environment as JSON to $ENV_DUMP_DIR/env_<RANK>.json.

torchrun2_compat_test runs it under torchrun 2.x and under ddplaunch with the same command
line and compares what every rank received.
"""
import json
import os

path = os.path.join(os.environ["ENV_DUMP_DIR"], "env_%s.json" % os.environ["RANK"])
with open(path + ".tmp", "w") as f:
    json.dump(dict(os.environ), f, indent=1, sort_keys=True)
os.rename(path + ".tmp", path)
