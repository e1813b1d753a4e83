// runtime/train.h: the training run, written once for both builds: the model's state on
// this rank, the step (the schedule, the gradient reduction, the norm, the update),
// evaluation, sampling and the training loop. train_gpt.c (CPU, fp32) and train_gpt.cu
// (GPU, bf16) include it; what a build supplies for it (sumsq_range, row_logits,
// save_checkpoint, params_init, ...) is declared in backend/backend.h.
#ifndef TRAIN_H
#define TRAIN_H

#include <float.h>
#include "layer_parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "runtime/ckpt.h"
#include "runtime/export_hf.h"
#include "runtime/llmc.h"
#include "runtime/metrics.h"
#include "runtime/run.h"  // Run

// The sampler's window (seq_len tokens, unfilled ones 0) as micro-batch 0's one sequence.
static void docs_of_window(Model* m, const int* window) {
    m->mb = 0, m->cp_by_doc = 0;
    if (!m->doc_start) return;
    doc_starts(window, m->c.seq_len, m->args->eot, m->doc_seq);
    for (int j = 0; j < m->T; j++) m->doc_start[j] = m->doc_seq[m->pos[j]];
    docs_positions(m, 1);
}

// ----------------------------------------------------------------------------
// The shapes of this rank's part of the model, from the config and the layout (model_init
// calls it after layout_init).

static void model_shapes(Model* m) {
    const ModelConfig* c = &m->c;
    // T: the rows of a sequence this rank holds (all of it, or its 1/cp under context parallelism)
    m->B = c->micro_batch, m->T = c->seq_len / c->cp, m->C = c->d_model, m->hd = c->d_model / c->n_head;
    m->n_head_local = c->n_head / c->tp, m->n_kv_head_local = c->n_kv_head / c->tp;
    m->qkv_dim = (m->n_head_local + 2 * m->n_kv_head_local) * m->hd;
    m->Fl = c->d_ff / c->tp;
    m->fc_dim = c->arch == ARCH_GPT2 ? m->Fl : 2 * m->Fl;
    m->vocab_local = c->vocab_padded / c->tp, m->vocab_start = m->L.tp_rank * m->vocab_local;
    m->n_micro = c->global_batch / (c->dp * c->micro_batch);
}

// A pipeline's stages by the planner's model of this layout on this build's device (planner/predict.h
// plan_stage_model: each stage's time and memory), the times measured in an earlier run's trace under
// --pp-costs (runtime/pp_costs.h): what --pp-split auto cuts the layers by, and what the start-up
// table shows. Every rank builds the same model from the same flags and file; where the planner
// cannot model the layout the cut falls back to PaLM FLOPs (layout/params.h cut_costs).
static void stage_model_init(Args* a, const char* profile) {
    static StageModel model;
    DeviceProfile d;
    if (a->cfg.pp == 1 || profile_builtin(profile, &d)) return;
    d.gpus_per_node = a->cfg.dp * a->cfg.tp * a->cfg.pp * a->cfg.cp;
    PlanSetup k = plan_setup_default();
    if (plan_stage_model(&a->cfg, &k, a->cfg.global_batch, &d, &model)) {
        if (a->pp_costs) fail("--pp-costs: the planner cannot model this layout to cut it (its stages' memory)");
        return;
    }
    if (a->pp_costs) {  // its errors (data_fail) agreed on: one line for the run
        int rank, world;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_Comm_size(MPI_COMM_WORLD, &world);
        jmp_buf costs_error;
        data_error_msg[0] = 0;
        if (!setjmp(costs_error)) data_error_at = &costs_error, pp_costs_read(a->pp_costs, &a->cfg, &model);
        data_error_at = NULL;
        data_errors_agree(rank, world);
    }
    a->cfg.stage_model = &model;
}

// The first part of model_init: the flags, the grid and this rank's shapes and parameter layout.
static void model_init_layout(Model* m, Args* a, Metrics* met) {
    memset(m, 0, sizeof(*m));
    m->args = a;
    stage_model_init(a, met->profile);
    m->c = a->cfg;
    m->met = met, m->trace = met ? &met->trace : NULL;
    ModelConfig* c = &m->c;
    layout_init(&m->L, c->dp, c->tp, c->pp, c->vpp, c->cp, c->cp_ulysses, c->schedule);
    model_shapes(m);
    m->pos = (int*)xmalloc(sizeof(int) * m->T);  // the sequence position of each row this rank holds
    cp_positions(m->pos, c->seq_len, c->cp, c->cp_ulysses, m->L.cp_rank, c->cp_contiguous);
    param_layout_build(&m->P, c, c->tp, m->L.tp_rank, c->pp, c->vpp, m->L.stage, m->L.replicas);
    m->defer_weight = c->weight_pass_deferred;
}

