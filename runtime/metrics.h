// metrics.h: what a run reports, for both builds. The start-up table, per-step lines
// (loss, lr, ms, tokens/s, TFLOP/s, MFU, HFU, bubble, communication time per group),
// the JSON log (--log, --log-ranks), the Chrome trace (--trace), and predicted vs
// measured memory per rank. The logs are opened at start-up (their paths were checked by
// runtime/run.h's outputs_check) and every line is flushed with its errors checked; the trace
// is replaced atomically (files.h).
//
// FLOPs (PaLM, Chowdhery et al. 2022, appendix B): model FLOPs per token =
// 6*N + 12*L*d*T (config_flops_per_token). MFU = model FLOP/s / peak. HFU adds the
// recomputed forward work (config_recompute_flops_per_token, the planner's count too): full
// recomputation every layer's forward again (not the head), selective the attention core's
// forward 4*L*d*T. With documents the
// attention term counts only the visible pairs and padding is not counted (step_flops).
#ifndef METRICS_H
#define METRICS_H

#include <omp.h>
#include <sys/resource.h>
#include "layout/args.h"
#include "data/data.h"
#include "base/files.h"
#include "layout/grid.h"
#include "layout/params.h"
#include "planner/planner.h"
#include "layout/schedule.h"
#include "runtime/noise_scale.h"
#include "runtime/pp_costs.h"
#include "backend/trace.h"

#define TRACE_STEPS 3       // steps recorded by --trace (the first is warm-up)
#define HOST_CHARS 64

typedef struct Metrics {
    Args* args;
    int rank, world;
    double peak_flops;          // per rank (device), FLOP/s
    const char* profile;        // the planner's profile of this build's device (planner/device.h): "cpu" unless set
    const char* peak_source;
    FILE* log;                  // rank 0: --log
    FILE* rank_log;             // every rank: --log-ranks
    char rank_log_path[PATH_CAP];
    double t_step0, step_ms;
    double comm_s_prev[N_GROUPS];
    double phase_t0;
    const char* phase;
    Trace trace;                // the step's compute time; --trace: this rank's events (backend/trace.h)
    Bytes doc_events;           // --trace, rank 0: instant events naming each micro-batch's documents (train.h)
    // this rank's buffers: params, grads, optimizer state, activations at the schedule's peak
    double pred_bytes[4];
    double host_opt_bytes, host_act_bytes;  // AdamW's state, activation slots in the offload tier (--offload)
    int cfg_offload;            // --offload's bits
    PlanResult plan;            // the planner's prediction for this layout (same model as ./train --plan)
    double ms_sum;              // measured step times after the first, for the end-of-run comparison
    int ms_n;
    double tokens_sum, model_flops_sum, hw_flops_sum;  // the same steps' tokens and FLOPs: the end's means
    double ema_ms;              // for the ETA
    double last_bubble, bubble_formula;
    // documents (layout/packing.h): the step's spread of attention work across micro-batches,
    // dp ranks and cp ranks (train.h batch_imbalance); logged when show_imbalance
    double att_spread[3], att_work;  // and the global batch's attention work (visible pairs)
    double step_tokens;              // the tokens the step's loss counts (padding left out): tokens/s, MFU
    NoiseScale noise;                // --noise-scale: its averages, and the estimate after the last step (tokens)
    double noise_scale;
    int show_imbalance;
    double tok_s, mfu, hfu, tflops;
    char (*hosts)[HOST_CHARS];  // rank 0: each rank's host name (for the grid at start-up)
} Metrics;

static Metrics* trace_target = NULL;  // the Metrics the communicator reports collectives to

static void trace_collective(const char* group, double t0, double t1) {
    trace_event(trace_target ? &trace_target->trace : NULL, group, -1, -1, -1, t0, t1);
}
static void metrics_init(Metrics* m, Args* a, int rank, int world, double peak_flops, const char* peak_source) {
    memset(m, 0, sizeof(*m));
    m->args = a, m->rank = rank, m->world = world;
    m->peak_flops = peak_flops, m->peak_source = peak_source, m->profile = "cpu";
    if (a->log && rank == 0) m->log = output_open(a->log, "--log");
    if (a->log && a->log_ranks)
        m->rank_log =
            output_open(path_format(m->rank_log_path, "--log-ranks", "%s.rank%d", a->log, rank), "--log-ranks");
    if (a->trace) {
        m->trace.events = (TraceEvent*)xmalloc(sizeof(TraceEvent) * MAX_TRACE_EVENTS);
        trace_target = m;
        comm_trace_hook = trace_collective;
    }
    // which host each rank runs on, for the grid print: a multi-node run shows its placement
    char host[HOST_CHARS] = "";
    gethostname(host, sizeof(host) - 1);
    if (rank == 0) m->hosts = (char(*)[HOST_CHARS])xcalloc(world, HOST_CHARS);
    if (world == 1) memcpy(m->hosts[0], host, HOST_CHARS);
    else  // comm: world gather of the host names
        mpiCheck(MPI_Gather(host, HOST_CHARS, MPI_BYTE, rank == 0 ? m->hosts : NULL, HOST_CHARS, MPI_BYTE, 0,
                            MPI_COMM_WORLD));
}

