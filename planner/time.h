// planner/time.h: time per op, roofline style: matmuls (by their shape), elementwise
// ops at HBM bandwidth, ring collectives on the link a group lands on, context parallelism's
// all-to-alls and ring, one transformer layer forward and backward, and the pipeline cut.
#ifndef PLANNER_TIME_H
#define PLANNER_TIME_H

#include "layout/schedule.h"
#include "planner/memory.h"

// One GEMM C[M,N] = A[M,K] B[K,N] (batch of them) on the tensor cores, by its shape. cuBLAS
// cuts C into tiles of GEMM_TILE x GEMM_TILE and runs them in waves of one tile per SM; when
// the tiles leave a wave's SMs idle it splits K into s parts (split-K) to make more of them.
// Each tile-part pays a fixed cost worth matmul_k_half of K (filling its load pipeline,
// writing or reducing its result), so its main loop runs at (K/s) / (K/s + k_half) of the
// large-K rate. Of the launched capacity (waves x SMs x tile area) the useful part is
// M N s / tile area. The fraction of peak is matmul_eff (the main loop's rate on a full
// tile) times the best over s = 1..4 of
//     fill(s) x (K/s) / (K/s + k_half),   fill(s) = (M N s / tile^2) / (ceil(tiles s / SMs) SMs)
// So small per-rank widths (K = h/t, N = F/t) run slower and large hidden sizes faster. On a
// device without SMs (the CPU) the shape does not matter. The memory roofline: the three
// operands read or written once.
#define GEMM_TILE 128.0
static double matmul_shape_eff(const DeviceProfile* d, double M, double N, double K, double batch) {
    if (d->sms <= 0) return 1;
    double best = 0;
    for (int s = 1; s <= 4; s++) {
        double tiles = ceil(M / GEMM_TILE) * ceil(N / GEMM_TILE) * batch * s;
        double fill = M * N * batch * s / (GEMM_TILE * GEMM_TILE) / (ceil(tiles / d->sms) * d->sms), k_part = K / s;
        double eff = fill * k_part / (k_part + d->matmul_k_half);
        if (eff > best) best = eff;
    }
    return best;
}
static double matmul_time(const DeviceProfile* d, double M, double N, double K, double batch) {
    double flops = 2 * M * N * K * batch;
    double bytes = (M * K + K * N + M * N) * batch * d->dtype_bytes;
    double t_compute = flops / (d->peak_flops * d->matmul_eff * matmul_shape_eff(d, M, N, K, batch));
    double t_memory = bytes / (d->hbm_bw * d->hbm_eff);
    return (t_compute > t_memory ? t_compute : t_memory) + d->matmul_latency;
}
// A linear layer's backward over M tokens (forward: N outputs from K inputs): the input
// gradient dX[M,K] = dY[M,N] W^T (K outputs, reduced over N) and the weight gradient
// dW[K,N] = X^T dY (reduced over the M tokens): the same FLOPs as the forward, other shapes.
static double linear_dx_time(const DeviceProfile* d, double M, double N, double K) {
    return matmul_time(d, M, K, N, 1);
}
static double linear_dw_time(const DeviceProfile* d, double M, double N, double K) {
    return matmul_time(d, K, N, M, 1);
}
static double elementwise_time(const DeviceProfile* d, double bytes) {
    return bytes / (d->hbm_bw * d->hbm_eff) + d->op_latency;
}

// The weight tensors of a chunk of a LLaMA as nanotron builds it (llama.py: qkv_proj, o_proj, gate_up_proj, down_proj,
// input_layernorm, post_attention_layernorm; the embedding; the final norm and the head).
static int chunk_tensors(int layers, int has_embed, int has_head) { return 6 * layers + has_embed + 2 * has_head; }
// A micro-batch's gradients added into fp32 buffers after its backward (software.h grad_accum_pass), one kernel per
// weight tensor (chunk_tensors; GPT-2's biases are not counted apart), at HBM's rate. ADD (nanotron's
// FP32GradientAccumulator: fp32_grad.add_(half_param.grad), the bf16 operand promoted inside the kernel): each of the
// chunk's parameters read in the training dtype and in fp32 and written in fp32. CAST_ADD (DeepSpeed's
// BF16_Optimizer.update_hp_grads: hp_grad.add_(lp.grad.to(fp32))): the cast's kernel reads the training dtype and
// writes an fp32 copy, then the add reads both fp32 tensors and writes one, two kernels a tensor. Unlike autograd's
// lazy gradients (grad_accumulate_time) the fp32 buffers are zeroed before the first micro-batch, which adds into
// them as every other does.
static double fp32_accumulator_time(const ModelConfig* c, const PlanSetup* k, const DeviceProfile* d, int layers,
                                    int has_embed, int has_head) {
    double params = chunk_params(c, layers, has_embed, has_head, c->tp);
    int kernels = chunk_tensors(layers, has_embed, has_head);
    if (k->grad_accum_pass == GRAD_ACCUM_CAST_ADD)
        return params * (d->dtype_bytes + 4 + 4 + 4 + 4) / (d->hbm_bw * d->hbm_eff) + 2 * kernels * d->op_latency;
    return params * (d->dtype_bytes + 4 + 4) / (d->hbm_bw * d->hbm_eff) + kernels * d->op_latency;
}

// Ring collectives over n ranks (Patarasuk & Yuan 2009): an all-reduce moves 2(n-1)/n of
// the buffer through every rank's link in 2(n-1) steps; all-gather and reduce-scatter
// half of that (here, as TE's userbuffers step it: NCCL's collectives are dp_gather_time and its kin).
// bw is the achievable bandwidth per rank, one direction.
static double allgather_time(int n, double bytes, double bw, double lat) {
    return n <= 1 ? 0 : (double)(n - 1) / n * bytes / bw + (n - 1) * lat;
}

// A link as a group of ranks sees it: bandwidth per rank one way, latency per step, and
// whether the switches between them reduce (nvls).
typedef struct {
    double bw, lat;    // lat: per step, across nodes when the group spans several
    int nvls;
    int nodes;         // nodes the group spans (0 or 1: one)
    double lat_intra;  // per step between two ranks of one node, when the group spans several
    const NcclModel* nccl;  // NCCL's model of the run's release (device.h; NULL: b647562's)
} Link;