// ----------------------------------------------------------------------------
// The host's memory: what it can still give the run, and the run's need checked against it before allocating.

// This host's MemAvailable (/proc/meminfo: what can be allocated without swapping, the page cache it may drop
// counted), in bytes; -1 when it cannot be read (then *why says why).
static double meminfo_available(const char** why) {
    FILE* f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = -1;
    while (f && fgets(line, sizeof(line), f) && sscanf(line, "MemAvailable: %lf kB", &kib) != 1) {}
    if (f) fclose(f);
    *why = !f ? "/proc/meminfo cannot be read" : kib < 0 ? "/proc/meminfo has no MemAvailable (Linux < 3.14)" : NULL;
    return kib < 0 ? -1 : kib * 1024;
}

// The text of a small file (/proc, a cgroup's) into buf, cut at cap - 1 bytes; NULL when it cannot be read.
static const char* small_file_text(const char* path, char* buf, size_t cap) {
    FILE* f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

// The directory of this process's memory cgroup under root (/sys/fs/cgroup), from /proc/self/cgroup's text, a line
// "ID:CONTROLLERS:PATH" a hierarchy: cgroup v1's line whose controllers list "memory" (that hierarchy is mounted at
// root/memory; on a hybrid host the memory controller is there), else v2's "0::PATH" (the unified one, at root).
// Returns the version, 0 when neither line is there.
static int cgroup_memory_dir(const char* proc_cgroup, const char* root, char* dir, size_t cap) {
    int version = 0;
    const char* next;
    for (const char* line = proc_cgroup; *line && version != 1; line = next) {
        size_t len = strcspn(line, "\n");
        next = line + len + (line[len] == '\n');
        const char* ids_end = (const char*)memchr(line, ':', len);
        const char* list_end = ids_end ? (const char*)memchr(ids_end + 1, ':', len - (ids_end + 1 - line)) : NULL;
        if (!list_end) continue;
        int memory = 0, unified = ids_end == line + 1 && line[0] == '0' && list_end == ids_end + 1;
        for (const char* c = ids_end + 1; c < list_end; c += strcspn(c, ",:") + 1)
            memory |= !strncmp(c, "memory", 6) && (c[6] == ',' || c[6] == ':');
        if (!memory && !(unified && !version)) continue;
        version = memory ? 1 : 2;
        const char* path = list_end + 1;
        snprintf(dir, cap, "%s%s%.*s", root, memory ? "/memory" : "", (int)(line + len - path), path);
        size_t n = strlen(dir);
        if (n > 1 && dir[n - 1] == '/') dir[n - 1] = 0;  // (the hierarchy's root: PATH "/")
    }
    return version;
}

// One cgroup's headroom in bytes from its files' texts: its limit (v2 memory.max, "max" for none; v1
// memory.limit_in_bytes, where none is a number near 2^63) less what it uses (v2 memory.current, v1
// memory.usage_in_bytes) but its inactive file pages (memory.stat's inactive_file, v1 total_inactive_file: page
// cache the kernel reclaims before it calls the OOM killer, such as the data files just read), cAdvisor's working set
// (google/cadvisor container/libcontainer/handler.go setMemoryStats at 0087906). -1 when there is no limit or a
// text is not a number.
static double cgroup_headroom(int version, const char* limit, const char* usage, const char* stat) {
    double most, used, inactive = 0;
    if (!limit || !usage || !strncmp(limit, "max", 3) || sscanf(limit, "%lf", &most) != 1 ||
        sscanf(usage, "%lf", &used) != 1)
        return -1;
    const char* key = version == 1 ? "total_inactive_file " : "inactive_file ";
    for (const char* at = stat ? strstr(stat, key) : NULL; at; at = strstr(at + 1, key))
        if (at == stat || at[-1] == '\n') inactive = atof(at + strlen(key));  // (a line of its own)
    double working = used > inactive ? used - inactive : 0;
    return most > working ? most - working : 0;
}

// The least headroom of this process's memory cgroup and of each one above it up to root (a parent's limit binds
// its children too; a directory that is not there is passed over: a container that sees only its own cgroup at the
// hierarchy's root, but the host's PATH), from /proc/self/cgroup's text; -1 when none has a limit. *limit_file:
// the limit's file of the cgroup that gave it.
static double cgroup_available(const char* proc_cgroup, const char* root, char* limit_file, size_t cap) {
    static const char* files[2][3] = {{"memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat"},
                                      {"memory.max", "memory.current", "memory.stat"}};
    char dir[PATH_CAP], path[PATH_CAP + 32], limit[64], usage[64], stat[16384];
    char* bufs[3] = {limit, usage, stat};
    size_t sizes[3] = {sizeof(limit), sizeof(usage), sizeof(stat)};
    int version = cgroup_memory_dir(proc_cgroup, root, dir, sizeof(dir)), more = version;
    size_t top = strlen(root) + (version == 1 ? strlen("/memory") : 0);
    double least = -1;
    while (more) {
        const char* texts[3];
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/%s", dir, files[version - 1][i]);
            texts[i] = small_file_text(path, bufs[i], sizes[i]);
        }
        double headroom = cgroup_headroom(version, texts[0], texts[1], texts[2]);
        if (headroom >= 0 && (least < 0 || headroom < least))
            least = headroom, snprintf(limit_file, cap, "%s/%s", dir, files[version - 1][0]);
        char* slash = strrchr(dir, '/');
        more = strlen(dir) > top && slash;
        if (more) *slash = 0;  // the cgroup above
    }
    return least;
}