// The host of each run of consecutive ranks: "hosts: ranks 0-7 on node-a, 8-15 on node-b".
static void print_hosts(const Metrics* m) {
    printf("hosts: ranks");
    for (int r = 0, end; r < m->world; r = end + 1) {
        for (end = r; end + 1 < m->world && !strcmp(m->hosts[end + 1], m->hosts[r]); end++) {}
        char shown[4 * HOST_CHARS];
        printf(r ? ", %d" : " %d", r);
        if (end > r) printf("-%d", end);
        printf(" on %s", printable(m->hosts[r], shown, sizeof(shown)));
    }
    printf("\n");
}

// The step's model FLOPs (*model) and those plus the recomputed forward (*hardware), for
// `tokens` counted tokens of G sequences of T. PaLM's attention term 12*L*d*T per token is
// scaled by att_frac, the visible pairs over a causal mask's G*T*(T+1)/2: 1 without documents;
// with document masking it counts only the attention the masked kernels compute.
static void step_flops(const ModelConfig* c, double tokens, double att_frac, double* model, double* hardware) {
    double T = c->seq_len, positions = (double)c->global_batch * T, N = config_matmul_params(c);
    double att = 12.0 * c->n_layer * c->d_model * T * positions * att_frac;
    *model = 6.0 * N * tokens + att;
    // the recomputed forward (config_recompute_flops_per_token), its attention part (4*L*d*T a
    // token) scaled by att_frac as the model FLOPs' is
    double recompute = config_recompute_flops_per_token(c, c->seq_len);
    double recompute_att = recompute > 0 ? 4.0 * c->n_layer * c->d_model * T : 0;
    *hardware = *model + (recompute - recompute_att) * tokens + recompute_att * positions * att_frac;
}

