#!/usr/bin/env bash
# process tier: bash completion (packaging/ddplaunch-completion.bash) against the built
# programs, the way bash calls it: COMP_WORDS/COMP_CWORD set, the function run, COMPREPLY read.
#   completion_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build_dir=$2
export PATH=$build_dir:$PATH
# shellcheck source=packaging/ddplaunch-completion.bash
source "$source_dir/packaging/ddplaunch-completion.bash"
fail() { echo "FAIL: $*" >&2; exit 1; }

# complete WORD... : completes the last word of the command line WORD...
complete_line() {
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _ddplaunch
  printf '%s\n' "${COMPREPLY[@]}"
}
offers() { grep -qx -- "$2" <<<"$1"; }

got=$(complete_line ddplaunch --npr)
offers "$got" --nproc_per_node || fail "'ddplaunch --npr' offers '$got', not --nproc_per_node"
offers "$got" --nproc-per-node || fail "'ddplaunch --npr' offers '$got', not --nproc-per-node"
got=$(complete_line ddplaunch --vers)
[ "$got" = --version ] || fail "'ddplaunch --vers' offers '$got', expected --version"

# Values: both spellings of an option with a value, separate and after '=' (bash splits there).
got=$(complete_line ddplaunch --nproc_per_node g)
[ "$got" = gpu ] || fail "'ddplaunch --nproc_per_node g' offers '$got', expected gpu"
got=$(complete_line ddplaunch --rdzv-backend = "")
offers "$got" c10d || fail "'ddplaunch --rdzv-backend=' offers '$got', not c10d"

# After PROGRAM the words are the program's: no ddplaunch options, even after options with values.
got=$(complete_line ddplaunch --nnodes 1 --standalone train.py --npr)
[ -z "$got" ] || fail "after the program, 'ddplaunch ... train.py --npr' offers '$got'"
got=$(complete_line ddplaunch --nproc_per_node = 2 train.py --npr)
[ -z "$got" ] || fail "after the program, 'ddplaunch --nproc_per_node=2 train.py --npr' offers '$got'"
got=$(complete_line ddplaunch --nnodes 1 --standa)
[ "$got" = --standalone ] || fail "'ddplaunch --nnodes 1 --standa' offers '$got', expected --standalone"

# ddpstore: its own options, and the values of a set from its --help ({auto,epoll,io_uring}).
got=$(complete_line ddpstore --po)
[ "$got" = --port ] || fail "'ddpstore --po' offers '$got', expected --port"
got=$(complete_line ddpstore --io "")
{ offers "$got" epoll && offers "$got" io_uring; } || fail "'ddpstore --io ' offers '$got'"
echo "ok: completion of options and values for ddplaunch and ddpstore"