// NCCL's cost model of its collectives (src/graph/tuning.cc, NVIDIA/nccl at b647562; protocol Simple,
// the one large messages take). Ring: a fixed 8.4 us, then one hop per step, the steps that cross a
// node at the network's latency and the others at NVLink's: an all-gather or reduce-scatter takes
// n - 1 steps of which nodes - 1 cross; an all-reduce 2(n - 1), 2 x nodes crossing. Tree (all-
// reduce only, across nodes): down and up a chain inside each node and a binary tree over the
// nodes, 2((n/nodes - 1) + log2(nodes)) hops of 28 us each (Simple's tree hop, NVLink and network
// alike), at 0.92 of the ring's bus bandwidth, moving each byte in and out (algorithm bandwidth
// half the bus's). NCCL runs the algorithm its model predicts faster (ncclTopoGetAlgoTime): the
// ring's latency grows with n, the tree's with log2(nodes), so large groups of small messages
// take the tree. A run on a named release takes that release's numbers (l.nccl, device.h NCCL_MODELS: the
// network's ring hop in place of the device's inter_latency, the tree's base and hops, the all-reduce's steps
// across nodes, the net overhead, the plateau below).
#define NCCL_RING_BASE_LAT 8.4e-6
#define NCCL_TREE_BW_OF_RING 0.92
static const NcclModel* link_nccl(Link l) { return l.nccl ? l.nccl : NCCL_MODEL_DEFAULT; }
static double ring_latency(int n, int all_reduce, Link l) {
    if (n <= 1) return 0;
    double steps = (all_reduce ? 2.0 : 1.0) * (n - 1), inter = 0, intra_lat = l.lat;
    if (l.nodes > 1) {
        inter = all_reduce ? 2.0 * (l.nodes - link_nccl(l)->ar_net_steps_less) : l.nodes - 1.0;
        inter = inter > steps ? steps : inter, intra_lat = l.lat_intra;
    }
    return NCCL_RING_BASE_LAT + (steps - inter) * intra_lat + inter * l.lat;
}
static double tree_latency(int n, Link l) {
    int nodes = l.nodes > 1 ? l.nodes : 1, log2_nodes = 0;
    while ((2 << log2_nodes) <= nodes) log2_nodes++;
    const NcclModel* m = link_nccl(l);
    return m->tree_base + 2 * ((n / nodes - 1) * m->tree_nvlink_hop + log2_nodes * m->tree_net_hop);
}
// A data-parallel pass: `bytes` per rank in `buckets` collectives of equal size over n ranks on link l,
// by NCCL's algorithm: all-gather and reduce-scatter (the ring alone), all-reduce (the faster of ring
// and tree, the ring's latency with its plateau factor; the tree only across nodes). The tensor- and
// sequence-parallel collectives take it too, with one bucket (link_gather_time, link_allreduce_time).
static double dp_gather_time(int n, double bytes, double buckets, Link l) {
    return n <= 1 ? 0 : (double)(n - 1) / n * bytes / l.bw + buckets * ring_latency(n, 0, l);
}
// NCCL's "plateau effect of ring" (enqueue.cc / tuning.cc ncclTopoGetAlgoTime): a Simple ring all-reduce across
// nodes costs 1.4 x its latency on sm80+ at b647562 (1.9 below; every GPU profile here is an A100, H100 or H200)
// once a collective holds 64 bytes a channel a rank (2.18 on; before it 1.9 from nRanks / 16 x 64 KiB). The channel
// count is NCCL's own; the factor is taken where it holds for any (MAXCHANNELS 32), i.e. a bucket of at least
// 64 x 32 x n bytes.
#define NCCL_MAX_CHANNELS 32
static double dp_allreduce_time(int n, double bytes, double buckets, Link l) {
    if (n <= 1) return 0;
    const NcclModel* m = link_nccl(l);
    double from = m->plateau_per_channel ? 64.0 * NCCL_MAX_CHANNELS * n : n / 16.0 * 65536;
    double plateau = l.nodes > 1 && bytes / buckets >= from ? m->plateau : 1;
    double ring = 2.0 * (n - 1) / n * bytes / l.bw + buckets * ring_latency(n, 1, l) * plateau;
    if (l.nodes <= 1) return ring;
    double tree = 2 * bytes / (NCCL_TREE_BW_OF_RING * l.bw) + buckets * tree_latency(n, l);
    return tree < ring ? tree : ring;
}

// An all-reduce over n ranks on link l, a message of `bytes` per rank. A ring (dp_allreduce_time)
// moves 2(n-1)/n of it through every rank's link in 2(n-1) steps of latency after NCCL's base, so small
// messages are latency-bound: on an A100 node (141 GB/s, 3.4 us) 64 KiB over 8 ranks take 56.8 us,
// 64 MiB 889 us. Where the node's NVSwitches reduce in the switch (NVLink SHARP, NVSwitch 3 in H100 and
// H200 nodes; NCCL's NVLS algorithm, used inside a node) each rank sends its buffer to the switch
// once and receives the sum once, in 2 steps, but the switch does not reduce at the link's rate:
// on 8 H100s NCCL measured an NVLS algorithm bandwidth of 258, 265, 270 and 273 GB/s over 5-8
// ranks where the ring's bus bandwidth is 365-370 on 2-8 (NVIDIA/nccl#1455; its maintainers:
// "370GB/s ... the real target for NCCL BusBW intra-node", NVLS "a 30% improvement" at 8,
// nccl#1442, nccl-tests#212), and over 2-4 ranks no gain over the ring. So NVLS moves bytes at
// NVLS_OF_RING (273 / 370) of the bandwidth the ring's steps see, from 5 ranks on.
#define NVLS_OF_RING 0.74
#define NVLS_MIN_RANKS 5
// The tensor- and sequence-parallel collectives go through NCCL in every stack modelled (Megatron-core's
// mappings.py torch.distributed.all_reduce / all_gather_into_tensor / reduce_scatter_tensor, nanotron's and the
// Scaling codebase's torch.distributed, torchtitan's DTensor, this trainer's comm_nccl.h; TE's userbuffers under
// --tp-comm-overlap are not, ub_*_time), so they are priced by NCCL's model as the data-parallel collectives are:
// one bucket of dp_allreduce_time / dp_gather_time, the ring's 8.4 us base and its steps (across nodes only
// the steps between nodes at the network's latency; the tree where NCCL's model takes it), inside a node too.
// NVLS (one node, 5+ ranks, NVSwitch 3; NCCL 2.17.1 on) keeps its own bandwidth and NCCL's latency of it, whatever
// the group's size (device.h NcclModel.nvls_lat: 23 us at b647562, 40 in 2.17.1, 25 from 2.21.5).
static double link_allreduce_time(int n, double bytes, Link l) {
    if (n <= 1) return 0;
    double nvls_lat = link_nccl(l)->nvls_lat;  // 0 before 2.17: a ring
    if (l.nodes <= 1 && l.nvls && nvls_lat > 0 && n >= NVLS_MIN_RANKS) return bytes / (NVLS_OF_RING * l.bw) + nvls_lat;
    return dp_allreduce_time(n, bytes, 1, l);
}
// An all-gather or reduce-scatter of `bytes` (the whole gathered tensor) over n ranks on link l, likewise.
static double link_gather_time(int n, double bytes, Link l) { return dp_gather_time(n, bytes, 1, l); }

// Time a communication of duration comm adds when it may overlap a compute window: the
// part beyond the window, plus `interference` of the overlapped part (NCCL kernels take
// SMs and HBM bandwidth from the compute they overlap).
static double comm_exposed(double comm, double window, double interference) {
    double hidden = comm < window ? comm : window;
    return (comm - hidden) + interference * hidden;
}

// The fewest members a group of n_in x n_out ranks (as group_link_nested lays them out) has on one node, over the
// groups that straddle a node's edge; n_in x n_out when none does. The groups tile blocks of n_out x stride_out
// ranks (n_in x stride_in when n_out is 1), so when a block divides the node none straddles (the usual sizes); a
// block of 3 or 6 ranks on nodes of 8 leaves groups split over two nodes, which pay the NICs (--tp 6 on 24 GPUs:
// ranks 6 to 11 are 2 on one node and 4 on the next). Walks one period, lcm(block, node) <= node^2 ranks.
static int group_smallest_share(int n_in, int stride_in, int n_out, int stride_out, int gpus_per_node) {
    int n = n_in * n_out, block = n_out > 1 ? n_out * stride_out : n_in * stride_in, fewest = n;
    if (gpus_per_node % block == 0) return n;
    int period = block;
    while (period % gpus_per_node) period += block;
    for (int base = 0; base < period; base++) {
        int x = base % block;  // a group starts where its in and out coordinates are 0
        if ((x / stride_in) % n_in || (n_out > 1 && (x / stride_out) % n_out)) continue;
        int here = 0;
        for (int m = 0; m < n_out; m++)
            for (int i = 0; i < n_in; i++)
                here += (base + i * stride_in + m * stride_out) / gpus_per_node == base / gpus_per_node;
        int piece = here < n - here ? here : n - here;
        if (piece > 0 && piece < fewest) fewest = piece;
    }
    return fewest;
}