static void print_startup(const Layout* L, const ParamLayout* P, const ModelConfig* c, const Args* a,
                          const TokenStream* tr, const TokenStream* va, const Metrics* m, int n_micro, int start_step) {
    char b1[32], b2[32], b3[32];
    double tokens_step = (double)c->global_batch * c->seq_len;
    // the rows first, then the box as wide as its widest value
    enum { MAX_ROWS = 32, VALUE_CHARS = 4 * 640 };
    const char* keys[MAX_ROWS];
    char(*values)[VALUE_CHARS] = (char(*)[VALUE_CHARS])xcalloc(MAX_ROWS, VALUE_CHARS);
    int n_rows = 0, width = 44;
#define ROW(k, ...) do { char v_[640]; snprintf(v_, sizeof(v_), __VA_ARGS__); keys[n_rows] = k; \
        printable(v_, values[n_rows], VALUE_CHARS); \
        width = (int)strlen(values[n_rows]) > width ? (int)strlen(values[n_rows]) : width; n_rows++; } while (0)
    ROW("model", "%s (%s)", a->model, arch_name(c->arch));
    ROW("n_layer / n_head", "%d / %d (kv %d), head size %d", c->n_layer, c->n_head, c->n_kv_head,
        c->d_model / c->n_head);
    ROW("d_model / d_ff", "%d / %d", c->d_model, c->d_ff);
    ROW("seq_len / vocab", "%d / %d (padded %d)", c->seq_len, c->vocab, c->vocab_padded);
    ROW("parameters", "%s (matmul %s)", fmt_count(config_num_params(c), b1), fmt_count(config_matmul_params(c), b2));
    ROW("FLOPs per token", "%s (6N + 12*L*d*T)", fmt_count(config_flops_per_token(c, c->seq_len), b3));
    ROW("train data", "%s (%zu tokens)", tr->source, tr->n_tokens);
    ROW("val data", "%s (%zu tokens)", va->source, va->n_tokens);
    ROW("documents", "%s", a->doc_note);
    ROW("steps", "%d (from %d), warmup %d", c->steps, start_step, c->warmup);
    ROW("lr", "%g -> %g cosine, wd %g, clip %g", c->lr, c->lr * c->min_lr_frac, c->weight_decay, c->grad_clip);
    ROW("batch", "micro %d x %d micro-batches x dp %d = %d seq", c->micro_batch, n_micro, c->dp, c->global_batch);
    ROW("tokens per step", "%.0f", tokens_step);
    ROW("layout", "dp %d x pp %d x cp %d x tp %d = %d ranks%s", c->dp, c->pp, c->cp, c->tp, L->world,
        c->sp ? ", sp" : "");
    if (c->cp > 1) {
        static const char* kind[] = {"ring", "Ulysses", "2D"};
        const char* split = c->cp_doc ? "each document's zig-zag" : c->cp_contiguous ? "contiguous" : "zig-zag";
        int U = c->cp_ulysses;
        const char* what = kind[U == 1 ? 0 : U == c->cp ? 1 : 2];
        ROW("context parallel", "%s: ulysses %d x ring %d (%s), %d rows/seq/rank", what, U, c->cp / U,
            U == c->cp ? "whole sequences" : split, c->seq_len / c->cp);
    }
    static const char* bubble_of[N_SCHEDULES] = {"(p-1)/(m+p-1)", "(p-1)/(m+p-1)", "(p-1)/(v*m+p-1)",
                                                 "(p-1)/(3m+p-1) at F=B=W", "0 at F=B=W",
                                                 "(p-1)/(6m+p-1) at F=B=W"};
    ROW("pipeline", "%s, vpp %d, bubble %s = %.3f", schedule_name(c->schedule), c->vpp, bubble_of[c->schedule],
        c->pp > 1 ? bubble_formula(c->schedule, c->pp, c->vpp, n_micro) : 0.0);
    ROW("zero / recompute", "%d / %s", c->zero, recompute_name(c->recompute));
    if (a->kernels_note) ROW("kernels", "%s", a->kernels_note);
    ROW("peak per rank", "%.3f TFLOP/s (%s)", m->peak_flops / 1e12, m->peak_source);
    const char* wait = getenv("OMP_WAIT_POLICY");
    int threads = omp_get_max_threads();  // base/launcher.h wait_policy_passive: why passive
    ROW("threads per rank", "%d (OpenMP)%s%s", threads, threads == 1 ? "" : ", waiting ",
        threads == 1 ? "" : getenv("GOMP_SPINCOUNT") ? "GOMP_SPINCOUNT" : wait && *wait ? wait
        : "libgomp's default (spins ~3 ms)");
    ROW("seed", "%llu", (unsigned long long)c->seed);
    ROW("samples", "%s, %d tokens%s", a->tokenizer ? "text (--tokenizer)" : c->vocab <= BYTE_VOCAB ? "bytes"
        : "token ids [n]: no --tokenizer (data/prepare.py writes PREFIX_tokenizer.bin)", a->sample_len,
        a->sample_note ? " (the CPU build's default above 50M parameters; --sample-len N)" : "");
    char dashes[VALUE_CHARS + 3];
    memset(dashes, '-', (size_t)width + 2);
    dashes[width + 2] = 0;
    printf("+-----------------------+%s+\n", dashes);
    for (int i = 0; i < n_rows; i++) printf("| %-21s | %-*s |\n", keys[i], width, values[i]);
    printf("+-----------------------+%s+\n", dashes);
    free(values);
    // The grid: which rank holds which coordinates, and the layers of each stage with its cost
    // (params.h stage_costs, what --pp-split auto balances): the planner's time of a micro-batch's
    // forward and backward on one of its ranks and the share of the slowest stage's, and the
    // stage's memory per rank (runtime/train.h stage_model_init); PaLM FLOPs where the planner
    // cannot model the layout.
    printf("grid (rank = ((dp_rank * pp + stage) * cp + cp_rank) * tp + tp_rank)%s%s:\n",
           c->stage_model && c->stage_model->measured ? "; stage times measured in " : "",
           c->stage_model && c->stage_model->measured ? c->stage_model->measured : "");
    int* counts = (int*)xmalloc(sizeof(int) * c->pp * c->vpp);
    double* cost = (double*)xmalloc(sizeof(double) * 2 * c->pp), slowest = 0, *mem = cost + c->pp;
    for (int g = 0; g < c->pp * c->vpp; g++) counts[g] = P->chunk_layer0[g + 1] - P->chunk_layer0[g];
    stage_costs(c, c->pp, c->vpp, counts, cost, mem);
    for (int s = 0; s < c->pp; s++) slowest = fmax(slowest, cost[s]);
    for (int s = 0; s < c->pp; s++) {
        printf("  stage %d: layers", s);
        for (int v = 0; v < c->vpp; v++) {
            int g = chunk_global(c->schedule, c->pp, s, v);
            printf(" [%d,%d)", P->chunk_layer0[g], P->chunk_layer0[g + 1]);
        }
        if (s == chunk_stage(c->schedule, c->pp, 0)) printf(" +embedding");
        if (s == chunk_stage(c->schedule, c->pp, c->pp * c->vpp - 1)) printf(" +head");
        if (c->pp > 1 && c->stage_model)
            printf("  %.3g ms a micro-batch (%.0f%% of the slowest), %s a rank (planned, reserve included)",
                   cost[s] * 1e3, 100 * cost[s] / slowest, fmt_bytes(mem[s], b1));
        else if (c->pp > 1)
            printf("  %.3g GFLOP a micro-batch (%.0f%% of the slowest)",
                   cost[s] * c->micro_batch * c->seq_len / ((double)c->tp * c->cp) / 1e9, 100 * cost[s] / slowest);
        printf("  ranks");
        // (dp, cp, tp) in rank order, 16 at most
        int per_stage = c->dp * c->cp * c->tp, shown = per_stage < 16 ? per_stage : 16;
        for (int i = 0; i < shown; i++)
            printf(" %d", layout_rank_of(L, i / (c->cp * c->tp), s, i / c->tp % c->cp, i % c->tp));
        if (shown < per_stage) printf(" ... (%d in all)", per_stage);
        printf("\n");
    }
    free(counts), free(cost);
    print_hosts(m);
    (void)b3;
    fflush(stdout);
