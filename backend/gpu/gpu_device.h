// backend/gpu/gpu_device.h: which GPU each rank runs on, and that GPU's peak for MFU. GPU build only.
//
// Ranks to GPUs, under any launcher (mpirun, srun, mpiexec of MPICH or PMIx) and any visibility:
//   - the node-local rank comes from MPI itself (MPI_Comm_split_type MPI_COMM_TYPE_SHARED), not
//     from a launcher's environment variable;
//   - the device is (local rank) mod (devices this process sees): with every GPU of the node
//     visible to every rank (mpirun -np 8), rank r of the node takes GPU r; with one visible
//     GPU per rank (srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per rank) each takes
//     its device 0;
//   - the ranks of a node then compare their devices' PCI bus ids: over NCCL two ranks on one
//     GPU are refused in one line (NCCL itself refuses them); with --comm mpi they share it,
//     and the peak for MFU is divided among them.
// A run started by hand (./train_gpu --tp 4) probes the GPU before it starts its ranks, in a
// child process, so the launcher that stays mpirun's parent holds no CUDA context on GPU 0.
// Each rank probes only its own device.
//
// The peak: --peak-tflops, else a table of known parts (the vendors' datasheets, dense bf16
// tensor-core FLOP/s with fp32 accumulation), else the device's properties: SMs x clock x the
// architecture's dense bf16 FLOP per SM per clock. The start-up line says which.
#ifndef GPU_DEVICE_H
#define GPU_DEVICE_H

#include <sys/wait.h>
#include <unistd.h>
#include "layout/grid.h"
#include "base/launcher.h"

#ifndef CUDA_ARCH_LIST
#define CUDA_ARCH_LIST "80 90"  // the Makefile's CUDA_ARCH
#endif

// Dense bf16 tensor-core FLOP per SM per clock (fp32 accumulation), from the architecture
// whitepapers: A100 (GA100) 1024 FMA; GA10x / AD10x 512 FMA on the professional parts, half
// that on GeForce cards (fp32 accumulation at half rate); Hopper 2048 FMA; 0: unknown.
static double gpu_flop_per_sm_clock(int major, int minor, const char* name) {
    int geforce = strstr(name, "GeForce") != NULL;
    if (major == 8 && minor == 0) return 2048;
    if (major == 8) return geforce ? 512 : 1024;  // sm_86, sm_87, sm_89
    if (major == 9) return 4096;
    return 0;
}

// Known parts: a name as CUDA reports it (a substring, the more specific first; a part
// followed by a digit does not match: "A10" is not "A100"), its SMs, dense bf16 TFLOP/s from
// its datasheet, and the planner's device profile (planner/device.h) nearest to it.
typedef struct { const char* name; int sms; double tflops; const char* source; const char* profile; } GpuPart;
static const GpuPart GPU_PARTS[] = {
    {"H100 PCIe", 114, 756, "NVIDIA H100 PCIe datasheet", "h100-sxm"},
    {"H100 NVL", 132, 835, "NVIDIA H100 NVL datasheet", "h100-sxm"},
    {"H200 NVL", 132, 835, "NVIDIA H200 NVL datasheet", "h200-sxm"},
    {"H200", 132, 989, "NVIDIA H200 SXM datasheet", "h200-sxm"},
    {"GH200", 132, 989, "NVIDIA GH200 datasheet", "h100-sxm"},
    {"H100", 132, 989, "NVIDIA H100 SXM datasheet", "h100-sxm"},
    {"H800", 132, 989, "NVIDIA H800 SXM datasheet", "h100-sxm"},
    {"A100-SXM4-40GB", 108, 312, "NVIDIA A100 datasheet", "a100-40gb"},
    {"A100-PCIE-40GB", 108, 312, "NVIDIA A100 datasheet", "a100-40gb"},
    {"A100", 108, 312, "NVIDIA A100 datasheet (SXM and PCIe)", "a100-80gb"},
    {"A800", 108, 312, "NVIDIA A800 datasheet", "a100-80gb"},
    {"L40S", 142, 362, "NVIDIA L40S datasheet", "a100-80gb"},
    {"L40", 142, 181, "NVIDIA L40 datasheet", "a100-80gb"},
    {"L4", 58, 121, "NVIDIA L4 datasheet", "a100-80gb"},
    {"A10", 72, 125, "NVIDIA A10 datasheet", "a100-80gb"},
    {"A40", 84, 150, "NVIDIA A40 datasheet", "a100-80gb"},
    {"RTX 6000 Ada", 142, 364, "NVIDIA RTX 6000 Ada datasheet", "a100-80gb"},
    {"RTX A6000", 84, 155, "NVIDIA RTX A6000 datasheet", "a100-80gb"},
    {"RTX 4090", 128, 165, "NVIDIA Ada GPU architecture whitepaper (RTX 4090, fp32 accumulate)", "a100-80gb"},
    {"RTX 3090 Ti", 84, 80, "NVIDIA GA102 whitepaper (RTX 3090 Ti, fp32 accumulate)", "a100-80gb"},
    {"RTX 3090", 82, 71, "NVIDIA GA102 whitepaper (RTX 3090, fp32 accumulate)", "a100-80gb"},
};