// NVLink bandwidth, one direction, a rank of a group with `members` GPUs on one node gets. Through NVSwitches any
// group has the GPU's whole intra_bw. A board without them (HGX 4-GPU: device.h profile_h200_hgx4) wires each pair
// of GPUs directly, so a group's rings cross only the links among its members: members - 1 pairs a GPU, each of
// intra_pair_bw. NCCL's rings fill these links (v2.28.9 src/graph/search.cc ncclTopoCompute, read, not run: ring
// channels of sm90SpeedArrayIntra's 60 GB/s while a pair's 6 x SM90_NVLINK_BW 20.6 of src/graph/topo.h holds
// them: 2 over one pair, 6 over the 3 pairs of 4 GPUs), so 2 GPUs get a third of what 4 get.
static double intra_group_bw(const DeviceProfile* d, int members) {
    if (d->intra_pair_bw <= 0 || members < 2) return d->intra_bw;
    return fmin(d->intra_bw, (members - 1) * d->intra_pair_bw);
}

// Bandwidth a group of ranks gets per rank: n_in ranks stride_in apart, repeated n_out times
// stride_out apart (stride_out >= n_in * stride_in; the dp x cp ranks holding the same
// weights; n_out = 1 for the other groups). Inside a node: NVLink. Across nodes, ring
// collectives move the same bytes through every rank, so each node pushes them through its
// NICs; all groups of the node communicate at once (they are in lock-step), so a group with
// k members on a node gets k GPUs' share of the NICs.
static Link group_link_nested(const DeviceProfile* d, int n_in, int stride_in, int n_out, int stride_out,
                              int gpus_per_node) {
    Link l;
    int k_in = gpus_per_node / stride_in, k_out = stride_out >= gpus_per_node ? 1 : gpus_per_node / stride_out;
    k_in = k_in < 1 ? 1 : k_in > n_in ? n_in : k_in;
    k_out = k_out > n_out ? n_out : k_out;
    int straddle = 0;
    if ((long)k_in * k_out == (long)n_in * n_out) {
        int share = group_smallest_share(n_in, stride_in, n_out, stride_out, gpus_per_node);
        if (share == n_in * n_out) {
            l.bw = intra_group_bw(d, n_in * n_out) * d->link_eff, l.lat = l.lat_intra = d->intra_latency;
            l.nvls = d->nvls, l.nodes = 1;
            l.nccl = d->nccl;
            return l;
        }
        k_in = share, k_out = 1, straddle = 1;  // the slowest group: its smaller part's NICs, across two nodes
    }
    l.nvls = 0;
    double nic_share = d->nics_per_gpu * d->nic_bw;  // per GPU
    l.bw = (double)k_in * k_out * nic_share * d->nic_eff;
    double intra = intra_group_bw(d, k_in * k_out) * d->link_eff;  // its k_in x k_out ranks of a node
    if (l.bw > intra) l.bw = intra;
    // NCCL's model: "Inter-node rings still have to launch nsteps * net overhead" (tuning.cc at b647562, v2.18.3-1):
    // each step of a ring that spans nodes, inside a node too, takes at least 3 network post overheads (Simple)
    l.lat = d->nccl ? d->nccl->ring_net_hop : d->inter_latency, l.nccl = d->nccl;  // a named release: its hop
    l.lat_intra = !d->nccl || d->nccl->net_overhead ? fmax(d->intra_latency, 3 * d->net_overhead) : d->intra_latency;
    l.nodes = straddle ? 2 : (int)(((long)n_in * n_out + (long)k_in * k_out - 1) / ((long)k_in * k_out));
    return l;
}
static Link group_link(const DeviceProfile* d, int n, int stride, int gpus_per_node) {
    return group_link_nested(d, n, stride, 1, n * stride, gpus_per_node);
}

// One GPU's share of its node's NICs: what a point-to-point message leaving the node gets
// (NCCL sends it through the NIC next to the GPU).
static Link nic_link(const DeviceProfile* d) {
    Link l = {d->nic_eff * d->nics_per_gpu * d->nic_bw, d->inter_latency, 0, 0, 0, d->nccl};
    return l;
}

// ----------------------------------------------------------------------------
// Context parallelism (layer_parallel/context_parallel.h): each sequence split over cp = U x R
// ranks. A rank holds T/cp tokens of every sequence, so all outside the attention (matmuls,
// norms, activations, logits, tp and pp messages) shrinks by cp; the weights are replicated
// over cp, their gradients reduced and ZeRO-sharded over dp x cp. The attention needs every
// earlier token:
//   Ulysses (degree U; Jacobs et al. 2023): an all-to-all among U adjacent ranks turns the
//     sequence split into a head split before the attention (q, k, v) and back after it (the
//     output), each rank sending (U-1)/U of the tensor. The backward makes the head-split q,
//     k, v, output and output gradient again and sends dq, dk, dv back: twice the forward's
//     volume. Nothing overlaps them. U divides the KV heads of a tp rank.
//   Ring (degree R = cp/U; Liu et al. 2023, zig-zag split: chunks r and 2R-1-r of 2R, so
//     every rank has the same causal work): R-1 steps per layer forward, each sending this
//     rank's K and V on while the attention of the block in hand runs (cost per step: what
//     the block's compute does not hide). The backward makes R exchanges, each hidden the
//     same way by its step's blocks: the first K, V, the middle ones K, V and the dK, dV
//     (fp32) gathered so far, the last dK, dV; one more brings the last dK, dV home, with
//     nothing to hide it.
//   2D (USP, Fang and Zhao 2024; LoongTrain): both, the all-to-all among U adjacent ranks,
//     the ring across R of those groups. U = 1 is the ring, R = 1 Ulysses.
//   All-gather (Llama 3: Dubey et al. 2024, section 3.3.2; a framework's, PlanSetup cp_allgather):
//     the sequence in 2 x cp chunks, rank i holding chunks i and 2cp-1-i (the zig-zag's balance);
//     each layer all-gathers K and V over the cp ranks, then computes the attention of its own
//     queries against the whole sequence's keys, a kernel per chunk. "The all-gather communication
//     latency is exposed in the critical path" (the paper accepts it: GQA's K and V are much smaller
//     than Q). The backward, as autograd's of an all-gather, reduce-scatters the gradients of the
//     gathered K and V to their owners, as exposed; the gathered K and V are the attention kernel's
//     saved inputs (memory.h act_bytes_per_layer). Its link is a collective's over cp ranks tp apart.
// Rank order (grid.h): cp next to tp, cp_rank = ring_rank * U + ulysses_rank, so the all-to-
// all stays in a node while tp*U ranks fit in it, the ring while tp*cp do.

// A layout's cp and U are ModelConfig's cp and cp_ulysses (1 and 1 without context parallelism).
enum { CPK_NONE, CPK_RING, CPK_ULYSSES, CPK_2D, CPK_ALLGATHER, N_CPK };
static const char* const CPK_NAMES[N_CPK] = {"none", "ring", "ulysses", "2d", "allgather"};
static int cp_kind_of(int cp, int U) { return cp == 1 ? CPK_NONE : U == 1 ? CPK_RING : U == cp ? CPK_ULYSSES : CPK_2D; }
// The kind a layout runs: the software's all-gather (cp_allgather) or the one its Ulysses degree gives.
static int cp_kind_run(int cp, int U, const PlanSetup* k) {
    return k->cp_allgather && cp > 1 ? CPK_ALLGATHER : cp_kind_of(cp, U);
}

// Elements of K and V of one rank's tokens (b sequences of T/cp) on one tp rank: what a
// ring step moves (in 2D a rank holds T/R tokens of kv/(t U) heads after the all-to-all:
// as many).
static double cp_kv_elems(const ModelConfig* c, int b, int tp, int cp) {
    return (double)b * c->seq_len / cp * 2 * c->n_kv_head / tp * ((double)c->d_model / c->n_head);
}