#undef ROW
}

// The planner's inputs for this trainer's own run: the profile of `device` (its node holding all the run's ranks)
// and this trainer's setup (its --grad-reduce). Returns profile_builtin's: nonzero where the device has no profile.
static int trainer_plan_inputs(const ModelConfig* c, const char* device, int grad_reduce_bf16, DeviceProfile* d,
                               PlanSetup* k) {
    int unknown = profile_builtin(device, d);
    d->gpus_per_node = c->dp * c->tp * c->pp * c->cp;
    *k = plan_setup_default();
    k->grad_reduce_bf16 = grad_reduce_bf16;
    return unknown;
}

// At start: the planner's prediction for this run's layout (planner.h, the model behind
// ./train --plan) on `device`, and this rank's buffer sizes from the layout. At the end
// (metrics_finish) both are shown beside what was measured.
// Offloaded (--offload): with --offload optimizer what planner/memory.h offload_host_bytes counts
// (the CPU build, param_bytes 4: m and v; the GPU build: its pinned master, staging, m and v);
// act_tier_bytes of activation slots.
static void metrics_predict(Metrics* m, const ModelConfig* c, const char* device, double peak_flops_per_rank,
                            int shared_cores, const ParamLayout* P, size_t opt_floats, size_t act_peak_floats,
                            int param_bytes, double act_tier_bytes) {
    int zero = c->zero;
    m->pred_bytes[0] = (double)param_bytes * P->n_padded;
    m->pred_bytes[1] = 4.0 * P->n_padded + grad_reduce_scratch_bytes(m->args->grad_reduce_bf16, c->dp * c->cp);
    if (zero >= 2) {  // the shards, and the working buffers of the units (parallel/zero3.h)
        size_t S = P->n_padded / (c->dp * c->cp), work_w, work_g;
        zero3_work_floats(P, m->args->reshard_keep, &work_w, &work_g);
        int n_layers = 0;  // the rank's layers: one first norm weight each
        for (int i = 0; i < P->n; i++) n_layers += P->t[i].kind == P_LN1W && P->t[i].layer >= 0;
        m->pred_bytes[1] = 4.0 * (S + work_g + zero_held_grad_floats(c, n_layers));
        if (zero == 3) m->pred_bytes[0] = 4.0 * S + (double)param_bytes * work_w;
    }
    m->pred_bytes[2] = 8.0 * opt_floats;
    m->pred_bytes[3] = 4.0 * act_peak_floats;
    m->host_opt_bytes = 0;
    if (c->offload & OFFLOAD_OPTIMIZER) {
        m->pred_bytes[2] = 0;
        m->host_opt_bytes = offload_host_bytes(zero, param_bytes == 4 ? 4 : 2, P->n_padded, opt_floats);
    }
    m->host_act_bytes = act_tier_bytes;
    m->cfg_offload = c->offload;
    // this trainer (its own activation buffers, layout/activations.h); both builds' attention
    // keeps only the log-sum-exp (flash on the GPU, blockwise on the CPU)
    DeviceProfile d;
    PlanSetup k;
    trainer_plan_inputs(c, device, m->args->grad_reduce_bf16, &d, &k);
    d.peak_flops = peak_flops_per_rank;
    d.shared_cores = shared_cores;
    plan_predict(c, &k, c->global_batch, d.gpus_per_node, &d, &m->plan);
    if (m->rank != 0) return;
    char a[32], b[32], cc[32], e[32];
    printf("memory per rank (rank 0 buffers): params %s, grads %s, adam %s, activations %s\n",
           fmt_bytes(m->pred_bytes[0], a), fmt_bytes(m->pred_bytes[1], b), fmt_bytes(m->pred_bytes[2], cc),
           fmt_bytes(m->pred_bytes[3], e));
    char opt_holds[128] = "";  // what the optimizer's figure holds; R: the range's share (1 with zero 0)
    if ((c->offload & OFFLOAD_OPTIMIZER) && param_bytes == 4) strcpy(opt_holds, " (m+v 8 B/param of the range)");
    else if (c->offload & OFFLOAD_OPTIMIZER)
        snprintf(opt_holds, sizeof(opt_holds), " (host pinned: master 4 B/param (whole stage)%s, grads 4/R, m+v 8/R)",
                 zero == 3 ? "" : ", bf16 staging 2");
    if (c->offload)
        printf("offloaded per rank (rank 0, host / --offload-dir tier): optimizer %s%s, activations %s\n",
               fmt_bytes(m->host_opt_bytes, cc), opt_holds, fmt_bytes(m->host_act_bytes, e));
    if (m->plan.invalid) {
        printf("planner: cannot model this layout (%s)\n", m->plan.invalid);
        return;
    }
    printf(
        "planner (%s profile): step %.1f ms, MFU %.1f%%, pipeline bubble %.1f%% of its schedule; worst stage: weights "
        "%s, grads %s, optimizer %s, activations %s\n",
        device, m->plan.t_step * 1e3, 100 * m->plan.mfu, 100 * m->plan.bubble, fmt_bytes(m->plan.mem_weights, a),
        fmt_bytes(m->plan.mem_grads, b), fmt_bytes(m->plan.mem_optim, cc), fmt_bytes(m->plan.mem_act, e));
    fflush(stdout);
}

