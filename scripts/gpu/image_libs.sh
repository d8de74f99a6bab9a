# Sourced by scripts/gpu/{pack,check_bundle,run}.sh: which shared libraries the GPU image
# provides, so the bundle leaves them out (docs/gpu.md, "What the image provides").
# glibc (the image's own: our binaries need at most the GLIBC version MANIFEST.txt names), the
# NVIDIA driver, and from PyTorch 2.11's CUDA 13 wheels (nvidia-cublas, nvidia-nccl-cu13) the
# two libraries too large to carry: cuBLAS (54 + 542 MB here) and NCCL (218 MB here).
# shellcheck shell=bash
IMAGE_LIBS=(
  linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2
  librt.so.1 libutil.so.1 libresolv.so.2 libanl.so.1
  libcuda.so.1
  libcublas.so.13 libcublasLt.so.13 libnccl.so.2
)
# Carried, but used only where the image's copy is older than the binaries need.
COMPAT_LIBS=(libstdc++.so.6 libgcc_s.so.1)
# The image's libraries that run.sh finds there (directories put on LD_LIBRARY_PATH).
# shellcheck disable=SC2034  # used by the scripts that source this
IMAGE_FIND_LIBS=(libcublas.so.13 libcublasLt.so.13 libnccl.so.2)

is_image_lib() { [[ " ${IMAGE_LIBS[*]} " == *" $1 "* ]]; }
is_compat_lib() { [[ " ${COMPAT_LIBS[*]} " == *" $1 "* ]]; }