// Bytes one rank sends in one layer's two forward all-to-alls: q, k, v (h + 2kv per token on
// a tp rank's heads) and the output (h), (U-1)/U of each.
static double cp_alltoall_bytes(const ModelConfig* c, int b, int tp, int cp, int U, int dtype_bytes) {
    double h = c->d_model, kv = c->n_kv_head * (h / c->n_head);
    return (double)b * c->seq_len / cp * (2 * h + 2 * kv) / tp * dtype_bytes * (U - 1) / U;
}

// The ring's link: its R ranks are tp*U apart, so it stays in the node iff tp*cp ranks fit
// in one; otherwise its slowest hop leaves the node.
static Link cp_ring_link(const DeviceProfile* d, int tp, int cp, int gpus_per_node) {
    if (tp * cp <= gpus_per_node) {
        Link l = {intra_group_bw(d, cp) * d->link_eff, d->intra_latency, 0, 1, 0, d->nccl};
        return l;
    }
    return nic_link(d);
}

// The all-to-all's: U ranks tp apart. Across nodes, what a rank sends to the U - k ranks off
// its node (k of the group on each node) goes through its share of the NICs, every GPU of
// the node sending at once; given as the bandwidth at which all it sends, (U-1)/U of the
// tensor, takes that time.
static Link cp_alltoall_link(const DeviceProfile* d, int tp, int U, int gpus_per_node) {
    if (tp * U <= gpus_per_node) {
        Link l = {intra_group_bw(d, U) * d->link_eff, d->intra_latency, 0, 1, 0, d->nccl};
        return l;
    }
    int k = gpus_per_node / tp;
    if (k < 1) k = 1;
    Link l = nic_link(d);
    l.bw *= (double)(U - 1) / (U - k);
    return l;
}

// Context parallelism's part of one layer (one micro-batch, one GPU). attn_f, attn_b: this
// rank's attention compute forward and backward (all its ring blocks), what the ring's K, V
// steps overlap.
typedef struct {
    double fwd, bwd;              // time it adds to the layer's forward and backward
    double comm_fwd, comm_bwd;    // its communication's own time (before overlap)
    double bytes_fwd, bytes_bwd;  // bytes one rank sends
} CpTime;

static CpTime cp_layer_time(const ModelConfig* c, int b, int tp, int cp, int U, const DeviceProfile* d, double attn_f,
                            double attn_b, Link ring, Link a2a) {
    CpTime t;
    memset(&t, 0, sizeof(t));
    int R = cp / U;
    if (U > 1) {  // forward: q, k, v and the output; backward: q, k, v, output, its gradient and dq, dk, dv
        double v = cp_alltoall_bytes(c, b, tp, cp, U, d->dtype_bytes), two = v / a2a.bw + 2 * a2a.lat;
        t.bytes_fwd += v, t.bytes_bwd += 2 * v;
        t.comm_fwd += two, t.comm_bwd += 2 * two;
        t.fwd += two, t.bwd += 2 * two;
    }
    if (R > 1) {
        double kv = cp_kv_elems(c, b, tp, cp), ci = d->comm_interference, block_b = attn_b / R;
        double step_kv = kv * d->dtype_bytes / ring.bw + ring.lat, step_dkv = kv * 4 / ring.bw + ring.lat;
        double step_both = kv * (d->dtype_bytes + 4) / ring.bw + ring.lat;
        t.bytes_fwd += (R - 1) * kv * d->dtype_bytes, t.bytes_bwd += (R - 1) * kv * d->dtype_bytes + R * kv * 4;
        t.comm_fwd += (R - 1) * step_kv, t.comm_bwd += step_kv + (R - 2) * step_both + 2 * step_dkv;
        t.fwd += (R - 1) * comm_exposed(step_kv, attn_f / R, ci);
        t.bwd += comm_exposed(step_kv, block_b, ci) + (R - 2) * comm_exposed(step_both, block_b, ci) +
                 comm_exposed(step_dkv, block_b, ci) + step_dkv;
    }
    return t;
}

// Llama 3's all-gather (cp_allgather) in one layer (one micro-batch, one GPU): the forward's all-gather of
// K and V, each rank's own kv elements to every other (NCCL's ring: cp - 1 steps, each rank sending cp - 1
// pieces), and the backward's reduce-scatter of their gradients (the same bytes, in K and V's dtype), both on
// the critical path. link: the cp group's (plan_links).
static CpTime cp_allgather_time(const ModelConfig* c, int b, int tp, int cp, const DeviceProfile* d, Link link) {
    CpTime t;
    memset(&t, 0, sizeof(t));
    double sent = (cp - 1) * cp_kv_elems(c, b, tp, cp) * d->dtype_bytes;
    double one = sent / link.bw + ring_latency(cp, 0, link);
    t.bytes_fwd = t.bytes_bwd = sent;
    t.comm_fwd = t.comm_bwd = t.fwd = t.bwd = one;
    return t;
}