static void metrics_step_begin(Metrics* m, int step) {
    m->t_step0 = now_s();
    m->trace.compute_s = 0;
    m->trace.on = m->trace.events && step < TRACE_STEPS;
    if (m->trace.on && step == 0) m->trace.t0 = m->t_step0;
}
static void metrics_phase(Metrics* m, const char* name) {
    double t = now_s();
    if (m->phase) trace_event(&m->trace, m->phase, -2, -1, -1, m->phase_t0, t);
    m->phase = name, m->phase_t0 = t;
}

static void comm_seconds(const Layout* L, double* s) {
    for (int g = 0; g < N_GROUPS; g++) s[g] = L->group[g].seconds;
}

// A line of the JSON log as JSON: printf writes a value that is not finite as nan, -nan,
// inf or -inf, which JSON has no word for; each becomes null, in place (line: cap bytes).
static void json_nonfinite_to_null(char* line, size_t cap) {
    for (char* p = strchr(line, ':'); p; p = strchr(p + 1, ':')) {
        char *v = p + 1, *w = v + (*v == '-' || *v == '+');
        size_t len = strcspn(v, ",}"), rest = strlen(v + len);
        if ((strncmp(w, "nan", 3) && strncmp(w, "inf", 3)) || (size_t)(v - line) + 4 + rest + 1 > cap) continue;
        memmove(v + 4, v + len, rest + 1);
        memcpy(v, "null", 4);
    }
}

