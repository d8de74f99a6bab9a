#!/usr/bin/env bash
# Goodput under chaos (docs/chaos.md): netns hosts, one ddplaunch (or torchrun) agent each, a
# seeded schedule of faults; invariants checked on every run. Needs root and `ip`.
#   scripts/bench/chaos.sh --short                       # CI: ~2 min, exit 1 on a violation
#   scripts/bench/chaos.sh --seed 7 --duration 600 --interval 60 --baseline
# Options are bench/chaos/chaos.py's (--help). Exit 77: no network namespaces here (skip).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python3 bench/chaos/chaos.py "$@"