// What this host can still give the run, in bytes: MemAvailable, or its memory cgroup's headroom where that is less
// (a container's or a Slurm job's limit: past it the OOM killer ends the run as surely); *source says which. -1 when
// MemAvailable cannot be read (*why says why).
static double host_mem_available(char* source, size_t cap, const char** why) {
    char proc_cgroup[8192], limit_file[PATH_CAP + 32];
    double available = meminfo_available(why);
    const char* text = small_file_text("/proc/self/cgroup", proc_cgroup, sizeof(proc_cgroup));
    double cgroup = text ? cgroup_available(text, "/sys/fs/cgroup", limit_file, sizeof(limit_file)) : -1;
    snprintf(source, cap, "MemAvailable");
    if (available >= 0 && cgroup >= 0 && cgroup < available)
        available = cgroup, snprintf(source, cap, "the memory cgroup's %s less its use", limit_file);
    return available;
}

// The host's memory against what the ranks on it will allocate, before they allocate it: a run past it was
// killed by the kernel's OOM killer mid-allocation, without a word. Each rank's bytes are the planner's of its
// stage (planner/predict.h plan_stage_bytes: this trainer's buffers as allocated, every build's own sizing
// functions), of which the build's host holds host_bytes_of_rank (the CPU: all; the GPU: its pinned --offload
// buffers; its device memory is dev_alloc's to refuse), with the host copy of the weights where it is a buffer of
// its own; summed over the ranks of this host (MPI's shared-memory split), against host_mem_available (MemAvailable,
// or the memory cgroup's headroom where less). The data streams were read before (run.h read_inputs): both have
// them counted. Over it: one error line for the run (the first host over), every rank exits 1; where it cannot be
// known, rank 0 says why.
static void host_memory_check(const Model* m) {
    DeviceProfile d;
    PlanSetup k;
    PlanResult r;
    double device_bytes = 0, host_bytes = 0, mine, sum, most[2];
    const char* unknown = NULL;
    if (trainer_plan_inputs(&m->c, m->met->profile, m->args->grad_reduce_bf16, &d, &k))
        unknown = "this device has no planner profile to size the buffers by";
    if (!unknown && plan_stage_bytes(&m->c, &k, &d, m->L.stage, &device_bytes, &host_bytes, &r))
        unknown = r.invalid;
    mine = host_bytes_of_rank(m, device_bytes, host_bytes);
    double mine_both[2] = {mine, -mine};
    MPI_Comm host;
    int ranks, local;
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m->L.rank, MPI_INFO_NULL, &host));
    MPI_Comm_size(host, &ranks), MPI_Comm_rank(host, &local);
    // comm: this host's ranks: the sum of their bytes, the largest and (negated) the smallest
    mpiCheck(MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, host));
    mpiCheck(MPI_Allreduce(mine_both, most, 2, MPI_DOUBLE, MPI_MAX, host));
    MPI_Comm_free(&host);
    char source[PATH_CAP + 96];
    double available = local == 0 && !unknown ? host_mem_available(source, sizeof(source), &unknown) : 0;
    if (unknown && m->L.rank == 0) fprintf(stderr, "warning: host memory not checked: %s\n", unknown);
    if (local == 0 && !unknown && sum > available) {
        char each[64];
        snprintf(each, sizeof(each), most[0] == -most[1] ? "%d rank%s x %.1f GiB" : "%d rank%s, the largest %.1f GiB",
                 ranks, ranks > 1 ? "s" : "", most[0] / GiB);
        snprintf(data_error_msg, sizeof(data_error_msg), "this run needs %.1f GiB of host memory on this machine (%s), "
                 "%.1f GiB available (%s)", sum / GiB, each, available / GiB, source);
    }
    data_errors_agree(m->L.rank, m->L.world);
}