// sched_s: wall time of the pipeline schedule; pp_wait_s: the part of it this rank waited for its
// pipeline peers (runtime/train.h train_step). The bubble is that part: a rank waiting inside a
// forward or backward for its tp, cp or dp peers is not in the pipeline's bubble (those waits are
// the comm figures of their groups), and is not computing either.
static void metrics_step_end(Metrics* m, const Layout* L, const ModelConfig* c, int step, int start_step, int n_micro,
                             double loss, float lr, double gnorm, int skipped, double sched_s, double pp_wait_s) {
    double t = now_s(), dt = t - m->t_step0;
    metrics_phase(m, NULL);
    double T = c->seq_len, causal_pairs = (double)c->global_batch * T * (T + 1) / 2, model_flops, hw_flops;
    double att_frac = m->show_imbalance && m->att_work > 0 ? m->att_work / causal_pairs : 1.0;
    step_flops(c, m->step_tokens, att_frac, &model_flops, &hw_flops);
    m->tok_s = m->step_tokens / dt;
    m->tflops = model_flops / dt / 1e12;
    m->mfu = m->tflops * 1e12 / (m->peak_flops * L->world);
    m->hfu = hw_flops / dt / (m->peak_flops * L->world);
    m->last_bubble = bubble_fraction(sched_s, sched_s - pp_wait_s);
    m->bubble_formula = c->pp > 1 ? bubble_formula(c->schedule, c->pp, c->vpp, n_micro) : 0;
    double cs[N_GROUPS], dc[N_GROUPS];
    comm_seconds(L, cs);
    for (int i = 0; i < N_GROUPS; i++) dc[i] = cs[i] - m->comm_s_prev[i], m->comm_s_prev[i] = cs[i];
    m->step_ms = dt * 1e3;
    int done = step + 1 - start_step;
    if (done > 1) {
        m->ms_sum += dt * 1e3, m->ms_n++;
        m->tokens_sum += m->step_tokens, m->model_flops_sum += model_flops, m->hw_flops_sum += hw_flops;
    }
    m->ema_ms = done == 1 ? dt * 1e3 : (done <= 3 ? dt * 1e3 : 0.9 * m->ema_ms + 0.1 * dt * 1e3);
    double eta = m->ema_ms * (c->steps - step - 1) / 1e3;
    if (m->rank == 0 && !m->args->quiet &&
        ((step + 1) % m->args->log_every == 0 || step + 1 == c->steps || step == start_step)) {
        printf(
            "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | %.3f TFLOP/s | MFU %5.1f%% | "
            "HFU %5.1f%%",
            step + 1, c->steps, loss, lr, gnorm, dt * 1e3, m->tok_s, m->tflops, 100 * m->mfu, 100 * m->hfu);
        if (c->pp > 1) printf(" | bubble %.2f (formula %.2f)", m->last_bubble, m->bubble_formula);
        if (L->world > 1)
            printf(" | comm tp %.0f pp %.0f dp %.0f ms", dc[GROUP_TP] * 1e3, dc[GROUP_PP] * 1e3, dc[GROUP_DP] * 1e3);
        if (L->cp > 1) printf(" | cp a2a %.0f ring %.0f ms", dc[GROUP_CP_ULYSSES] * 1e3, dc[GROUP_CP_RING] * 1e3);
        if (m->args->noise_scale) printf(" | B_noise %.3g tok", m->noise_scale);
        if (m->show_imbalance)
            printf(" | attn spread mb %.0f%% dp %.0f%% cp %.0f%%", 100 * m->att_spread[0], 100 * m->att_spread[1],
                   100 * m->att_spread[2]);
        printf(" | ETA %dm%02ds%s\n", (int)eta / 60, (int)eta % 60, skipped ? " | SKIPPED (non-finite)" : "");
        fflush(stdout);
    }
    char line[1024];
    snprintf(
        line, sizeof(line),
        "{\"step\":%d,\"loss\":%.9g,\"lr\":%.6g,\"ms\":%.3f,\"tok_s\":%.1f,\"mfu\":%.6f,\"hfu\":%.6f,\"tflops\":%.6f,"
        "\"grad_norm\":%.9g,\"bubble\":%.4f,\"bubble_formula\":%.4f,\"comm_tp_ms\":%.3f,\"comm_pp_ms\":%.3f,"
        "\"comm_dp_ms\":%.3f,\"comm_embed_ms\":%.3f,\"comm_world_ms\":%.3f,\"comm_cp_a2a_ms\":%.3f,"
        "\"comm_cp_ring_ms\":%.3f,\"schedule_ms\":%.3f,\"pp_wait_ms\":%.3f,\"skipped\":%d}\n",
        step + 1, loss, lr, dt * 1e3, m->tok_s, m->mfu, m->hfu, m->tflops, gnorm, m->last_bubble, m->bubble_formula,
        dc[GROUP_TP] * 1e3, dc[GROUP_PP] * 1e3, dc[GROUP_DP] * 1e3, dc[GROUP_EMBED] * 1e3, dc[GROUP_WORLD] * 1e3,
        dc[GROUP_CP_ULYSSES] * 1e3, dc[GROUP_CP_RING] * 1e3, sched_s * 1e3, pp_wait_s * 1e3, skipped);
    if (m->show_imbalance)  // the spreads, and the time this rank waited in the schedule (not computing)
        snprintf(line + strlen(line) - 2, sizeof(line) - strlen(line) + 2,
                 ",\"attn_spread_mb\":%.4f,\"attn_spread_dp\":%.4f,\"attn_spread_cp\":%.4f,\"attn_work\":%.0f,"
                 "\"wait_ms\":%.3f}\n",
                 m->att_spread[0], m->att_spread[1], m->att_spread[2], m->att_work,
                 (sched_s - m->trace.compute_s) * 1e3);
    if (m->args->noise_scale)
        snprintf(line + strlen(line) - 2, sizeof(line) - strlen(line) + 2, ",\"noise_scale\":%.6g}\n", m->noise_scale);
    json_nonfinite_to_null(line, sizeof(line));
    if (m->log) output_write(m->log, line, "--log", m->args->log);
    if (m->rank_log) {
        char rank_line[1100];
        snprintf(rank_line, sizeof(rank_line), "{\"rank\":%d,%s", m->rank, line + 1);
        output_write(m->rank_log, rank_line, "--log-ranks", m->rank_log_path);
    }
}

static void metrics_eval(Metrics* m, int step, double val_loss) {
    if (m->rank != 0) return;
    printf("step %5d | val loss %.4f\n", step + 1, val_loss);
    fflush(stdout);
    char line[128];
    snprintf(line, sizeof(line), "{\"step\":%d,\"val_loss\":%.9g}\n", step + 1, val_loss);
    json_nonfinite_to_null(line, sizeof(line));
    if (m->log) output_write(m->log, line, "--log", m->args->log);
}

