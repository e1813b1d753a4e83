// dev/sim_wlb.c: the step time a pipeline would take with one core per rank when its
// micro-batches hold different documents (dev/bench_wlb.py): the runtime's op lists
// (layout/schedule.h schedule_build) played by the planner's simulator with a time per
// (micro-batch, chunk) (schedule_simulate_mb), priced by the cost model of layout/packing.h.
//
//   sim_wlb STEPS [TRAIN FLAGS]     (STEPS 0: one pass over the documents, every one trained once)
//
// TRAIN FLAGS: the run's (--data, --packing, --pp, --global-batch, --micro-batch, --schedule,
// the model's). Its global batches are made as the trainer makes them (runtime/run.h: the
// documents corpus of --data docs:lognormal, the last 5% split off for validation, the plan
// of --packing) and each micro-batch's attention work measured as train.h's batch_imbalance
// does (its visible pairs: masked by document unless --doc-mask off). Prints per step
// "step S spread_mb X makespan F total F": the spread the log's attn_spread_mb must equal, and
// in FLOPs the slowest dp rank's critical path and all ranks' compute. A chunk's op of a
// micro-batch: per position of its B x T, 2N per layer's matmuls in each of F, B and W (N: a
// layer's matmul parameters) and the head's 2Vd forward, 4Vd in B; per visible pair 4d forward
// and 8d backward per layer (doc_cost_model's 12 L d split by pass). A schedule without W ops
// runs B and W as one backward.
//
// Context parallelism (--cp R, ring; --cp-split zigzag|contiguous|doc): each cp rank's pairs of
// each micro-batch from the positions it holds, ordered by layout/cp_order.h as the trainer
// orders them (train.h batch_imbalance's measure: "spread_cp X" at the end of the line, the log's
// attn_spread_cp). A cp rank runs every op of a micro-batch on T/R positions, and each layer's
// ring needs every rank's K and V of that layer, so an op of micro-batch u takes the matmuls of
// T/R positions and the attention of u's heaviest cp rank; makespan is that critical path, total
// still every rank's compute. Ulysses ranks are not modelled (refused).
#include "layout/args.h"
#include "data/data.h"
#include "layout/schedule.h"
#include "layout/cp_order.h"

// The F, B and W FLOPs of global chunk g for a micro-batch of `tokens` positions and `pairs` pairs.
static void chunk_times(const ModelConfig* c, int n_chunks, int g, double tokens, double pairs, double* f, double* b,
                        double* w) {
    double d = c->d_model, head = (double)c->vocab * d, layer_mm = (config_matmul_params(c) - head) / c->n_layer;
    double layers = chunk_layer_count(c->n_layer, n_chunks, g), last = g == n_chunks - 1;
    *f = tokens * (layers * 2 * layer_mm + last * 2 * head) + layers * 4 * d * pairs;
    *b = tokens * (layers * 2 * layer_mm + last * 4 * head) + layers * 8 * d * pairs;
    *w = tokens * layers * 2 * layer_mm;
}

// The training stream as runtime/run.h opens it, with its plan.
static void open_train(const Args* a, TokenStream* train) {
    const ModelConfig* c = &a->cfg;
    double median, sigma;
    TokenStream val;
    memset(train, 0, sizeof(*train));
    if (!a->data || !docs_spec(a->data, &median, &sigma, "--data"))
        fail("sim_wlb: give --data docs:lognormal[:MEDIAN[:SIGMA]] (the bench's documents)");
    make_builtin_corpus(train, 2000000, 42);
    docs_mark(train->tokens, train->n_tokens, EOT_TOKEN, median, sigma, 42);
    stream_count_docs(train, EOT_TOKEN);
    stream_split(train, &val, 0.05);
    if (a->packing == PACK_CONCAT) return;
    train->plan = (DocPlan*)xmalloc(sizeof(DocPlan));
    plan_build(train->plan, train->tokens, train->n_tokens, EOT_TOKEN, a->packing, c->global_batch,
               c->micro_batch, c->seq_len);
}

// Each micro-batch unit's visible pairs in global batch `index` (train.h batch_imbalance); the
// batch's doc_start (G x T) stays in buf from 2 G T.
static void unit_pairs(const Args* a, const TokenStream* ts, size_t index, int* buf, int* pos, double* work) {
    const ModelConfig* c = &a->cfg;
    int G = c->global_batch, T = c->seq_len, B = c->micro_batch;
    int *in = buf, *tg = buf + (size_t)G * T, *ds = buf + 2 * (size_t)G * T;
    if (ts->plan) plan_fill(ts->plan, ts->tokens, index, 0, G, pos, T, in, tg, NULL, ds);
    else stream_batch(ts, T, index * G, G, in, tg, ds);
    if (a->doc_mask == DOC_MASK_OFF) memset(ds, 0, sizeof(int) * (size_t)G * T);
    for (int u = 0; u < G / B; u++) work[u] = attention_work(ds + (size_t)u * B * T, B, T, pos, T);
}