// The fp32 state where the build keeps it (f32_alloc): parameters and gradients, one buffer
// each with named views into them, initialized (params_init: the build puts init_params'
// weights where its kernels read them); the optimizer state over the whole local buffer, or
// this rank's 1/dp shard with ZeRO. ZeRO 2 keeps no whole gradient: its shard, one layer's
// and the model-level tensors' (parallel/zero3.h sharded_grads_init).
static void model_init_params(Model* m) {
    const ModelConfig* c = &m->c;
    if (c->zero == 3) { zero3_init(m); return; }  // the weights sharded too (parallel/zero3.h)
    m->params = f32_alloc(m, m->P.n_padded);
    m->wl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    m->gl = (LayerW*)xcalloc(c->n_layer, sizeof(LayerW));
    bind_weights(&m->P, c, m->params, &m->w, m->wl);
    params_init(m);
    optimizer_range(&m->P, c, m->L.replica, &m->opt_lo, &m->opt_hi);
    m->m_state = opt_state_alloc(m, m->opt_hi - m->opt_lo, "AdamW m");  // on the device, or offloaded
    m->v_state = opt_state_alloc(m, m->opt_hi - m->opt_lo, "AdamW v");
    if (c->zero == 2) {
        sharded_grads_init(m);
    } else {
        m->grads = f32_alloc(m, m->P.n_padded);
        bind_weights(&m->P, c, m->grads, &m->g, m->gl);
    }
    if (c->zero == 1) sharded_units_init(m);  // its all-gathers go a unit at a time
    if (c->sp) m->sp_buf = f32_alloc(m, m->P.n_local);
}

// Learning rate at 0-based step: linear warm-up to lr, then cosine decay to lr * min_lr_frac.
static float lr_at(const ModelConfig* c, int step) {
    if (step < c->warmup) return c->lr * (step + 1) / c->warmup;
    if (c->steps <= c->warmup) return c->lr;
    float progress = (float)(step - c->warmup) / (float)(c->steps - c->warmup);
    float min_lr = c->lr * c->min_lr_frac;
    return min_lr + 0.5f * (c->lr - min_lr) * (1.0f + cosf(3.14159265f * progress));
}

// Global L2 norm of the gradient over the whole model: each element counted once (tp
// replicas and the tied copy only by their owner, dp x cp replicas once without ZeRO).
static double grad_norm(Model* m, const float* grad) {
    double ss = 0;
    int count_dp = m->c.zero > 0 || m->L.replica == 0, k = 0;
    for (int i = 0; i < m->P.n && count_dp; i++) {
        const Tensor* t = &m->P.t[i];
        size_t a, b;
        if (!t->owner || !clip_range(t, m->opt_lo, m->opt_hi, &a, &b)) continue;
        sumsq_range(m, k++, grad + (a - m->opt_lo), b - a, &ss);
    }
    sumsq_finish(m, k, &ss);
    comm_allreduce_sum_f64(&m->L.group[GROUP_WORLD], &ss, 1);  // comm: world all-reduce of the squared norm
    return sqrt(ss);
}

// ----------------------------------------------------------------------------
// A training step and an evaluation.

// Mean loss over the global batch (the last chunk's stage, tp rank 0 of each dp replica hold it).
static double reduce_loss(Model* m, double n_tokens) {
    loss_fetch(m);
    double l = (m->P.has_head && m->L.tp_rank == 0) ? m->loss_sum : 0.0;
    comm_allreduce_sum_f64(&m->L.group[GROUP_WORLD], &l, 1);  // comm: world all-reduce of the loss
    return l / n_tokens;
}

// The targets the loss of global batch `index` counts: all its positions, or with --packing
// greedy|wlb its documents' tokens (padding is not counted); every rank knows it from the plan,
// so the loss is the mean over the same tokens in every layout.
static double batch_targets_counted(const ModelConfig* c, const TokenStream* ts, size_t index) {
    return ts->plan ? plan_valid_targets(ts->plan, index) : (double)c->global_batch * c->seq_len;
}