// The fraction of a causal flash kernel's rate its shape allows. A thread block takes q_tile queries x k_tile keys
// at a time. The forward runs a block per q_tile queries of a head, query tile i over the key tiles up to its last
// query (ceil((i + 1) q_tile / k_tile) of them: the diagonal's tiles computed whole and masked); the backward a block
// per k_tile keys, key tile j over the query tiles from the one holding its first key (nq - floor(j k_tile / q_tile)
// of nq). Spread over the SMs the kernel takes the longer of its work per SM and its longest block (a whole row or
// column of tiles): with few heads per rank (tp 8, micro-batch 1) the SMs idle behind it. eff = the causal half of
// the scores (T^2 / 2 a head, what the FLOPs count) / (SMs x that time). At q_tile = k_tile = 128 a head's work is
// nt (nt + 1) / 2 tiles for nt^2 / 2 useful. A ring's blocks are taken as the whole sequence's kernel.
static double flash_shape_eff_tiles(const DeviceProfile* d, double b, double heads, double T, double q_tile,
                                    double k_tile, int backward) {
    if (d->sms <= 0) return 1;  // the CPU's blockwise kernels: calibrated as they are (scripts/sweep.py)
    // the sums in closed form: the forward's query tile a multiple of its key tile (r of them), the backward's key
    // tile a multiple of its query tile (r): FA2's every pair. The last query tile stops at the last key tile.
    double nq = ceil(T / q_tile), nk = ceil(T / k_tile), longest = backward ? nq : nk;
    double r = backward ? k_tile / q_tile : q_tile / k_tile;
    double work = backward ? nk * nq - r * nk * (nk - 1) / 2 : r * (nq - 1) * nq / 2 + fmin(r * nq, nk);
    double span = b * heads * work / d->sms > longest ? b * heads * work / d->sms : longest;  // in tiles
    return b * heads * (T * T / 2) / (d->sms * span * q_tile * k_tile);
}
static double flash_shape_eff(const DeviceProfile* d, double b, double heads, double T) {
    return flash_shape_eff_tiles(d, b, heads, T, 128, 128, 0);
}
// FlashAttention-2's tiles on sm80 / sm90 without dropout (csrc/flash_attn/src/flash_fwd_launch_template.h and
// flash_bwd_launch_template.h, run_mha_{fwd,bwd}_hdimN, the same from v2.3.3 to v2.8.3; A100's and H100's opt-in
// shared memory, 163 / 227 KiB, take the >= 144 KiB branches): forward kBlockM x kBlockN 128 x 128 at head dim <= 64,
// 128 x 64 above (head dim 256 on H100: 64 x 64, not taken); backward 128 x 128 at <= 64, 64 x 128 at 96 and 128,
// 64 x 64 at 192 and 256. The masked share depends on the forward's query tile and the backward's key tile: at head
// dim <= 128 both 128, the square model's; at 192 the backward's 64.
static double flash2_shape_eff(const DeviceProfile* d, double b, double heads, double T, double hd, int backward) {
    double q = backward ? (hd <= 64 ? 128 : 64) : 128, k = backward ? (hd <= 128 ? 128 : 64) : (hd <= 64 ? 128 : 64);
    return flash_shape_eff_tiles(d, b, heads, T, q, k, backward);
}
// A flash kernel's rate at T tokens over its rate at the length the device's attn_eff_flash2 was set at, from the
// benchmark's curve (device.h AttnLengthCurve; the Triton kernel's own where it has one) over the tile shape at the
// benchmark's shapes (16k tokens a batch, 16 heads of 128): the masked tiles' share is flash2_shape_eff's. Between
// the points linear in log length; held at the ends (none past 16k). 1 without a curve. pass: the curve's, the
// forward + backward pair (FA2's figures), the causal forward or the backward without the mask (every tile computed:
// no masked share to take out).
enum { CURVE_PAIR, CURVE_FWD, CURVE_BWD_FULL };
static double flash_length_rate(const DeviceProfile* d, const double* tflops, int i, int pass) {
    double T = ATTN_LENGTH_TOKENS[i], b = ATTN_LENGTH_TOKENS[ATTN_LENGTH_POINTS - 1] / T;
    double f = flash2_shape_eff(d, b, 16, T, 128, 0), g = flash2_shape_eff(d, b, 16, T, 128, 1);
    if (pass == CURVE_FWD) return tflops[i] / f;
    if (pass == CURVE_BWD_FULL) return tflops[i];
    return tflops[i] * (1 / f + 2.5 / g) / (1 + 2.5);  // over the pair's shape (the backward: 2.5x the FLOPs)
}
static double flash_length_at(const DeviceProfile* d, const double* tflops, double T, int pass) {
    int last = ATTN_LENGTH_POINTS - 1, i = 0;
    if (T <= ATTN_LENGTH_TOKENS[0]) return flash_length_rate(d, tflops, 0, pass);
    if (T >= ATTN_LENGTH_TOKENS[last]) return flash_length_rate(d, tflops, last, pass);
    while (T > ATTN_LENGTH_TOKENS[i + 1]) i++;
    double w = log(T / ATTN_LENGTH_TOKENS[i]) / log(ATTN_LENGTH_TOKENS[i + 1] / ATTN_LENGTH_TOKENS[i]);
    return (1 - w) * flash_length_rate(d, tflops, i, pass) + w * flash_length_rate(d, tflops, i + 1, pass);
}
static double flash_length_factor(const DeviceProfile* d, double T, int triton) {
    if (!d->attn_length) return 1;
    const double* tflops = triton && d->attn_length->triton[0] > 0 ? d->attn_length->triton : d->attn_length->flash2;
    return flash_length_at(d, tflops, T, CURVE_PAIR) / flash_length_at(d, tflops, d->attn_length->anchor, CURVE_PAIR);
}
// Hopper's fused attention by pass: its forward's or backward's rate at T over the pair's at the anchor
// (attn_eff_flash3 is that pair's rate), from cuDNN's figures (device.h fused_fwd, fused_bwd). The backward's figure is
// without the mask: taken as the causal kernel's rate on the tiles it computes. 1 without them (an A100's flash3 is
// FA2-class).
static double fused_length_factor(const DeviceProfile* d, double T, int backward) {
    const AttnLengthCurve* curve = d->attn_length;
    if (!curve || curve->fused_fwd[0] <= 0) return 1;
    double fwd = flash_length_at(d, curve->fused_fwd, curve->anchor, CURVE_FWD);
    double bwd = flash_length_at(d, curve->fused_bwd, curve->anchor, CURVE_BWD_FULL);
    double pair = (1 + 2.5) / (1 / fwd + 2.5 / bwd);
    return (backward ? flash_length_at(d, curve->fused_bwd, T, CURVE_BWD_FULL)
                     : flash_length_at(d, curve->fused_fwd, T, CURVE_FWD)) / pair;
}

// FlashAttention-2's backward under GQA, fewer KV heads than query heads (Dao-AILab/flash-attention
// csrc/flash_attn/flash_api.cpp mha_bwd and mha_varlen_bwd, the same at 765fbd92 and 00979f57): the kernel writes dK
// and dV for every query head (dk_expanded, dv_expanded: seqlen_k x num_heads x head_dim, as its MHA benchmark writes
// them, so inside the rate), then two at::sum_out kernels add each group into its KV head: they read 2 x keys x heads
// x hd and write 2 x keys x kv_heads x hd values, a pair per kernel call (a repeat_kv before the kernel, torchtitan's,
// sums the same in autograd's backward of its expand). keys: the key positions of the rank's calls over a micro-batch:
// b T (the ring's R blocks of T / R keys), under the all-gather b T (2cp + 1) / 2cp (the calls of chunks i and
// 2cp - 1 - i see i + 1 and 2cp - i of the 2cp chunks): cp times the rank's own tokens, where the linear work is.
static double flash2_gqa_sum_time(const ModelConfig* c, const DeviceProfile* d, int b, int tp, int cp, int U,
                                  int kernels, int allgather) {
    double hd = (double)c->d_model / c->n_head, heads = (double)c->n_head / (tp * U);
    double kv_heads = (double)c->n_kv_head / (tp * U);
    double keys = (double)b * c->seq_len * (allgather ? (2.0 * cp + 1) / (2 * cp) : 1);
    double bytes = 2 * keys * (heads + kv_heads) * hd * d->dtype_bytes;
    return bytes / (d->hbm_bw * d->hbm_eff) + 2 * kernels * d->op_latency;
}

// Times of one transformer layer for one micro-batch on one GPU.
typedef struct {
    double fwd, bwd;     // bwd without recomputation
    double bwd_w;        // of bwd, the weight pass W (the zero-bubble schedules defer it); the rest is the input pass B
    double attn_fwd;     // the core attention forward with its cp communication (what selective recompute redoes)
    double comm_fwd, comm_bwd;  // tensor-parallel communication of fwd / bwd (before overlap)
    double comm_fwd_charged;    // of it, what fwd charges (less where --tp-comm-overlap hides it)
    double regather;            // --recompute full_distributed: the all-gather of the saved layer input (predict.h)
    CpTime cp;           // context parallelism's part of fwd / bwd (in them)
} LayerTime;