// Gather every rank's events to rank 0 and write one Chrome trace (one track per rank).
static void metrics_write_trace(Metrics* m, const Layout* L) {
    if (!m->trace.events) return;
    int n = m->trace.n_events;
    float* mine = (float*)xmalloc(sizeof(float) * 5 * (n ? n : 1));
    for (int i = 0; i < n; i++) {
        TraceEvent* e = &m->trace.events[i];
        mine[5 * i] = e->t0, mine[5 * i + 1] = e->t1, mine[5 * i + 2] = (float)e->kind, mine[5 * i + 3] = (float)e->mb;
        mine[5 * i + 4] = (float)e->chunk;
    }
    // names of collectives/phases travel as an index into a small table
    static const char* extra[] = {"tp",       "pp",        "dp",        "embed",   "world",
                                  "schedule", "grad_sync", "optimizer", "ulysses", "ring"};
    for (int i = 0; i < n; i++)
        if (m->trace.events[i].kind < 0 && m->trace.events[i].kind > TRACE_RING)
            for (int k = 0; k < 10; k++)
                if (!strcmp(m->trace.events[i].name, extra[k])) mine[5 * i + 3] = (float)k;
    int* counts = (int*)xcalloc(L->world, sizeof(int));
    int* displs = (int*)xcalloc(L->world, sizeof(int));
    int n5 = 5 * n;
    MPI_Gather(&n5, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < L->world; r++) displs[r] = total, total += counts[r];
    float* all = (float*)xmalloc(sizeof(float) * (total ? total : 1));
    MPI_Gatherv(mine, n5, MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (m->rank == 0) {
        AtomicFile out;  // fprintf's errors are caught by atomic_commit (ferror, fflush, fsync, fclose)
        atomic_open(&out, m->args->trace, "--trace");
        FILE* f = out.f;
        // what ran, for --pp-costs (runtime/pp_costs.h): the layers of each global chunk, the shape
        const ModelConfig* c = &m->args->cfg;
        int n_chunks = c->pp * c->vpp, *layers = (int*)xmalloc(sizeof(int) * n_chunks);
        char shape[PP_COSTS_SHAPE_CAP];
        chunk_cut(c, c->pp, c->vpp, layers);
        fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"chunk_layers\":\"");
        for (int g = 0; g < n_chunks; g++) fprintf(f, "%s%d", g ? " " : "", layers[g]);
        fprintf(f, "\",\"shape\":\"%s\"},\"traceEvents\":[\n", pp_costs_shape(c, shape));
        free(layers);
        int first = 1;
        for (int r = 0; r < L->world; r++) {
            fprintf(
                f,
                "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d (dp %d, "
                "stage %d, cp %d, tp %d)\"}}",
                first ? "" : ",\n", r, r, r / (L->tp * L->cp * L->pp), (r / (L->tp * L->cp)) % L->pp,
                (r / L->tp) % L->cp, r % L->tp);
            first = 0;
            for (int i = displs[r]; i < displs[r] + counts[r]; i += 5) {
                int kind = (int)all[i + 2], mb = (int)all[i + 3], chunk = (int)all[i + 4];
                char name[64];
                const char* cat;
                if (kind >= 0) {
                    static const char* names[] = {"recv_fwd", "F", "send_fwd", "recv_bwd", "B", "send_bwd", "W"};
                    snprintf(name, sizeof(name), "%s mb%d c%d", names[kind], mb, chunk);
                    cat = (kind == OP_FWD || kind == OP_BWD || kind == OP_W) ? "compute" : "p2p";
                } else if (kind <= TRACE_RING) {
                    static const char* ring[] = {"attention ring step %d", "ring transfer during step %d",
                                                 "dK,dV home after step %d"};
                    snprintf(name, sizeof(name), ring[TRACE_RING - kind], mb);
                    cat = kind == TRACE_RING ? "cp attention" : "cp ring";
                } else {
                    snprintf(name, sizeof(name), "%s", extra[mb >= 0 && mb < 10 ? mb : 0]);
                    cat = kind == -1 ? "collective" : "phase";
                }
                const char* color = kind == OP_FWD   ? ",\"cname\":\"good\""
                                    : kind == OP_BWD ? ",\"cname\":\"bad\""
                                    : kind == OP_W   ? ",\"cname\":\"olive\""
                                                     : "";
                fprintf(
                    f,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f%s}",
                    name, cat, r, all[i] * 1e6, (all[i + 1] - all[i]) * 1e6, color);
            }
        }
        if (m->doc_events.n) fwrite(m->doc_events.bytes, 1, m->doc_events.n, f);
        fprintf(f, "\n]}\n");
        atomic_commit(&out);
        char shown[4 * PATH_CAP];
        printf("trace: %s (%d events; open in https://ui.perfetto.dev or chrome://tracing)\n",
               printable(out.path, shown, sizeof(shown)), total / 5);
    }
    free(mine); free(counts); free(displs); free(all);
}

