#!/usr/bin/env bash
# dev/find_nccl.sh CUDA_ROOT: where NCCL is, as the compiler and linker flags of the GPU
# build (the Makefile's NCCL_FLAGS; dev/gpu_check.sh's build without make). Looks in the
# CUDA toolkit's own folders (this project's build machine), then in the nvidia-nccl Python
# wheel that PyTorch brings (site-packages/nvidia/nccl: its library may be only
# libnccl.so.2, so it is named by file, with an rpath), else leaves NCCL to the system's
# paths (/usr/include/nccl.h, -lnccl).
cuda=${1:-/usr/local/cuda}
wheel=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
for d in "$cuda" $wheel; do
  [ -f "$d/include/nccl.h" ] || continue
  for lib in "$d"/lib64/libnccl.so "$d"/lib/libnccl.so "$d"/lib64/libnccl.so.2 "$d"/lib/libnccl.so.2; do
    if [ -f "$lib" ]; then
      echo "-I$d/include -L$(dirname "$lib") -l:$(basename "$lib") -Xlinker -rpath -Xlinker $(dirname "$lib")"
      exit 0
    fi
  done
done
echo "-lnccl"