// Megatron-core's --tp-comm-overlap as it ran in mid-2024: Megatron-LM r0.8 (f2e5db40, training/initialize.py
// _initialize_tp_communicators) calls Transformer Engine's initialize_ub with ub_cfgs {} unless a yaml is named, so
// every linear takes TE's defaults (TransformerEngine v1.7, 4e7caa1c, module/base.py and csrc/comm_gemm_overlap.h):
// - "ring_exchange" (qkv and fc1 forward, proj and fc2 input gradient: the all-gathers): the gathered input in tp
//   chunks of M/tp rows, one GEMM of the whole weight per chunk, the first on this rank's own chunk while the next is
//   sent round the ring by the copy engines (UbufP2PCommOverlap sets use_ce 1: no SMs), the chunks' GEMMs on
//   min(3, tp) streams (_NUM_MAX_UB_STREAMS), so one chunk's last wave shares the SMs with the next's first;
// - "pipeline" (proj and fc2 forward: the reduce-scatters): the weight's outputs in UB_SPLITS chunks, each chunk's
//   reduce-scatter on UB_COMM_SMS SMs (userbuffers' kernels) while the next chunk's GEMM runs beside it, the last
//   chunk's reduce-scatter (on UB_MAX_SM 32 SMs) after every GEMM: exposed;
// - "bulk" (qkv and fc1 backward): the all-gather of the layer's sequence-parallel input (for the weight gradient)
//   beside the input-gradient GEMM, and the input gradient's reduce-scatter beside the weight-gradient GEMM, each on
//   UB_COMM_SMS SMs.
// set_sm_margin 0: every GEMM is launched for all the device's SMs; while a userbuffers kernel holds UB_COMM_SMS of
// them the GEMM runs on the rest (its waves over sms - UB_COMM_SMS at that share of the peak). The collectives move
// at the tp link's rate (a ring step of bytes/tp a chunk); what a copy engine's or the kernels' HBM traffic costs
// the GEMM is not charged (the GEMMs here are compute-bound).
#define UB_COMM_SMS 16
#define UB_SPLITS 4
#define UB_STREAMS 3
// A GEMM of time g (g_slow on the SMs a userbuffers kernel leaves) that starts while the kernel runs for `busy` more.
static double ub_gemm_beside(double g, double g_slow, double busy) {
    if (busy <= 0) return g;
    if (busy >= g_slow) return g_slow;
    return busy + (1 - busy / g_slow) * g;
}
static double ub_gemm_time(const DeviceProfile* d, double M, double N, double K, double batch, int comm_sms) {
    if (comm_sms <= 0 || d->sms <= comm_sms) return matmul_time(d, M, N, K, batch);
    DeviceProfile rest = *d;
    rest.sms = d->sms - comm_sms, rest.peak_flops = d->peak_flops * rest.sms / d->sms;
    return matmul_time(&rest, M, N, K, batch);
}
// ring_exchange: a GEMM of M rows (N outputs from K inputs) whose input is all-gathered over tp ranks, chunk_bytes a
// ring step. The tp chunk GEMMs run as one batch (the streams fill each other's waves) unless the ring is slower:
// chunk i + 1 waits for the i + 1-th step, the last GEMM follows the last step.
static double ub_ring_exchange_time(const DeviceProfile* d, double M, double N, double K, int tp, double chunk_bytes,
                                    Link l) {
    double chunks = matmul_time(d, M / tp, N, K, tp) + (tp - 1) * d->matmul_latency;
    double ring = (tp - 1) * (chunk_bytes / l.bw + l.lat) + matmul_time(d, M / tp, N, K, 1);
    return chunks > ring ? chunks : ring;
}
// pipeline: a GEMM of M rows, N outputs from K inputs, reduce-scattered over tp ranks (bytes the whole output): its
// UB_SPLITS chunks of N / UB_SPLITS outputs in turn, chunk i's reduce-scatter beside chunk i + 1's GEMM.
static double ub_pipeline_rs_time(const DeviceProfile* d, double M, double N, double K, int tp, double bytes,
                                  Link l) {
    double S = UB_SPLITS, g = matmul_time(d, M, N / S, K, S) / S;
    double g_slow = ub_gemm_time(d, M, N / S, K, S, UB_COMM_SMS) / S;
    double rs = allgather_time(tp, bytes / S, l.bw, l.lat), t_gemm = 0, t_comm = 0;
    for (int i = 0; i < UB_SPLITS; i++) {
        t_gemm += ub_gemm_beside(g, g_slow, t_comm - t_gemm);
        t_comm = (t_comm > t_gemm ? t_comm : t_gemm) + rs;
    }
    return t_comm;
}
// bulk: a GEMM of M rows (N, K) beside one collective of time comm on UB_COMM_SMS SMs, both from the start.
static double ub_bulk_time(const DeviceProfile* d, double M, double N, double K, double comm) {
    double g = ub_gemm_beside(matmul_time(d, M, N, K, 1), ub_gemm_time(d, M, N, K, 1, UB_COMM_SMS), comm);
    return g > comm ? g : comm;
}