// The part of the table whose name is in `name` (not followed by a digit or letter), or NULL.
static const GpuPart* gpu_part(const char* name) {
    for (size_t i = 0; i < sizeof(GPU_PARTS) / sizeof(GPU_PARTS[0]); i++) {
        const char* at = strstr(name, GPU_PARTS[i].name);
        if (at && !isalnum((unsigned char)at[strlen(GPU_PARTS[i].name)])) return &GPU_PARTS[i];
    }
    return NULL;
}

// Dense bf16 peak of device dev in FLOP/s, with where it came from in src; *profile: the
// planner's nearest device profile (for the predicted memory and time).
static double gpu_peak_flops(int dev, const cudaDeviceProp* p, char* src, size_t n, const char** profile) {
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess) khz = 0;
    double per_clock = gpu_flop_per_sm_clock(p->major, p->minor, p->name);
    double derived = per_clock * p->multiProcessorCount * khz * 1e3;
    const GpuPart* part = gpu_part(p->name);
    *profile = part ? part->profile : p->major >= 9 ? "h100-sxm" : "a100-80gb";
    if (part && part->sms == p->multiProcessorCount) {
        snprintf(src, n, "%s, bf16 dense", part->source);
        return part->tflops * 1e12;
    }
    if (derived > 0) {
        snprintf(src, n, "%.60s%s: %d SMs x %.0f MHz x %.0f bf16 FLOP/clock (sm_%d%d), from the device's properties",
                 p->name, part ? " (not the table's SM count)" : "", p->multiProcessorCount, khz / 1e3, per_clock,
                 p->major, p->minor);
        return derived;
    }
    snprintf(src, n, "%.40s (sm_%d%d) unknown: assumed; set --peak-tflops", p->name, p->major, p->minor);
    return 100e12;
}

__global__ void gpu_probe_kernel(int* x) { *x = 1; }

// Can this process run a kernel on device dev? 0, else why not in why.
static int gpu_try(int dev, char* why, size_t n) {
    cudaDeviceProp prop;
    cudaError_t e;
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) {
        snprintf(why, n, "no CUDA GPU available (device %d: %s)", dev, cudaGetErrorString(e));
        return 1;
    }
    int* d = NULL;
    if ((e = cudaMalloc(&d, sizeof(int))) == cudaSuccess) {
        gpu_probe_kernel<<<1, 1>>>(d);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        cudaFree(d);
    }
    if (e == cudaSuccess) return 0;
    snprintf(why, n, "no CUDA GPU available (device %d, %s, sm_%d%d: %s; this build has code for sm_%s: "
             "make train_gpu CUDA_ARCH=%d%d)", dev, prop.name, prop.major, prop.minor, cudaGetErrorString(e),
             CUDA_ARCH_LIST, prop.major, prop.minor);
    return 1;
}
static int gpu_count(char* why, size_t n) {
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0)
        snprintf(why, n, "no CUDA GPU available (%s); without one: ./train_cpu (the CPU build, make train_cpu), or "
                 "./train_gpu_emu (this GPU code on the CPU's emulator, make train_gpu_emu)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return e != cudaSuccess ? 0 : n_dev;
}

