# Makefile: train (GPU build when nvcc and a GPU are usable, else CPU), train_cpu,
# train_gpu, test, bench, clean. Every build says what it detected.
SHELL := /bin/bash
CC = gcc
CFLAGS = -O3 -march=native -fopenmp -std=gnu11 -Wall -Wextra -Wno-unused-function -Wno-unused-parameter
LDLIBS = -lm

# Open MPI: mpicc gives the include and link flags.
MPICC := $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
  MPI_CFLAGS := $(shell mpicc --showme:compile)
  MPI_LIBS := $(shell mpicc --showme:link)
endif
# CUDA: nvcc, and NCCL inside the toolkit's own folders.
NVCC := $(shell command -v nvcc 2>/dev/null)
ifneq ($(NVCC),)
  CUDA_ROOT := $(abspath $(dir $(NVCC))/..)
endif
GPU_USABLE := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
NVCC_FLAGS = -O3 -std=c++17 -DOMPI_SKIP_MPICXX=1 -gencode arch=compute_90,code=[sm_90,compute_90] -Xcompiler -fopenmp,-Wno-unused-function \
             -I$(CUDA_ROOT)/include -I.
NVCC_LIBS = -L$(CUDA_ROOT)/lib64 -lcublasLt -lcublas -lnccl -lm

HEADERS = common.h config.h args.h params.h schedule.h layout.h data.h ckpt.h metrics.h planner.h runtime.h kernels_cpu.h model_runtime.h

.PHONY: all train test bench clean mpi detect
all: train

include Makefile.faults

detect:
	@echo "build: OpenMP yes (gcc -fopenmp); SIMD $$(echo | $(CC) -march=native -dM -E - | grep -q __AVX512F__ && echo AVX-512 || (echo | $(CC) -march=native -dM -E - | grep -q __AVX2__ && echo AVX2 || echo none))"
	@echo "build: MPI $(if $(MPICC),yes ($(MPICC)),no)"
	@echo "build: CUDA $(if $(NVCC),yes ($(CUDA_ROOT)),no); GPU at build time: $(if $(GPU_USABLE),yes,no)"

# Open MPI is required (the layout runs over it): install it when missing.
mpi:
	@if ! command -v mpicc >/dev/null 2>&1; then \
	  echo "build: Open MPI not found."; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "build: installing it: apt-get install -y openmpi-bin libopenmpi-dev"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null || exit 1; \
	  else \
	    echo "build: install it with: sudo apt-get install -y openmpi-bin libopenmpi-dev"; exit 1; \
	  fi; \
	fi

ifeq ($(GPU_USABLE)$(if $(NVCC),1,),11)
train: train_gpu
	cp train_gpu train.tmp && mv -f train.tmp train
else
train: train_cpu
	cp train_cpu train.tmp && mv -f train.tmp train
endif

train_cpu: train_gpt.c $(HEADERS) | mpi detect
	$(CC) $(CFLAGS) $$(mpicc --showme:compile) -o $@ train_gpt.c $$(mpicc --showme:link) $(LDLIBS)

train_gpu: train_gpt.cu $(HEADERS) kernels_gpu.cuh comm_nccl.h | mpi detect
	$(NVCC) $(NVCC_FLAGS) $$(mpicc --showme:compile) -o $@ train_gpt.cu $(NVCC_LIBS) $$(mpicc --showme:link)

test_gpu: test_gpu.cu $(HEADERS) kernels_gpu.cuh | mpi detect
	$(NVCC) $(NVCC_FLAGS) $$(mpicc --showme:compile) -o $@ test_gpu.cu $(NVCC_LIBS) $$(mpicc --showme:link)

test_gpt: test_gpt.c train_gpt.c $(HEADERS) | mpi detect
	$(CC) $(CFLAGS) -DTESTING $$(mpicc --showme:compile) -o $@ test_gpt.c $$(mpicc --showme:link) $(LDLIBS)

test_layouts: test_layouts.c $(HEADERS) | mpi
	$(CC) $(CFLAGS) $$(mpicc --showme:compile) -o $@ test_layouts.c $$(mpicc --showme:link) $(LDLIBS)

test_planner: test_planner.c planner.h config.h schedule.h common.h
	$(CC) $(CFLAGS) -o $@ test_planner.c $(LDLIBS)

# All tests; the last line is the total "N passed, N failed".
# (fuzzing bounded by FUZZ_SECONDS per harness; clang's libFuzzer is needed for it)
test: train test_gpt test_planner test_layouts test_faults train_asan fuzz_build
	@set -o pipefail; rm -f .test.log; status=0; \
	./test_planner 2>&1 | tee -a .test.log || status=1; \
	./test_gpt 2>&1 | tee -a .test.log || status=1; \
	./test_layouts 2>&1 | tee -a .test.log || status=1; \
	./test_faults 2>&1 | tee -a .test.log || status=1; \
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SECONDS) 2>&1 | tee -a .test.log || status=1; \
	awk '/^[0-9]+ passed, [0-9]+ failed$$/ {p += $$1; f += $$3} END {printf "%d passed, %d failed\n", p, f}' .test.log; \
	exit $$status

bench: dev/bench_cpu.c train_gpt.c $(HEADERS) | mpi detect
	$(CC) $(CFLAGS) $$(mpicc --showme:compile) -o bench_cpu dev/bench_cpu.c $$(mpicc --showme:link) $(LDLIBS)
	./bench_cpu

clean:
	rm -f train train_cpu train_gpu test_gpt test_gpu test_planner test_layouts test_faults train_asan bench_cpu .test.log
	$(MAKE) --no-print-directory fuzz_clean