// cp, U: context parallelism; ring, a2a: its links (unused at cp 1; under cp_allgather ring is the all-gather's).
static LayerTime layer_time(const ModelConfig* c, int b, int tp, int sp, int cp, int U, const PlanSetup* k,
                            const DeviceProfile* d, Link tp_link, Link ring, Link a2a) {
    LayerTime lt;
    lt.regather = 0;
    int R = cp / U;
    double T = c->seq_len, s = T / cp, h = c->d_model, a = c->n_head, hd = h / a, t = tp, e = d->dtype_bytes;
    double kv = c->n_kv_head * hd, F = c->d_ff, n = b * s;  // s: the tokens of a sequence this rank holds
    double n_el = sp ? n / t : n;  // tokens of the ops outside the tensor-parallel regions
    int llama = c->arch == ARCH_LLAMA, gated = config_mlp_gated(c);  // RoPE; the MLP's kind (--mlp)
    // memory-bound ops, forward and backward (bytes per element: norm_bytes and the table above)
    double norm_f = elementwise_time(d, n_el * h * norm_bytes(k->rms_kernel, e, 0));
    double norm_b = elementwise_time(d, n_el * h * norm_bytes(k->rms_kernel, e, 1));
    // Dropout, where a framework trains GPT at Megatron-LM's defaults (--attention-dropout 0.1, --hidden-dropout 0.1:
    // megatron/arguments.py at aed2f75 (2021-04), 6aaafee (2022-05), 285068c8 (2023-01) and Megatron-DeepSpeed's)
    // and memory.h keeps Korthikanti's 1-byte masks. Hidden dropout is fused into bias + dropout + add
    // (transformer.py bias_dropout_add_fused_train, torch.jit): the residual add writes the mask (fwd) and reads it
    // (bwd), 1 byte an element more. Attention dropout is its own kernel on the s x s probabilities after the fused
    // softmax (transformer.py `attention_probs = self.attention_dropout(attention_probs)`): torch's dropout reads P,
    // writes P' and the mask (2e + 1); its backward reads the gradient and the mask and writes one (2e + 1). Flash
    // kernels drop inside the kernel (no s x s tensor): not charged. This trainer has no dropout.
    int dropout = c->arch == ARCH_GPT2 && !k->no_dropout && !k->own_buffers;
    double mask = dropout ? 1 : 0;
    double resid = elementwise_time(d, n_el * h * (3 * e + mask));
    double rope = llama ? elementwise_time(d, 2 * n * (h + kv) / t * e) : 0;
    double act_f = elementwise_time(d, (gated ? 3 : 2) * n * F / t * e);
    double act_b = elementwise_time(d, (gated ? 5 : 3) * n * F / t * e);
    double attn, attn_bwd;
    // With context parallelism each rank does 1/cp of the attention (the zig-zag split
    // balances the causal work), as R ring blocks: T/R tokens of a/(t U) heads each. With
    // --cp-split contiguous ring rank r holds piece r: every ring step waits for a rank with
    // a whole block (the last has R - 1/2 blocks, the first 1/2), so kernels that skip the
    // masked work take (2R-1)/R of the balanced time.
    double imbalance = c->cp_contiguous && R > 1 ? (2.0 * R - 1) / R : 1;
    int allgather = k->cp_allgather && cp > 1, kernels = allgather ? 2 : R;  // all-gather: a kernel per own chunk
    if (attn_is_flash(k->attention)) {
        // QK^T and AV: 4 b T^2 h FLOPs, causal kernels skip half; the backward does 2.5x (5 matmuls vs 2).
        // FlashAttention-2 and in Triton: the device's rate at its anchor length times the benchmark's rise with T
        // (flash_length_factor); the Triton kernel's forward and backward slower by the measured factors. Hopper's
        // fused attention: the same anchor's rate times each pass's own curve (fused_length_factor)
        double flops = 4.0 * b * T * T * h / (t * cp) * 0.5 * imbalance;
        int triton = k->attention == ATTN_FLASH_TRITON && !k->own_kernels;
        double kernel = k->own_kernels                  ? d->attn_eff_own
                        : k->attention == ATTN_FLASH1 ? d->attn_eff_flash1
                        : k->attention == ATTN_FLASH3 ? d->attn_eff_flash3
                                                      : d->attn_eff_flash2 * flash_length_factor(d, T, triton);
        int fa2 = k->attention == ATTN_FLASH2 && !k->own_kernels;  // FA2's own tiles by pass; the others 128 x 128
        int fused = k->attention == ATTN_FLASH3 && !k->own_kernels;  // Hopper's fused attention: a rate by pass
        double kernel_f = kernel * (fused ? fused_length_factor(d, T, 0) : 1);
        double kernel_b = kernel * (fused ? fused_length_factor(d, T, 1) : 1);
        double heads = a / (t * U), eff_f = kernel_f * (fa2 ? flash2_shape_eff(d, b, heads, T, hd, 0)
                                                            : flash_shape_eff(d, b, heads, T));
        double eff_b = kernel_b * (fa2 ? flash2_shape_eff(d, b, heads, T, hd, 1) : flash_shape_eff(d, b, heads, T));
        double slow_f = triton ? FLASH_TRITON_FWD_SLOWDOWN : 1, slow_b = triton ? FLASH_TRITON_BWD_SLOWDOWN : 1;
        attn = slow_f * flops / (d->peak_flops * eff_f) + kernels * d->op_latency;
        attn_bwd = slow_b * 2.5 * flops / (d->peak_flops * eff_b) + kernels * d->op_latency;
        if (fa2 && c->n_kv_head < c->n_head) attn_bwd += flash2_gqa_sum_time(c, d, b, tp, cp, U, kernels, allgather);
    } else {
        // per block two batched matmuls over the full scores (no causal saving), then the
        // softmax passes over them; the backward has four such matmuls. By shape, per head:
        // the scores S = Q K^T reduce over the head size (M = N = Tb, K = hd), the output P V
        // over the keys (M = Tb, N = hd, K = Tb); in the backward dP = dO V^T has the scores'
        // shape, dV = P^T dO, dQ = dS K and dK = dS^T Q the output's
        DeviceProfile dn = *d;
        dn.matmul_eff = d->bmm_eff;
        double Tb = T / R, heads = b * a / (t * U), scores = heads * Tb * Tb;
        double bmm_s = matmul_time(&dn, Tb, Tb, hd, heads), bmm_o = matmul_time(&dn, Tb, hd, Tb, heads);
        double drop = dropout ? elementwise_time(d, scores * (2 * e + 1)) : 0;
        attn = R * (bmm_s + bmm_o + elementwise_time(d, scores * softmax_bytes(k->attention, e, 0)) + drop);
        attn_bwd = R * (bmm_s + 3 * bmm_o + elementwise_time(d, scores * softmax_bytes(k->attention, e, 1)) + drop);
    }
    lt.cp = allgather ? cp_allgather_time(c, b, tp, cp, d, ring) : cp_layer_time(c, b, tp, cp, U, d, attn, attn_bwd,
                                                                                   ring, a2a);
    // the four linears (outputs x inputs per rank): forward, input gradient, weight gradient
    double lin_n[4] = {(h + 2 * kv) / t, h, (gated ? 2 : 1) * F / t, h}, lin_k[4] = {h, h / t, h, F / t};
    double mm = 0, mm_dx = 0, mm_dw = 0, fw[4], dx[4], dw[4];
    for (int i = 0; i < 4; i++) {
        mm += fw[i] = matmul_time(d, n, lin_n[i], lin_k[i], 1);
        mm_dx += dx[i] = linear_dx_time(d, n, lin_n[i], lin_k[i]);
        mm_dw += dw[i] = linear_dw_time(d, n, lin_n[i], lin_k[i]);
    }
    // Megatron: 2 all-reduces of the (s, b, h) activations forward and 2 backward; with SP
    // an all-gather + reduce-scatter pair instead of each, the same bytes (Korthikanti §4.2.2).
    // SP keeps only its 1/t slice of the qkv and fc1 inputs and gathers them again in the
    // backward for the weight gradients; Megatron overlaps that all-gather with the input-
    // gradient matmul, so it adds no time here.
    double x_bytes = n * h * e;
    double one = sp ? 2 * link_gather_time(tp, x_bytes, tp_link) : link_allreduce_time(tp, x_bytes, tp_link);
    lt.comm_fwd = 2 * one;
    // the backward's: one per column-parallel region's input gradient, two in a SwiGLU whose gate and up are
    // separate linears (without SP; with it the region's one gather is reduce-scattered once)
    lt.comm_bwd = (2 + (k->swiglu_two_linears && gated && !sp)) * one;
    // The backward's two collectives are the input gradients of the column-parallel qkv and fc
    // linears (f's backward; with SP their reduce-scatters). With asynchronous tensor-parallel
    // communication each runs while its linear's weight gradient is computed (not when the
    // schedule defers that to a W pass): what the weight gradient does not hide is exposed, the
    // hidden part costs the software's NCCL interference of itself (the collective's SMs and HBM traffic).
    double bwd_comm = lt.comm_bwd, fwd_comm = lt.comm_fwd;
    if (k->tp_async_dgrad && !schedule_has_w(c->schedule)) {
        double ci_nccl = software_nccl_interference(k, d);
        bwd_comm = comm_exposed(one, dw[0], ci_nccl) + comm_exposed(one, dw[2], ci_nccl);
    }
    // Megatron-core's --tp-comm-overlap (with SP), Transformer Engine's userbuffers (above): forward, the all-gathers
    // before qkv and fc1 by ring exchange, the reduce-scatters after proj and fc2 pipelined; backward, the gathered
    // output gradients of proj and fc2 by ring exchange, the bulk re-gather of the qkv and fc1 inputs beside their
    // input-gradient GEMMs and the input gradients' reduce-scatters beside their weight-gradient GEMMs. The
    // collectives' time is what these take beyond the plain GEMMs (mm, mm_dx, mm_dw)
    if (k->tp_comm_overlap && sp && tp > 1) {
        double ag = one / 2, step = x_bytes / tp;
        fwd_comm = ub_ring_exchange_time(d, n, lin_n[0], lin_k[0], tp, step, tp_link) - fw[0] +
                   ub_ring_exchange_time(d, n, lin_n[2], lin_k[2], tp, step, tp_link) - fw[2] +
                   ub_pipeline_rs_time(d, n, lin_n[1], lin_k[1], tp, x_bytes, tp_link) - fw[1] +
                   ub_pipeline_rs_time(d, n, lin_n[3], lin_k[3], tp, x_bytes, tp_link) - fw[3];
        bwd_comm = 0;
        for (int i = 0; i < 4; i += 2)  // qkv, fc1: dX[n, K] = dY[n, N] W^T and dW[K, N] = X^T dY
            bwd_comm += ub_bulk_time(d, n, lin_k[i], lin_n[i], ag) - dx[i] +
                        ub_bulk_time(d, lin_k[i], lin_n[i], n, ag) - dw[i];
        for (int i = 1; i < 4; i += 2)  // proj, fc2: the output gradient gathered
            bwd_comm += ub_ring_exchange_time(d, n, lin_k[i], lin_n[i], tp, step, tp_link) - dx[i];
    }
    lt.attn_fwd = attn + lt.cp.fwd;
    lt.comm_fwd_charged = fwd_comm;
    lt.fwd = 2 * norm_f + 2 * resid + rope + act_f + mm + attn + fwd_comm + lt.cp.fwd;
    // backward: each linear's input gradient in B and its weight gradient (as many FLOPs:
    // 2 x the layer's matmul parameters per token) in W; attention, norms, the elementwise
    // ops and the tensor-parallel and context-parallel communication of the input gradients
    // are B's
    lt.bwd = 2 * norm_b + 2 * resid + rope + act_b + mm_dx + mm_dw + attn_bwd + bwd_comm + lt.cp.bwd;
    lt.bwd_w = mm_dw;
    return lt;
}