// --trace (rank 0): an instant event per micro-batch of the step naming its documents (their
// lengths; padding left out) and its attention work. in, tg, ds: the global batch.
static void trace_documents(Model* m, int step, const int* tg, const int* ds, const double* work) {
    const ModelConfig* c = &m->c;
    int T = c->seq_len, B = c->micro_batch;
    double ts = (now_s() - m->met->trace.t0) * 1e6;
    for (int u = 0; u < c->global_batch / B; u++) {
        char ev[1024], lens[700] = "";
        int n_docs = 0, at = 0;
        for (int i = u * B * T; i < (u + 1) * B * T; i++) {
            int t = i % T, len = 1;
            if (ds[i] != t || tg[i] < 0) continue;  // not a document's first token, or padding
            while (t + len < T && ds[i + len] == t) len++;
            if (at < (int)sizeof(lens) - 12)  // the first lengths, as many as fit
                at += snprintf(lens + at, sizeof(lens) - at, "%s%d", n_docs ? " " : "", len);
            n_docs++;
        }
        int n = snprintf(ev, sizeof(ev),
                         ",\n{\"name\":\"step %d mb %d (dp %d): %d documents, %.0f pairs\",\"cat\":\"documents\","
                         "\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":%.1f,\"args\":{\"lengths\":\"%s\"}}",
                         step + 1, u % m->n_micro, u / m->n_micro, n_docs, work[u], ts, lens);
        bytes_append(&m->met->doc_events, ev, (size_t)n < sizeof(ev) ? (size_t)n : sizeof(ev) - 1);
    }
}

// The spread of attention work (layout/packing.h attention_work) in global batch `index`
// across its micro-batches (units of B sequences), dp ranks and cp ranks, into the metrics; the
// same on every rank (from the plan, or the stream's windows). Without document masking every
// sequence is one causal block. cp's is over the R = cp / U ring ranks: each one's Ulysses ranks
// share its rows' work evenly (a head each), so pure Ulysses (a ring of one) has none.
static void batch_imbalance(Model* m, const TokenStream* ts, size_t index) {
    const ModelConfig* c = &m->c;
    int G = c->global_batch, T = c->seq_len, B = c->micro_batch, U = G / B, R = c->cp / c->cp_ulysses;
    int* in = (int*)xmalloc(sizeof(int) * 3 * (size_t)G * T);
    int *tg = in + (size_t)G * T, *ds = tg + (size_t)G * T, *pos = (int*)xmalloc(sizeof(int) * T);
    for (int j = 0; j < T; j++) pos[j] = j;
    if (ts->plan) plan_fill(ts->plan, ts->tokens, index, 0, G, pos, T, in, tg, NULL, ds);
    else stream_batch(ts, T, index * G, G, in, tg, ds);
    if (!m->args->doc_masked) memset(ds, 0, sizeof(int) * (size_t)G * T);
    double* work = (double*)xcalloc(U + R, sizeof(double));
    for (int u = 0; u < U; u++) work[u] = attention_work(ds + (size_t)u * B * T, B, T, pos, T);
    double* dp_work = (double*)xcalloc(c->dp, sizeof(double));
    for (int u = 0; u < U; u++) dp_work[u / m->n_micro] += work[u];
    for (int g = 0; g < G; g++)  // the positions each ring rank holds of every sequence (in: the tokens are not needed)
        cp_ring_pairs(c, R, ds + (size_t)g * T, in, work + U);
    m->met->att_spread[0] = spread_of(work, U);
    m->met->att_spread[1] = spread_of(dp_work, c->dp);
    m->met->att_spread[2] = spread_of(work + U, R);
    m->met->att_work = 0;
    for (int u = 0; u < U; u++) m->met->att_work += work[u];
    if (m->met->trace.on && m->L.rank == 0) trace_documents(m, (int)index, tg, ds, work);
    free(in), free(pos), free(work), free(dp_work);
}

// This dp rank's part of global batch `index` (data/data.h; --cp-split doc: context_parallel.h's
// order of the documents), where the kernels read it.
static void model_load_batch(Model* m, const TokenStream* ts, size_t index) {
    if (m->cp_order) {
        cp_load_by_doc(m, ts, index);
    } else {
        load_batch(ts, &m->c, m->L.dp_rank, m->n_micro, index, m->pos, m->T, m->inputs, m->targets, m->doc_start,
                   m->doc_seq);
        if (m->doc_start) docs_positions(m, m->n_micro * m->B);
    }
    batch_ready(m);
}

// sched_s: the schedule's wall time; pp_wait_s: the part of it this rank waited for its pipeline
// peers (blocking p2p receives and send waits: GROUP_PP's time, the bubble's numerator).
typedef struct { double loss, grad_norm, sched_s, pp_wait_s; float lr; int skipped; } StepResult;

