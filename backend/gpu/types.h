// backend/gpu/types.h: the GPU build's types (backend/state.h's Model holds them).
#ifndef GPU_TYPES_H
#define GPU_TYPES_H

#include "backend/gpu/comm_nccl.h"
#include "backend/gpu/kernels_gpu.cuh"

// The activation element model.h works in, what a slot's pipeline sends hold until done,
// the build's own state, and the most floats of one dp all-reduce of the gradient
// (parallel/data_parallel.h's reduce_gradients): one call over the whole buffer, NCCL pipelines it
// internally.
typedef bf16 act_t;
typedef struct {
    MPI_Request req[2];                // host-staged p2p: sends still in flight from this slot
    cudaEvent_t sent[2];               // NCCL p2p: recorded when this slot's last sends [dir] have finished
    float* h_send[2];                  // host-staged p2p: pinned host copies of this slot's two sends
    bf16* copy[2];                     // NCCL p2p under --offload activations: the sends, copied out of the frame
} SlotSends;
typedef cudaEvent_t GatherWait;        // a --zero 3 all-gather on the side stream (parallel/zero3.h)
typedef struct { int kind, mb, chunk; double t0; } OpTime;  // a schedule op: what, and when the host issued it
typedef struct {
    OpTime* ops;                       // the ops issued since the last device_sync, in order
    cudaEvent_t* ends;                 // an event on the compute stream after each
    cudaEvent_t now;                   // recorded at the sync: the reference of their times
    int n, cap;
} OpTimes;
// --op-times (op_times.h): each op family's device time, by an event pair around each op.
enum { OP_MATMUL, OP_ATT_FWD, OP_ATT_BWD, OP_NORM, OP_LOSS, OP_OPTIMIZER, N_OP_FAMILIES };
typedef struct {
    cudaEvent_t* ev;                   // ops recorded since the last collection: start and end of each
    int *family, n, cap, depth;        // the family of each; depth: ops open (nested ones are not timed)
    double step_ms[N_OP_FAMILIES];     // this step's times so far
    double sum_ms[N_OP_FAMILIES], sum_step_ms, sum_comm_ms;  // over the steps averaged
    int steps;
} OpFamilyTimes;
typedef struct {
    GpuComms G;                        // NCCL (or host-staged MPI) groups over the layout's groups
    cudaStream_t stream;               // the one compute stream, non-blocking (kernels_gpu.cuh's scratch needs one)
    bf16* params_bf16;                 // the bf16 copy of the fp32 master weights, read by every kernel
    float* arena;                      // the fp32 weights params_bf16 copies: params, or --zero 3's gathered units
    float* h_params;                   // host fp32 copy: initialization and checkpoints
    float* h_recv;                     // host-staged p2p: pinned staging of pipeline receives
    char* scratch_mem;                 // the device buffer the shared scratch is carved from
    bf16* logit_row;                   // sampling: one row of logits over the padded vocabulary
    float* ce_stats;                   // the loss's first pass: each row's local maximum and sum (2 x B*T)
    MtList norm_list, adam_list;       // the ranges sumsq_range and adamw_range queued (adamw.cuh)
    float adam_lr, adam_grad_scale;    // the queued AdamW step's learning rate, gradient scale and step
    int adam_t;
    double* loss_acc;                  // device: sum of token losses of this step on this rank, then the
                                       // norm's sum of squares (sumsq_finish fetches both)
    int loss_fetched;                  // loss_acc[0] came up with the norm: loss_fetch need not wait
    int norm_open;                     // loss_acc[1] holds the sum of the ranges flushed so far
    int *d_inputs, *d_targets;         // device copies of the step's tokens
    int* h_batch;                      // pinned staging of the batch's arrays on their way up
    cudaEvent_t batch_copied;          // recorded after the batch's copies up
    int* d_pos;                        // device copy of m->pos: the sequence position of each of this rank's T rows
    int *d_row_pos, *d_doc_seq;        // device copies of m->row_pos and m->doc_seq (documents; NULL without)
    int* d_cp_order;                   // device copy of m->cp_order (--cp-split doc; NULL without)
    double ring_t0;                    // host time the context-parallel ring's exchange in flight started (--trace)
    cudaStream_t offload;              // --offload: the copies between the device and the pinned tier
    float* h_grad; bf16* h_bf16;       // --offload optimizer (offload_gpu.h): pinned, gradient down, bf16 up
    cudaEvent_t* grad_down;            // per tensor: an event after its range's copy down, whether it is queued;
    char* down_queued;                 // the step whose copies were queued, the tensor updated next
    int opt_step, opt_next;
    cudaEvent_t computed, copied;      // the compute stream's work so far; the offload stream's copies so far
    OpTimes op_times;                  // the schedule's ops, timed on the device (trace_op, device_sync)
    bf16* grad_bf16;                   // --grad-reduce bf16: the dp all-reduce's scratch (params.h GRAD_BF16_FLOATS)
    GpuCounts step_start;              // gpu_counts when the step's batch was loaded (step_done's reference)
    int steps_done;                    // training steps this process has run
    OpFamilyTimes families;            // --op-times
    double step_t0, step_comm_s;       // the step's start (host clock) and the comm seconds then
} ModelBackend;
#define GRAD_BUCKET_FLOATS SIZE_MAX

#endif