// Accumulating a framework's gradients over m micro-batches where they are autograd's (PlanSetup grads_lazy):
// each backward writes a new gradient in the weights' dtype (e bytes, the weight-gradient GEMM's output, in its
// time), which an elementwise pass adds into the accumulated one of g bytes (torch/distributed/_composable/fsdp/
// _fsdp_param.py: to_accumulated_grad_if_needed converts the first to the reduce dtype, reading e and writing g,
// nothing where g = e (autograd keeps the tensor); accumulate_unsharded_grad_if_needed adds each later one, reading
// e and reading and writing g; autograd's AccumulateGrad likewise adds in place). Megatron-core's contiguous
// main_grad is accumulated into by the weight-gradient GEMM itself (Transformer Engine's fuse_wgrad_accumulation):
// no pass (upfront). The time one micro-batch's backward spends on it, on average over the m, for n parameters
// accumulated in g bytes each.
static double grad_accumulate_time(const DeviceProfile* d, double g, double n_params, int m) {
    double e = d->dtype_bytes;
    double bytes = ((g != e ? e + g : 0) + (m - 1) * (e + 2 * g)) / m * n_params;
    return bytes > 0 ? elementwise_time(d, bytes) : 0;
}

// nanotron's cut (software.h SPLIT_COST) of the L layers over n stages into layers[n]: a layer weighs
// 4 h (heads x d_head) + 3 h F, the head V h, the embedding and the final norm nothing; each block joins the current
// stage, which passes to the next once the running sum exceeds total x (stage + 1) / n. Returns the stage the head
// lands on (the loss's blocks, weighing nothing, follow it).
static int chunk_split_cost(const ModelConfig* c, int n, int* layers) {
    double h = c->d_model, layer = 4.0 * c->n_head * (c->d_model / c->n_head) * h + 3.0 * h * c->d_ff;
    double total = c->n_layer * layer + (double)c->vocab * h, sum = 0;
    int st = 0;
    for (int g = 0; g < n; g++) layers[g] = 0;
    for (int i = 0; i < c->n_layer; i++) {
        layers[st]++, sum += layer;
        if (sum > total * (st + 1) / n && st < n - 1) st++;
    }
    return st;
}

// The pipeline cut: layers, embedding and head of each of the n_chunks global chunks.
static void chunk_split(const ModelConfig* c, int n_chunks, int split, int* layers, int* has_embed, int* has_head) {
    int L = c->n_layer;
    if (split == SPLIT_COST) {  // nanotron's: one chunk a stage (plan_check_layout)
        int head = chunk_split_cost(c, n_chunks, layers);
        for (int g = 0; g < n_chunks; g++) has_embed[g] = g == 0, has_head[g] = g == head;
        return;
    }
    if (split == SPLIT_LAYERS) {  // the trainer's cut (params.h chunk_cut: even, or by cost under --pp-split auto)
        chunk_cut(c, c->pp, n_chunks / c->pp, layers);
        for (int g = 0; g < n_chunks; g++) has_embed[g] = g == 0, has_head[g] = g == n_chunks - 1;
        return;
    }
    if (split == SPLIT_ENDS) {  // L + 2 places cut evenly (the first chunks take the remainder); place 0
        // is the embedding's, place L + 1 the head's
        for (int g = 0; g < n_chunks; g++) {
            layers[g] = chunk_layer_count(L + 2, n_chunks, g) - (g == 0) - (g == n_chunks - 1);
            has_embed[g] = g == 0, has_head[g] = g == n_chunks - 1;
        }
        return;
    }
    // by parameters: items 0 = embedding, 1..L = layers, L+1 = final norm, L+2 = head,
    // each weighing its parameter count
    int items = L + 3;
    double C = c->d_model, V = c->vocab_padded, layer = chunk_params(c, 1, 0, 0, 1);
    double* w = (double*)xmalloc(sizeof(double) * items);
    for (int i = 0; i < items; i++) w[i] = i == 0 || i == L + 2 ? V * C : i == L + 1 ? C : layer;
    // smallest bottleneck (heaviest chunk) a contiguous cut reaches: bisection, each probe
    // filling the chunks greedily up to it
    double lo = 0, hi = 0;
    for (int i = 0; i < items; i++) hi += w[i];
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi), sum = 0;
        int parts = 1;
        for (int i = 0; i < items; i++) {
            if (w[i] > mid) { parts = n_chunks + 1; break; }
            if (sum + w[i] > mid) parts++, sum = 0;
            sum += w[i];
        }
        if (parts <= n_chunks) hi = mid; else lo = mid;
    }
    int start = 0;
    for (int g = 0; g < n_chunks; g++) {
        int end = start;
        double sum = 0;
        // fill up to the bottleneck, leaving at least one item for each later chunk
        while (end < items - (n_chunks - 1 - g) && (end == start || sum + w[end] <= hi * (1 + 1e-12))) sum += w[end++];
        if (g == n_chunks - 1) end = items;
        int l0 = start > 1 ? start : 1, l1 = end < L + 1 ? end : L + 1;
        layers[g] = l1 > l0 ? l1 - l0 : 0;
        has_embed[g] = start == 0, has_head[g] = end == items;
        start = end;
    }
    free(w);
}

// --offload optimizer: the step's optimizer on the host (ZeRO-Offload, Ren et al. 2021) for
// opt_params parameters: the gradients down the host link (grad_bytes each at host_down_bw; they leave as the
// backward finishes, so dp_overlap of them hides under it as the DP reduction does), AdamW on the
// host streaming its states (state_bytes a parameter: the fp32 master, m, v, 4 x 3; states_bf16's bf16
// weights, m, v, 2 x 3, memory.h offload_state_bytes) and the gradient in and the states out
// (state_bytes + grad_bytes + state_bytes at host_mem_bw), and the weights the forward reads back up the link
// (dtype_bytes each at host_up_bw; the CPU build's "link" is a copy in host memory). Without ZeRO-Offload's delayed
// update (which changes the math) the host step and the upload are on the step's critical path.
static double offload_optimizer_time(const DeviceProfile* d, double opt_params, double state_bytes) {
    double down = opt_params * d->grad_bytes / d->host_down_bw;
    double adam = opt_params * (state_bytes + d->grad_bytes + state_bytes) / d->host_mem_bw;
    double up = opt_params * d->dtype_bytes / d->host_up_bw;
    return down * (1 - d->dp_overlap) + adam + up;
}

// --offload activations: the copies of the worst stage (stage 0 holds the most in flight) per
// step, out to the host (host_down_bw) and back (host_up_bw), slot_bytes each, for every micro-batch of every chunk
// that has more slots than frames (an upper bound: a micro-batch that stays in a frame does not
// move). On a GPU they run on their own stream, hidden unless they outlast the stage's compute
// (t_compute), but for the copies in with --offload-frames 1; the CPU build copies in line.
static double offload_activation_time(const ModelConfig* c, const DeviceProfile* d, int n_micro, double t_compute) {
    if (!(c->offload & OFFLOAD_ACTIVATIONS)) return 0;
    const PipeCounts* pc = pipe_counts(c, n_micro);
    ActShape s = act_shape(c, c->micro_batch);
    int host = d->dtype_bytes == 4, layers = (c->n_layer + c->pp * c->vpp - 1) / (c->pp * c->vpp);
    double slot = act_slot_bytes(&s, layers, c->recompute, d->dtype_bytes, host ? 1 : 256), bytes = 0;
    for (int j = 0; j < c->vpp; j++)  // bytes: each way
        if (act_device_slots(pc->chunks[j].slots, c) < pc->chunks[j].slots) bytes += (double)n_micro * slot;
    double t_in = bytes / d->host_up_bw, t = bytes / d->host_down_bw + t_in;
    // one frame: no prefetch, each copy in is waited for
    double waited = offload_frames_of(c) == 1 ? t_in : 0, hidden = t - waited;
    return host ? t : waited + (hidden > t_compute ? hidden - t_compute : 0);
}

#endif
