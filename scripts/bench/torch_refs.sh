# shellcheck shell=bash
# Sourced by the benchmark drivers that compare against PyTorch: which PyTorch is the reference.
#   TORCH_PYTHONS  space-separated Python interpreters, each with its own torch; every reference
#                  figure is measured once per interpreter, in the same run, and labelled with
#                  its torch version. Default: Debian's /usr/bin/python3 (PyTorch 1.13).
#                  torchrun 2.15 beside 1.13:
#                  TORCH_PYTHONS="/usr/bin/python3 /var/cache/ddplaunch/venvs/torch-2.15.0/bin/python"
# Defines TORCH_PYS (array) and torch_version PY ("1.13.0a0", "2.15.0": no local "+cu" tag).
TORCH_PYTHONS=${TORCH_PYTHONS:-/usr/bin/python3}
read -r -a TORCH_PYS <<< "$TORCH_PYTHONS"
torch_version() {
  "$1" -c 'import torch; print(torch.__version__.split("+")[0])' 2> /dev/null
}
for _py in "${TORCH_PYS[@]}"; do
  if [ -z "$(torch_version "$_py")" ]; then
    echo "TORCH_PYTHONS: $_py cannot import torch (scripts/setup_torch.sh makes the venvs)" >&2
    exit 2
  fi
done
unset _py