static StepResult train_step(Model* m, const TokenStream* train, int step) {
    StepResult r = {0, 0, 0, 0, 0, 0};
    double n_tokens = batch_targets_counted(&m->c, train, (size_t)step);
    m->met->step_tokens = n_tokens;
    model_load_batch(m, train, (size_t)step);
    if ((m->met->show_imbalance = m->args->doc_masked || train->plan != NULL)) batch_imbalance(m, train, (size_t)step);
    if (m->grads) f32_zero(m, m->grads, m->P.n_padded);  // (zero 2 and 3 clear theirs as they reduce them)
    if (m->grad_shard) f32_zero(m, m->grad_shard, shard_floats(&m->P, m->L.replicas));
    metrics_phase(m->met, "schedule");
    double t0 = now_s(), pp0 = m->L.group[GROUP_PP].seconds;
    run_schedule(m, m->ops, m->n_ops, 1, (float)(1.0 / n_tokens));  // (its p2p times collected at its end)
    r.sched_s = now_s() - t0, r.pp_wait_s = m->L.group[GROUP_PP].seconds - pp0;
    metrics_phase(m->met, "grad_sync");
    float* grad = reduce_gradients(m);
    r.grad_norm = grad_norm(m, grad);  // (first: the GPU build fetches the norm and the loss in one wait)
    r.loss = reduce_loss(m, n_tokens);
    r.lr = lr_at(&m->c, step);
    if (m->args->noise_scale) {  // B_small: one replica's tokens; its gradient is R x its share of the step's
        double R = m->L.replicas;
        m->met->noise_scale = noise_scale_update(&m->met->noise, R * m->replica_sumsq, r.grad_norm * r.grad_norm,
                                                 n_tokens / R, n_tokens);
    }
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {  // (the world's sums: every rank decides alike)
        if (!m->args->on_nan_skip) {  // one line for the run, rank 0's, out before any rank ends it
            if (m->L.rank == 0)
                print_error("step %d: loss %g, gradient norm %g is not finite (--on-nan stop)", step + 1, r.loss,
                            r.grad_norm);
            if (m->L.world > 1) mpiCheck(MPI_Barrier(m->L.group[GROUP_WORLD].mpi));  // comm: world, once: line out
            fail_quietly();
        }
        r.skipped = 1;
        return r;
    }
    float scale = (m->c.grad_clip > 0 && r.grad_norm > m->c.grad_clip) ? (float)(m->c.grad_clip / r.grad_norm) : 1.0f;
    metrics_phase(m->met, "optimizer");
    optimizer_step(m, grad, r.lr, scale, step + 1);
    device_sync(m);  // the step's time includes the update
    return r;
}

// The mean validation loss over n_batches into *loss; 0 when a stop signal came first (every
// rank looks before each batch, collectively, so all stop at the same one). With --packing
// greedy|wlb: over one pass at most, the mean over the documents' tokens (so the same
// documents give the same loss whichever packing holds them).
static int evaluate(Model* m, const TokenStream* val, int n_batches, double* loss) {
    PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * 3 * m->n_micro * m->L.vpp);
    int n_ops = forward_ops(m->L.sched, m->L.stage, m->L.pp, m->L.vpp, m->n_micro, ops);
    if (val->plan && (size_t)n_batches > val->plan->n_batches) n_batches = (int)val->plan->n_batches;
    double total = 0, counted = 0;
    int b = 0;
    for (; b < n_batches && !ckpt_stop_requested(&m->L.group[GROUP_WORLD]); b++) {
        model_load_batch(m, val, (size_t)b);
        run_schedule(m, ops, n_ops, 0, 0.0f);
        double n = batch_targets_counted(&m->c, val, (size_t)b);
        total += val->plan ? reduce_loss(m, 1.0) : reduce_loss(m, n);
        counted += n;
    }
    free(ops);
    *loss = val->plan ? total / counted : total / n_batches;
    return b == n_batches;
}

// ----------------------------------------------------------------------------
// Sampling: one sequence (batch 1) through the schedule's executor per generated token (the
// forward of one micro-batch, as evaluation runs it; m->sample). The last chunk's stage gathers
// the one row of logits it needs over tp (model.h head_sample) and draws the token on the host
// (with cp, the cp rank that holds the row's position); every rank then learns it by broadcast.

// Softmax over row[0, vocab) in place, then the inverse-CDF draw at uniform u (one
// arithmetic for both builds, so they draw alike from close logits).
static int sample_draw(float* row, int vocab, float uniform) {
    float maxv = -FLT_MAX, sum = 0;
    for (int v = 0; v < vocab; v++) maxv = row[v] > maxv ? row[v] : maxv;
    for (int v = 0; v < vocab; v++) sum += (row[v] = expf(row[v] - maxv));
    float u = uniform * sum, acc = 0;
    for (int v = 0; v < vocab; v++)
        if ((acc += row[v]) > u) return v;
    return vocab - 1;
}

