# Makefile: train (GPU build when nvcc and a GPU are usable, else CPU), train_cpu,
# train_gpu, train_gpu_emu / test_gpu_emu (the GPU build on the CUDA emulator), test, bench,
# clean. Every build says what it detected.
SHELL := /bin/bash
CC = gcc
CFLAGS = -O3 -march=native -fopenmp -std=gnu11 -I. -Wall -Wextra -Wno-unused-parameter
LDLIBS = -lm

# Open MPI: mpicc gives the include and link flags (looked up when a recipe runs: the mpi target may
# have just installed it).
# MPI=none: build against nompi/mpi.h, a one-process stand-in, instead of Open MPI: single-
# rank runs only, for a machine that can install nothing (the lent GPU machine).
ifeq ($(MPI),none)
  MPI_COMPILE = -Inompi
  MPI_LINK =
  NEED_MPI =
else
  MPI_COMPILE = $$(mpicc --showme:compile)
  MPI_LINK = $$(mpicc --showme:link)
  NEED_MPI = mpi
endif
# CUDA: nvcc; NCCL in the toolkit's own folders, else PyTorch's nvidia-nccl wheel, else the
# system's (dev/find_nccl.sh).
NVCC := $(shell command -v nvcc 2>/dev/null)
ifneq ($(NVCC),)
  CUDA_ROOT := $(abspath $(dir $(NVCC))/..)
  NCCL_FLAGS := $(shell dev/find_nccl.sh $(CUDA_ROOT))
endif
GPU_USABLE := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
# CUDA_ARCH: the GPU architectures the build's machine code is for. Default a fat binary for the
# A100 (sm_80: also runs on RTX 30xx sm_86 and RTX 40xx / L40S sm_89) and Hopper (sm_90), plus
# sm_90's PTX for later parts; CUDA_ARCH=80, 86, 89 or 90 (or a list: CUDA_ARCH="80 90") builds
# just those, each with its PTX. The kernels need sm_80 (bf16 mma.sync, ldmatrix) and no more.
CUDA_ARCH ?= 80 90
CUDA_ARCH_BAD := $(filter-out 80 86 87 89 90 100 120,$(CUDA_ARCH))
ifneq ($(CUDA_ARCH_BAD),)
  $(error CUDA_ARCH=$(CUDA_ARCH_BAD): not a supported architecture (80, 86, 89, 90; 100, 120 for Blackwell))
endif
CUDA_GENCODE = $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
               -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
# (the binaries are rebuilt when the list changes: .cuda_arch holds the last one built)
CUDA_ARCH_STAMP := $(shell a='$(CUDA_ARCH)'; [ "$$(cat .cuda_arch 2>/dev/null)" = "$$a" ] || echo "$$a" > .cuda_arch; \
                     echo .cuda_arch)
NVCC_FLAGS = -O3 -std=c++17 -DOMPI_SKIP_MPICXX=1 $(CUDA_GENCODE) -DCUDA_ARCH_LIST='"$(CUDA_ARCH)"' -Xcompiler -fopenmp \
             -I$(CUDA_ROOT)/include -I.
NVCC_LIBS = -L$(CUDA_ROOT)/lib64 -lcublasLt -lcublas $(NCCL_FLAGS) -lm