// The visible pairs of cp rank r in unit u, cp_work[u * R + r], from the batch's doc_start ds
// (G x T): the positions the trainer gives it in each sequence (layout/cp_order.h cp_ring_pairs).
static void cp_rank_pairs(const ModelConfig* c, const int* ds, int* order, double* cp_work) {
    int G = c->global_batch, T = c->seq_len, B = c->micro_batch, R = c->cp;
    memset(cp_work, 0, sizeof(double) * R * (G / B));
    for (int g = 0; g < G; g++) cp_ring_pairs(c, R, ds + (size_t)g * T, order, cp_work + (size_t)(g / B) * R);
}

int main(int argc, char** argv) {
    if (argc < 2) fail("usage: sim_wlb STEPS [TRAIN FLAGS]");
    char* end;
    long steps = strtol(argv[1], &end, 10);
    if (end == argv[1] || *end || steps < 0 || steps > 100000) fail("sim_wlb: STEPS must be an integer in [0, 100000]");
    Args a;
    argv[1] = argv[0];  // the trainer's flags, as a command line of their own
    parse_args(&a, argc - 1, argv + 1);
    ModelConfig* c = &a.cfg;
    if (!c->dp) c->dp = 1;  // --dp not given: one replica (the trainer takes the ranks left)
    int G = c->global_batch, T = c->seq_len, B = c->micro_batch, U = G / B, m = U / c->dp, nc = c->pp * c->vpp;
    if (!G || G % (B * c->dp)) fail("sim_wlb: give --global-batch, a multiple of dp x --micro-batch (got %d)", G);
    if (c->cp_ulysses > 1) fail("sim_wlb: Ulysses' cp ranks are not modelled (give --cp-kind ring)");
    const char* why = schedule_check(c->schedule, c->pp, c->vpp, m);
    if (why || nc > 256 || (size_t)G * T > ((size_t)1 << 26)) fail("sim_wlb: %s", why ? why : "a layout too large");
    TokenStream train;
    open_train(&a, &train);
    if (!steps) steps = train.plan ? (long)train.plan->n_batches : (long)(stream_n_seq(&train, T) / G);
    int *buf = (int*)xmalloc(sizeof(int) * 3 * (size_t)G * T), *pos = (int*)xmalloc(sizeof(int) * T);
    for (int j = 0; j < T; j++) pos[j] = j;
    int *order = (int*)xmalloc(sizeof(int) * T), R = c->cp;
    double *work = (double*)xmalloc(sizeof(double) * (2 + R) * U), *heaviest = work + U, *cp_work = work + 2 * U;
    double *t = (double*)xmalloc(sizeof(double) * 3 * (size_t)m * nc), t_build[3 * 256], sums[3] = {0};
    double *tf = t, *tb = t + (size_t)m * nc, *tw = t + 2 * (size_t)m * nc, unused;
    chunk_op_flops(c, c->pp, c->vpp, t_build);
    for (long s = 0; s < steps; s++) {
        unit_pairs(&a, &train, (size_t)s, buf, pos, work);
        cp_rank_pairs(c, buf + 2 * (size_t)G * T, order, cp_work);
        double total = 0, slowest = 0, spread_cp = cp_ring_heaviest(cp_work, U, R, heaviest);
        for (int r = 0; r < c->dp; r++) {  // dp rank r runs units r*m .. r*m+m-1 (data.h load_batch)
            for (int mb = 0; mb < m; mb++)
                for (int g = 0; g < nc; g++) {
                    size_t at = (size_t)mb * nc + g, u = (size_t)r * m + mb;
                    double f_all, b_all, w_all, f_mm, b_mm, w_mm, f_att, b_att;
                    chunk_times(c, nc, g, (double)B * T, work[u], &f_all, &b_all, &w_all);
                    total += f_all + b_all + w_all;
                    chunk_times(c, nc, g, (double)B * T / R, 0, &f_mm, &b_mm, &w_mm);  // a cp rank's matmuls
                    chunk_times(c, nc, g, 0, R > 1 ? heaviest[u] : work[u], &f_att, &b_att, &unused);
                    tf[at] = f_mm + f_att, tb[at] = b_mm + b_att, tw[at] = w_mm;
                }
            double span =
                schedule_simulate_mb(c->schedule, c->pp, c->vpp, m, t_build, tf, tb, tw, nc, 0, SENDS_ASYNC, NULL);
            if (span < 0) fail("sim_wlb: the schedule deadlocks");
            slowest = span > slowest ? span : slowest;
        }
        printf("step %ld spread_mb %.4f makespan %.6g total %.6g", s + 1, spread_of(work, U), slowest, total);
        if (R > 1) printf(" spread_cp %.4f", spread_cp);
        printf("\n");
        sums[0] += spread_of(work, U) / steps, sums[1] += spread_cp / steps, sums[2] += slowest / steps;
    }
    fprintf(stderr, "sim_wlb: %ld steps, means: spread_mb %.4f spread_cp %.4f makespan %.6g\n", steps, sums[0],
            sums[1], sums[2]);
    return 0;
}