// The sample is decoded into bytes and printed once, escaped (escape_text): a piece may hold
// any bytes, and a character may span tokens. A stop signal ends it early (every rank looks
// before each token, collectively); what was drawn is printed.
static void sample_text(Model* m, const Tokenizer* tk, int len, uint64_t seed, FILE* out) {
    int T = m->c.seq_len, pp = m->L.pp, last_stage = chunk_stage(m->L.sched, pp, pp * m->L.vpp - 1);
    int* ctx = (int*)xcalloc(T, sizeof(int));
    int* window = (int*)xcalloc(T, sizeof(int));
    int* mine = (int*)xcalloc(m->T, sizeof(int));  // the window's tokens at this rank's positions
    float* row = (float*)xmalloc(sizeof(float) * m->c.vocab_padded);
    Rng rng;
    rng_seed(&rng, seed);
    Bytes text = {NULL, 0, 0};
    int n = 0;
    ctx[n++] = tk->eot >= 0 ? tk->eot : 0;  // start from <|endoftext|> (run.h eot_resolve), or id 0 without one
    PipeOp* ops = (PipeOp*)xmalloc(sizeof(PipeOp) * 3 * m->L.vpp);  // one micro-batch's forward
    int n_ops = forward_ops(m->L.sched, m->L.stage, pp, m->L.vpp, 1, ops);
    for (int step = 0; step < len && !ckpt_stop_requested(&m->L.group[GROUP_WORLD]); step++) {
        int start = n > T ? n - T : 0, cur = n - start;  // window of the last T tokens
        memset(window, 0, sizeof(int) * T);
        for (int i = 0; i < cur; i++) window[i] = ctx[(start + i) % T];
        for (int j = 0; j < m->T; j++) mine[j] = window[m->pos[j]];
        docs_of_window(m, window);
        int next = 0, last_row, holder = cp_rank_of_position(m, cur - 1, &last_row);
        float uniform = rng_uniform(&rng);  // drawn on every rank, so all stay in step
        SampleRow sample = {window_tokens(m, mine, m->T), holder, last_row, 0, row};
        m->sample = &sample;
        run_schedule(m, ops, n_ops, 0, 0.0f);  // the one sequence through the chunks; the row's logits
        m->sample = NULL;
        if (sample.filled) next = sample_draw(row, m->c.vocab, uniform);
        // comm: world broadcast of the token
        comm_broadcast(&m->L.group[GROUP_WORLD], &next, sizeof(int), layout_rank_of(&m->L, 0, last_stage, holder, 0));
        ctx[n % T] = next;  // ring buffer of the last T tokens
        n++;
        if (m->L.rank == 0) tokenizer_decode(tk, next, &text);
    }
    if (m->L.rank == 0) {
        char* shown = (char*)xmalloc(4 * text.n + 1);
        escape_text(shown, 4 * text.n + 1, text.bytes, text.n, 1);
        fprintf(out, "%s\n", shown);
        fflush(out);
        free(shown);
    }
    free(ctx); free(window); free(mine); free(row); free(text.bytes); free(ops);
}

// ----------------------------------------------------------------------------
// Checkpoints (runtime/ckpt.h) and the llm.c and Hugging Face files, on the host copies of the
// fp32 weights (params_to_host, once ZeRO 1/2's all-gathers since the update are in) and of
// AdamW's state.

static void save_checkpoint(Model* m, int step) {
    zero12_params_ready(m);  // (--zero 1/2: the weights whole again)
    float* params = params_to_host(m);
    float* m_host = opt_state_host_take(m, m->m_state, 1);
    float* v_host = opt_state_host_take(m, m->v_state, 1);
    ckpt_save(&m->L, &m->P, &m->c, m->args, params, m_host, v_host, m->opt_lo, m->opt_hi, step);
    opt_state_host_give(m, m_host, m->m_state, 0);
    opt_state_host_give(m, v_host, m->v_state, 0);
    params_host_give(m, params);
}
// --import-llmc, --import-hf, then --resume: returns the step to go on from (0: none).
static int weights_load(Model* m) {
    const Args* a = m->args;
    if (!a->import_llmc && !a->import_hf && !a->resume) return 0;
    float* params = params_to_host(m);  // (the readers fill it whole)
    if (a->import_llmc) llmc_import(a->import_llmc, &m->L, &m->P, &m->c, params);
    if (a->import_hf) hf_import(a->import_hf, &m->L, &m->P, &m->c, params);
    int step = 0;
    if (a->resume) {
        float* m_host = opt_state_host_take(m, m->m_state, 0);
        float* v_host = opt_state_host_take(m, m->v_state, 0);
        step = ckpt_resume(&m->L, &m->P, &m->c, a, params, m_host, v_host, m->opt_lo, m->opt_hi);
        opt_state_host_give(m, m_host, m->m_state, 1);
        opt_state_host_give(m, v_host, m->v_state, 1);
    }
    params_from_host(m, params);
    return step;
}
// --export-llmc, --export-hf after the run.
static int weights_export(Model* m) {
    const Args* a = m->args;
    if (!a->export_llmc && !a->export_hf) return 0;
    zero12_params_ready(m);
    float* params = params_to_host(m);
    int stop = a->export_llmc ? llmc_export(a->export_llmc, &m->L, &m->P, &m->c, params) : 0;
    if (a->export_hf && !stop) stop = hf_export(a->export_hf, &m->L, &m->P, &m->c, params, a->eot, a->tokenizer);
    params_host_give(m, params);
    return stop ? 128 + stop : 0;
}