# The folders' layers, lowest first: a file includes only files of its own layer or of one before it
# (backend/cpu/ and backend/gpu/ are backend's; scripts/check_headers.py checks it).
LAYERS = base layout data backend layer_parallel model parallel planner runtime
HEADERS = $(wildcard $(addsuffix /*.h,$(LAYERS) backend/cpu backend/gpu))
GPU_HEADERS = $(wildcard backend/gpu/*.cuh)

.PHONY: all train test binaries bench clean mpi detect check_headers
all: train

# Every function is static in a header. The trainers include all of them, so there an unused
# one is dead code and -Wunused-function (in -Wall) says so; the tests and tools include them
# for part of what they hold, so for them the warning is off.
test_gpt test_layouts test_planner ckpt_compare sim_schedule sim_wlb hf_logits bench_cpu: CFLAGS += -Wno-unused-function
test_gpu: NVCC_FLAGS += -Xcompiler -Wno-unused-function
test_gpu_emu test_gpu_emu_asan test_emu: EMU_CXX += -Wno-unused-function

include Makefile.faults

detect:
	@echo "build: OpenMP yes (gcc -fopenmp); SIMD $$(echo | $(CC) -march=native -dM -E - | grep -q __AVX512F__ && echo AVX-512 || (echo | $(CC) -march=native -dM -E - | grep -q __AVX2__ && echo AVX2 || echo none))"
	@echo "build: MPI $(if $(filter none,$(MPI)),none (MPI=none: nompi/mpi.h, one rank only),$$(command -v mpicc >/dev/null && echo "yes ($$(command -v mpicc))" || echo no))"
	@echo "build: CUDA $(if $(NVCC),yes ($(CUDA_ROOT); NCCL: $(NCCL_FLAGS)),no); GPU at build time: $(if $(GPU_USABLE),yes,no)"

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

train_cpu: train_gpt.c $(HEADERS) | $(NEED_MPI) detect
	$(CC) $(CFLAGS) $(MPI_COMPILE) -o $@ train_gpt.c $(MPI_LINK) $(LDLIBS)

train_gpu: train_gpt.cu $(HEADERS) $(GPU_HEADERS) $(CUDA_ARCH_STAMP) | $(NEED_MPI) detect
	$(NVCC) $(NVCC_FLAGS) $(MPI_COMPILE) -o $@ train_gpt.cu $(NVCC_LIBS) $(MPI_LINK)

# The one-process builds (nompi/mpi.h, as MPI=none builds train_cpu / train_gpu) under names
# of their own, so CI builds them beside the MPI ones.
train_cpu_nompi: train_gpt.c $(HEADERS) nompi/mpi.h | detect
	$(CC) $(CFLAGS) -Inompi -o $@ train_gpt.c $(LDLIBS)

train_gpu_nompi: train_gpt.cu $(HEADERS) $(GPU_HEADERS) $(CUDA_ARCH_STAMP) nompi/mpi.h | detect
	$(NVCC) $(NVCC_FLAGS) -Inompi -o $@ train_gpt.cu $(NVCC_LIBS)

test_gpu: tests/test_gpu.cu $(wildcard tests/gpu_*.cu) $(HEADERS) $(GPU_HEADERS) $(CUDA_ARCH_STAMP) | $(NEED_MPI) detect
	$(NVCC) $(NVCC_FLAGS) $(MPI_COMPILE) -o $@ tests/test_gpu.cu $(NVCC_LIBS) $(MPI_LINK)

# The CUDA emulator (emu/cuda_emu.h): the GPU sources with their launches rewritten by
# emu/cu2cpp.pl, compiled by g++ and run on the CPU, one fiber per CUDA thread, with
# cuBLASLt and NCCL (over MPI) emulated. So the GPU kernels and the whole GPU trainer run,
# and are tested, where there is no GPU. Needs the CUDA headers (not a GPU, not libcudart).
# (cu2cpp.pl does not follow includes: every GPU source is listed, each translated file found
# first on the include path -Iemu/build.)
EMU_SRC = emu/build/train_gpt.cu emu/build/tests/test_gpu.cu $(addprefix emu/build/,$(wildcard tests/gpu_*.cu)) \
          emu/build/backend/gpu/comm_nccl.h emu/build/backend/gpu/gpu_device.h $(addprefix emu/build/,$(GPU_HEADERS))
EMU_HEADERS = emu/cuda_emu.h emu/intrinsics_emu.h emu/cublaslt_emu.h emu/nccl_emu.h
EMU_DEPS = $(HEADERS) $(EMU_SRC) $(EMU_HEADERS)
EMU_CXX = g++ -g -std=c++17 -fopenmp -DOMPI_SKIP_MPICXX=1 -Wall -Wno-unused-parameter -Wno-unknown-pragmas \
          -I$(CUDA_ROOT)/include -Iemu/build -I. -include emu/cuda_emu.h

# (a temporary file per make process: dev/gpu_check.sh's DRY run builds test_gpu_emu and train_gpu_emu at once, and
# both translate the same headers)
emu/build/%: % emu/cu2cpp.pl
	@mkdir -p $(dir $@)
	perl emu/cu2cpp.pl $< > $@.tmp$$$$ && mv -f $@.tmp$$$$ $@

train_gpu_emu: $(EMU_DEPS) | $(NEED_MPI) detect
	$(EMU_CXX) -O2 $(MPI_COMPILE) -x c++ emu/build/train_gpt.cu -o $@ $(MPI_LINK) -lm

test_gpu_emu: $(EMU_DEPS) | $(NEED_MPI) detect
	$(EMU_CXX) -O2 $(MPI_COMPILE) -x c++ emu/build/tests/test_gpu.cu -o $@ $(MPI_LINK) -lm

# The emulator's own stream semantics (emu/test_emu.cu; on the emulator only).
emu/build/test_emu.cu: emu/test_emu.cu emu/cu2cpp.pl
	@mkdir -p emu/build
	perl emu/cu2cpp.pl $< > $@.tmp && mv -f $@.tmp $@

test_emu: emu/build/test_emu.cu $(EMU_HEADERS) | $(NEED_MPI) detect
	$(EMU_CXX) -O1 $(MPI_COMPILE) -x c++ emu/build/test_emu.cu -o $@ $(MPI_LINK) -lm

# NCCL's bus bandwidth per collective (dev/multi_gpu_check.sh), and the same on the emulator.
bench_nccl: dev/bench_nccl.cu $(CUDA_ARCH_STAMP) | $(NEED_MPI) detect
	$(NVCC) $(NVCC_FLAGS) $(MPI_COMPILE) -o $@ dev/bench_nccl.cu $(NVCC_LIBS) $(MPI_LINK)
bench_nccl_emu: dev/bench_nccl.cu $(EMU_HEADERS) | $(NEED_MPI) detect
	$(EMU_CXX) -O1 $(MPI_COMPILE) -x c++ dev/bench_nccl.cu -o $@ $(MPI_LINK) -lm

# The emulated NCCL's own checks (split, collective order, one device per rank), under mpirun.
test_nccl_emu: emu/test_nccl_emu.cu $(EMU_HEADERS) | $(NEED_MPI) detect
	$(EMU_CXX) -O1 $(MPI_COMPILE) -x c++ emu/test_nccl_emu.cu -o $@ $(MPI_LINK) -lm

# The same under AddressSanitizer and UBSan: a kernel or host access outside its buffer
# (device buffers are exactly their size) or undefined behaviour stops the run.
EMU_ASAN = -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
train_gpu_emu_asan: $(EMU_DEPS) | $(NEED_MPI) detect
	$(EMU_CXX) $(EMU_ASAN) $(MPI_COMPILE) -x c++ emu/build/train_gpt.cu -o $@ $(MPI_LINK) -lm

test_gpu_emu_asan: $(EMU_DEPS) | $(NEED_MPI) detect
	$(EMU_CXX) $(EMU_ASAN) $(MPI_COMPILE) -x c++ emu/build/tests/test_gpu.cu -o $@ $(MPI_LINK) -lm

test_gpt: tests/test_gpt.c $(wildcard tests/gpt_*.c) train_gpt.c $(HEADERS) | $(NEED_MPI) detect
	$(CC) $(CFLAGS) -DTESTING $(MPI_COMPILE) -o $@ tests/test_gpt.c $(MPI_LINK) $(LDLIBS)

test_layouts: tests/test_layouts.c tests/layouts_offload.c $(HEADERS) | $(NEED_MPI)
	$(CC) $(CFLAGS) $(MPI_COMPILE) -o $@ tests/test_layouts.c $(MPI_LINK) $(LDLIBS)

# Our logits of a checkpoint on given tokens (tests/test_export_hf.py compares --export-hf with them).
hf_logits: tests/hf_logits.c train_gpt.c $(HEADERS) | $(NEED_MPI)
	$(CC) $(CFLAGS) $(MPI_COMPILE) -o $@ tests/hf_logits.c $(MPI_LINK) $(LDLIBS)

# Two checkpoints tensor by tensor (dev/check_gpu_vs_cpu.sh compares gradients with it).
ckpt_compare: dev/ckpt_compare.c $(HEADERS) | $(NEED_MPI)
	$(CC) $(CFLAGS) -I. $(MPI_COMPILE) -o $@ dev/ckpt_compare.c $(MPI_LINK) $(LDLIBS)

test_planner: tests/test_planner.c $(wildcard tests/planner_*.c) $(HEADERS)
	$(CC) $(CFLAGS) -o $@ tests/test_planner.c $(LDLIBS)

# The schedule simulator on the command line (dev/bench_zb.py feeds it measured op times).
sim_schedule: dev/sim_schedule.c $(HEADERS)
	$(CC) $(CFLAGS) -o $@ dev/sim_schedule.c $(LDLIBS)

# The pipeline's step time with one core per rank for micro-batches of documents (dev/bench_wlb.py).
sim_wlb: dev/sim_wlb.c $(HEADERS)
	$(CC) $(CFLAGS) -o $@ dev/sim_wlb.c $(LDLIBS)

# The GPU layouts dev/check_gpu_vs_cpu.sh runs under ASan in make test (all of them run without it).
ASAN_CASES = ^gpu_(gpt2|full|gpt2_recompute_full|gpt2_tp2_sp|gpt2_dp2_zero2|llama_tp2|llama_tp2_sp_dp2_nccl|gpt2_pp2_vpp2_nccl|llama_tp2_pp2_nccl|gpt2_cp2_ulysses_nccl|llama_cp2_ring_nccl)$$

# Every header compiles alone (C headers with the C build's flags, the GPU ones on the CUDA emulator),
# no include points to a later layer, no include cycle.
check_headers: $(EMU_SRC) | $(NEED_MPI)
	@python3 scripts/check_headers.py --layers "$(LAYERS)" --cc "$(CC) $(CFLAGS) -Wno-unused-function $(MPI_COMPILE)" \
	  --cu "$(EMU_CXX) -Wno-unused-function $(MPI_COMPILE)"

# All tests; the last line is the total "N passed, N failed".
# (fuzzing bounded by FUZZ_SECONDS per harness; clang's libFuzzer is needed for it; the GPU
# build runs on the CUDA emulator: its kernels against kernels_cpu.h, and the whole trainer
# against train_cpu in dev/check_gpu_vs_cpu.sh's runs (8 emulated GPUs for the NCCL ones; losses, step 1's
# gradients tensor by tensor), evaluation, sampling and resume; again under ASan/UBSan)
TEST_BINS = train train_cpu test_gpt test_planner test_layouts test_faults train_asan fuzz_build test_emu test_nccl_emu \
            test_gpu_emu \
            train_gpu_emu test_gpu_emu_asan train_gpu_emu_asan ckpt_compare hf_logits
# every binary the README names (.ci/run builds them with make -j2 binaries, then runs make test),
# the dev tools too, so none stops compiling unseen
binaries: train_gpu test_gpu train_cpu_nompi train_gpu_nompi $(TEST_BINS) bench_cpu bench_nccl sim_schedule sim_wlb
test: $(TEST_BINS)
	@set -o pipefail; rm -f .test.log; status=0; \
	$(MAKE) --no-print-directory check_headers 2>&1 | tee -a .test.log || status=1; \
	./test_planner 2>&1 | tee -a .test.log || status=1; \
	./test_gpt 2>&1 | tee -a .test.log || status=1; \
	./test_layouts 2>&1 | tee -a .test.log || status=1; \
	python3 tests/test_export_hf.py 2>&1 | tee -a .test.log || status=1; \
	python3 tests/test_gpt2_data.py 2>&1 | tee -a .test.log || status=1; \
	python3 tests/test_requirements.py 2>&1 | tee -a .test.log || status=1; \
	python3 tests/test_validate_planner.py 2>&1 | tee -a .test.log || status=1; \
	python3 tests/test_scripts_inputs.py 2>&1 | tee -a .test.log || status=1; \
	python3 tests/test_help.py 2>&1 | tee -a .test.log || status=1; \
	tests/test_multinode.sh 2>&1 | tee -a .test.log || status=1; \
	./test_faults 2>&1 | tee -a .test.log || status=1; \
	./test_emu 2>&1 | tee -a .test.log || status=1; \
	EMU_STREAMS=compute ./test_emu 2>&1 | tee -a .test.log || status=1; \
	EMU_ARCH=86 ./test_emu 2>&1 | tee -a .test.log || status=1; \
	tests/test_gpu_ranks.sh 2>&1 | tee -a .test.log || status=1; \
	./test_gpu_emu --no-bench 2>&1 | tee -a .test.log || status=1; \
	EMU_ORDER=reverse ./test_gpu_emu --no-bench 2>&1 | tee -a .test.log || status=1; \
	sweep_dir=$$(mktemp -d) && EMU_ARCH=86 ./test_gpu_emu --att-sweep --dry --csv $$sweep_dir/sweep.csv \
	  --tiles $$sweep_dir/tiles.csv \
	  2>&1 | tee -a .test.log || status=1; rm -rf "$$sweep_dir"; \
	GPU_BIN=./train_gpu_emu GPUS=8 dev/check_gpu_vs_cpu.sh 2>&1 | tee -a .test.log || status=1; \
	ASAN_OPTIONS=detect_leaks=0 ./test_gpu_emu_asan --no-bench 2>&1 | tee -a .test.log || status=1; \
	ASAN_OPTIONS=detect_leaks=0 GPU_BIN=./train_gpu_emu_asan GPUS=8 CASES_MATCH='$(ASAN_CASES)' dev/check_gpu_vs_cpu.sh 2>&1 | tee -a .test.log || status=1; \
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SECONDS) 2>&1 | tee -a .test.log || status=1; \
	awk '/^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$$/ {p += $$1; f += $$3; s += $$5} \
	     END {printf "%d passed, %d failed%s\n", p, f, s ? sprintf(", %d skipped", s) : ""}' .test.log; \
	exit $$status

# bench: the GPU benchmark (dev/bench_gpu.sh: gpt2-124m b32, gpt2-1558m at the largest
# micro-batch that fits) where a GPU is usable, else the CPU one (dev/bench_cpu.c).
ifeq ($(GPU_USABLE)$(if $(NVCC),1,),11)
bench: train_gpu
	dev/bench_gpu.sh
else
bench: bench_cpu
	./bench_cpu
endif
bench_cpu: dev/bench_cpu.c train_gpt.c $(HEADERS) | $(NEED_MPI) detect
	$(CC) $(CFLAGS) $(MPI_COMPILE) -o $@ dev/bench_cpu.c $(MPI_LINK) $(LDLIBS)

clean:
	rm -f train train_cpu train_gpu train_cpu_nompi train_gpu_nompi test_gpt test_gpu test_planner test_layouts test_faults train_asan bench_cpu \
	  ckpt_compare sim_schedule sim_wlb bench_nccl bench_nccl_emu .test.log .cuda_arch
	rm -f hf_logits
	rm -rf train_gpu_emu test_gpu_emu train_gpu_emu_asan test_gpu_emu_asan test_emu test_nccl_emu emu/build
	$(MAKE) --no-print-directory fuzz_clean