// Measured at the end, beside the predictions: activation peak (live slots + scratch, max
// over ranks), the mean step time, and the planner's figures for the same layout.
// The activation buffers (allocated at start-up, held for the whole run) are what the
// planner predicts; the live peak says how much of them the schedule used at once.
static void metrics_finish(Metrics* m, const Layout* L, double act_peak_bytes_measured) {
    double mx = act_peak_bytes_measured, buf_mx = m->pred_bytes[3];
    MPI_Allreduce(MPI_IN_PLACE, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &buf_mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    struct rusage ru;  // the whole process's peak resident memory, as the OS saw it
    getrusage(RUSAGE_SELF, &ru);
    double rss = 1024.0 * ru.ru_maxrss;
    MPI_Allreduce(MPI_IN_PLACE, &rss, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (m->rank == 0) {
        char a[32], b[32], c[32], d[32], e[32], f[32];
        // no step ran (a run resumed at --steps): no time to report, NaN in the log (null)
        double ms = m->ms_n ? m->ms_sum / m->ms_n : m->step_ms > 0 ? m->step_ms : NAN;
        double bufs = m->pred_bytes[0] + m->pred_bytes[1] + m->pred_bytes[2] + m->pred_bytes[3];
        double off = m->plan.mem_act_max > 0 ? 100 * (buf_mx / m->plan.mem_act_max - 1) : 0;
        char step_ms[48] = "not measured, no step ran";
        if (isfinite(ms)) snprintf(step_ms, sizeof(step_ms), "%.1f ms mean", ms);
        if (m->ms_n) {  // the run's means over the steps after the first (it warms up), as the step line counts
            double s = m->ms_sum / 1e3, peak = m->peak_flops * L->world;
            printf("measured: %d steps after the first: %.1f ms a step, %.0f tok/s, %.3f TFLOP/s, MFU %.1f%%, HFU "
                   "%.1f%% of %.3f TFLOP/s (%d rank%s x %.3f: %s)\n",
                   m->ms_n, ms, m->tokens_sum / s, m->model_flops_sum / s / 1e12, 100 * m->model_flops_sum / s / peak,
                   100 * m->hw_flops_sum / s / peak, peak / 1e12, L->world, L->world > 1 ? "s" : "",
                   m->peak_flops / 1e12, m->peak_source);
        }
        printf(
            "measured: activation buffers %s, max over ranks (planner %s, %+.1f%%; live peak %s, rank 0 %s); step "
            "%s (planner %.1f ms)\n",
            fmt_bytes(buf_mx, b), fmt_bytes(m->plan.mem_act_max, d), off, fmt_bytes(mx, c),
            fmt_bytes(act_peak_bytes_measured, a), step_ms, m->plan.t_step * 1e3);
        printf("measured: peak resident memory %s per rank (max over ranks; rank 0's model buffers %s)\n",
               fmt_bytes(rss, e), fmt_bytes(bufs, f));
        if (m->cfg_offload)
            printf("offloaded (rank 0): optimizer %s, activations %s in host memory / the offload tier\n",
                   fmt_bytes(m->host_opt_bytes, b), fmt_bytes(m->host_act_bytes, c));
        char line[1280];
        snprintf(
            line, sizeof(line),
            "{\"final\":1,\"act_peak_bytes\":%.0f,\"act_peak_bytes_max\":%.0f,\"act_buffer_bytes\":%.0f,"
            "\"act_buffer_bytes_max\":%.0f,\"param_bytes\":%.0f,\"grad_bytes\":%.0f,\"opt_bytes\":%.0f,"
            "\"step_ms_mean\":%.3f,\"plan_step_ms\":%.3f,\"plan_act_bytes\":%.0f,\"plan_weight_bytes\":%.0f,"
            "\"rss_peak_bytes_max\":%.0f,\"opt_host_bytes\":%.0f,\"act_host_bytes\":%.0f,"
            "\"plan_grad_bytes\":%.0f,\"plan_opt_bytes\":%.0f,\"plan_temp_bytes\":%.0f}\n",
            act_peak_bytes_measured, mx, m->pred_bytes[3], buf_mx, m->pred_bytes[0], m->pred_bytes[1], m->pred_bytes[2],
            ms, m->plan.t_step * 1e3, m->plan.mem_act_max, m->plan.mem_weights, rss, m->host_opt_bytes,
            m->host_act_bytes, m->plan.mem_grads, m->plan.mem_optim, m->plan.mem_temp);
        json_nonfinite_to_null(line, sizeof(line));
        if (m->log) output_write(m->log, line, "--log", m->args->log);
    }
    metrics_write_trace(m, L);
    if (m->log) output_close(m->log, "--log", m->args->log);
    if (m->rank_log) output_close(m->rank_log, "--log-ranks", m->rank_log_path);
}

#endif