// ----------------------------------------------------------------------------
// main()'s training loop: steps, evaluation, samples and checkpoints, until --steps or a
// stop signal. Returns main()'s exit code: 0; 128 + the signal when stopped by one (130
// SIGINT, 143 SIGTERM, the same from one rank or many); 1 when --on-nan skip skipped every
// step of the run (nothing was trained: a run that goes on must not look like one that
// learned). A run that skipped some steps says how many at the end.

static int train_loop(Model* m, Run* run, Metrics* met, int start_step) {
    Args* a = &run->args;
    ModelConfig* c = &a->cfg;
    int n_skipped = 0, first_skipped = 0, last_applied = start_step, stop = 0;
    watchdog_at(NULL);  // (armed since MPI_Init: runtime/run.h)
    // a stop during start-up (the model's set-up, the weights' load): nothing trained, nothing to save
    if ((stop = ckpt_stop_requested(&m->L.group[GROUP_WORLD]))) {
        if (stop != SIGPIPE && run->rank == 0)
            fprintf(stderr, "stopped by signal %d at start-up, before step %d: nothing trained, no checkpoint "
                    "written\n", stop, start_step + 1);
        return 128 + stop;
    }
    for (int step = start_step; step < c->steps && !stop; step++) {
        watchdog_kick();
        metrics_step_begin(met, step);
        StepResult r = train_step(m, &run->train, step);
        step_done(m, step);
        metrics_step_end(met, &m->L, c, step, start_step, m->n_micro, r.loss, r.lr, r.grad_norm, r.skipped, r.sched_s,
                         r.pp_wait_s);
        if (r.skipped && !n_skipped++) first_skipped = step + 1;
        if (!r.skipped) last_applied = step + 1;
        double val_loss;
        if (a->eval_every && ((step + 1) % a->eval_every == 0 || step + 1 == c->steps) &&
            evaluate(m, &run->val, a->val_batches, &val_loss))
            metrics_eval(met, step, val_loss);
        if (a->sample_every && (step + 1) % a->sample_every == 0)
            sample_text(m, &run->tk, a->sample_len, c->seed + step, stdout);
        stop = ckpt_stop_requested(&m->L.group[GROUP_WORLD]);
        if (a->ckpt_dir && ((a->ckpt_every && (step + 1) % a->ckpt_every == 0) || step + 1 == c->steps || stop)) {
            // a skipped step saves nothing, so a run that skips on and on never rotates the
            // last checkpoint of an applied update away
            if (!r.skipped) save_checkpoint(m, step + 1);
            else if (run->rank == 0)
                printf("checkpoint: none at step %d, which was skipped (non-finite); the newest on disk is kept\n",
                       step + 1);
        }
        if (stop && stop != SIGPIPE && run->rank == 0) fprintf(stderr, "stopped by signal after step %d\n", step + 1);
    }
    if (!stop && !a->sample_every && a->sample_len && start_step < c->steps) {
        if (run->rank == 0) printf("sample:\n"), fflush(stdout);
        sample_text(m, &run->tk, a->sample_len, c->seed, stdout);
        if ((stop = ckpt_stop_requested(&m->L.group[GROUP_WORLD])) && stop != SIGPIPE && run->rank == 0)
            fprintf(stderr, "stopped by signal during the sample after step %d\n", c->steps);
    }
    if (stop) return 128 + stop;
    int ran = c->steps - start_step;
    if (n_skipped && run->rank == 0)
        printf(
            "skipped: %d of %d steps (non-finite loss or gradient norm), the first at step %d; the last update "
            "applied: %s%d\n",
            n_skipped, ran, first_skipped, last_applied == start_step ? "none since step " : "step ", last_applied);
    if (ran > 0 && n_skipped == ran) {
        if (run->rank == 0)
            print_error("--on-nan skip: every one of the %d steps was skipped (non-finite); nothing was trained", ran);
        return 1;
    }
    return 0;
}

#endif
