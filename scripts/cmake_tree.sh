# shellcheck shell=bash
# Sourced by the scripts that configure a build tree (build.sh, sanitize.sh, fuzz.sh, demo.sh).
#
# tree_generator DIR: sets the array `generator` to (-G Ninja) for a tree not configured yet,
# when Ninja is installed (scripts/setup.sh installs it), else to (): an existing tree keeps
# its generator. Ninja starts a target's sources before the libraries it links are archived,
# and builds several named targets at once (CMake's Makefiles build them one after another).
tree_generator() {
  generator=()
  if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
}