// A run started by hand, before anything else (after --help and flag errors, which need no
// GPU): a usable GPU, and over NCCL one for each of the `need` ranks it will start. For one
// rank in this process (the device it will use); for several in a child, so that this
// process, which stays mpirun's parent, holds no CUDA context.
static void gpu_probe_by_hand(int need, int comm_mpi) {
    if (under_launcher()) return;  // each rank probes its own device (gpu_select_device)
    char why[512] = "";
    if (need <= 1) {
        if (!gpu_count(why, sizeof(why)) || gpu_try(0, why, sizeof(why))) fail("%s", why);
        return;
    }
    int fd[2];
    if (pipe(fd)) fail("cannot probe the GPU: pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child < 0) fail("cannot probe the GPU: fork: %s", strerror(errno));
    if (child == 0) {
        close(fd[0]);
        int n_dev = gpu_count(why, sizeof(why));
        if (n_dev && gpu_try(0, why, sizeof(why))) n_dev = 0;
        if (write(fd[1], &n_dev, sizeof(n_dev)) != sizeof(n_dev) || write(fd[1], why, sizeof(why)) < 0) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    int n_dev = 0, status = 0;
    ssize_t got = read(fd[0], &n_dev, sizeof(n_dev));
    if (got == sizeof(n_dev) && read(fd[0], why, sizeof(why)) < 0) why[0] = 0;
    close(fd[0]);
    waitpid(child, &status, 0);
    if (got != sizeof(n_dev)) fail("cannot probe the GPU: the probe process died (status %d)", status);
    if (!n_dev) fail("%s", why);
    if (!comm_mpi && need > n_dev)
        fail("%d ranks but %d GPU(s) here: NCCL needs one GPU per rank (use --comm mpi to share a GPU)", need, n_dev);
}

// Every rank's error, agreed: the lowest world rank with one prints it, and every rank exits 1.
static void gpu_agree_fail(const char* why) {
    int rank, world, first;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int mine = why[0] ? rank : world;
    mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == world) return;
    if (rank == first) print_error("%s", why);
    MPI_Finalize();
    exit(1);
}

// After MPI_Init, on every rank: this rank's device (made current), chosen and checked as the
// header says. *ranks_per_device: how many ranks of the node share it (1 over NCCL).
static int gpu_select_device(int backend_mpi, int* ranks_per_device) {
    MPI_Comm node;
    int local_rank, local_size, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    char why[512] = "", bus[32] = "";
    int n_dev = gpu_count(why, sizeof(why)), dev = n_dev ? local_rank % n_dev : 0;
    if (n_dev && !gpu_try(dev, why, sizeof(why)) && cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess)
        snprintf(bus, sizeof(bus), "device %d", dev);
    gpu_agree_fail(why);
    // the node's ranks' devices, by PCI bus id (one GPU, whatever number each rank sees it as)
    char* all = (char*)xcalloc((size_t)local_size, sizeof(bus));
    mpiCheck(MPI_Allgather(bus, sizeof(bus), MPI_BYTE, all, sizeof(bus), MPI_BYTE, node));
    int share = 0, other = -1;
    for (int r = 0; r < local_size; r++)
        if (!strcmp(all + r * sizeof(bus), bus)) {
            share++;
            if (r != local_rank && other < 0) other = r;
        }
    free(all);
    MPI_Comm_free(&node);
    if (!backend_mpi && share > 1)
        snprintf(why, sizeof(why),
                 "ranks %d and %d of this node (%d ranks) both got GPU %s (%d visible to each): NCCL needs one GPU per "
                 "rank: run at most as many ranks as GPUs, or give each rank its own (CUDA_VISIBLE_DEVICES, srun "
                 "--gpus-per-task=1), or share with --comm mpi",
                 other < local_rank ? other : local_rank, other < local_rank ? local_rank : other, local_size, bus,
                 n_dev);
    gpu_agree_fail(why);
    if (ranks_per_device) *ranks_per_device = share;
    return dev;
}

#endif
