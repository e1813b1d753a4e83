// tests/gpt_cp_doc.c: --cp-split doc (layer_parallel/context_parallel.h cp_doc_order), included into
// test_gpt.c after gpt_packing.c (its doc_stream and free_plan). The order of a sequence's rows
// over the ring ranks: a permutation, each ring rank's rows increasing and T / R of them, each
// document's 2R chunks within one token of each other, the sequence's zig-zag without documents;
// and the cp-rank spread of attention work (runtime/train.h batch_imbalance's measure) at
// dev/bench_wlb.py's shape against the whole-sequence zig-zag.

// Whether order (T positions, ring rank r's T / R at [r * T / R]) is cp_doc_order's rule for the
// documents doc (doc_starts; NULL: one document).
static int cp_order_ok(const int* order, const int* doc, int T, int R) {
    int Ts = T / R, ok = 1;
    char* seen = (char*)xcalloc(T, 1);
    for (int i = 0; i < T && ok; i++) {
        ok &= order[i] >= 0 && order[i] < T && !seen[order[i]];
        if (ok) seen[order[i]] = 1;
        if (i % Ts) ok &= order[i] > order[i - 1];
    }
    for (int start = 0, end; start < T && ok; start = end) {  // a document's tokens per rank: chunks r, 2R-1-r
        for (end = start + 1; end < T && doc && doc[end] == doc[start]; end++) {}
        if (!doc) end = T;
        for (int r = 0; r < R; r++) {
            int held = 0;
            for (int i = 0; i < Ts; i++) held += order[r * Ts + i] >= start && order[r * Ts + i] < end;
            int lo = 2 * ((end - start) / (2 * R));  // two chunks of n / (2R), each perhaps one more
            ok &= held >= lo && held <= lo + 2;
        }
    }
    free(seen);
    return ok;
}

static void test_cp_doc_order(void) {
    int T = 96, ok = 1, zig = 1;
    int *doc = (int*)xmalloc(sizeof(int) * 3 * T), *order = doc + T, *pos = order + T;
    Rng rng;
    rng_seed(&rng, 7);
    for (int R = 1; R <= 4; R++)
        for (int trial = 0; trial < 50; trial++) {
            for (int p = 0, start = 0; p < T; p++) {  // documents of 1 to 40 tokens
                if (p == 0 || rng_uniform(&rng) < 1.0 / (1 + 39 * rng_uniform(&rng))) start = p;
                doc[p] = start;
            }
            cp_doc_order(doc, T, R, order);
            ok &= cp_order_ok(order, doc, T, R);
        }
    for (int R = 1; R <= 4; R++) {  // no documents: the sequence's zig-zag (cp_positions, U 1)
        cp_doc_order(NULL, T, R, order);
        ok &= cp_order_ok(order, NULL, T, R);
        for (int r = 0; r < R; r++) {
            cp_positions(pos, T, R, 1, r, 0);
            zig &= !memcmp(pos, order + r * (T / R), sizeof(int) * (T / R));
        }
    }
    check(ok, "cp split doc: each document's chunks r and 2R-1-r, rows increasing (R 1-4, 200 sequences)", NULL);
    check(zig, "cp split doc: one document is the sequence's zig-zag", NULL);
    free(doc);
}

// The cp-rank spread of attention work of global batch b of plan p (G sequences of T), each
// sequence split by its documents (doc 1) or the sequence's zig-zag (doc 0) over R ring ranks.
static double cp_rank_spread(const DocPlan* p, const int* tokens, size_t b, int R, int by_doc) {
    int G = p->G, T = p->T;
    int *in = (int*)xmalloc(sizeof(int) * (3 * (size_t)G * T + T)), *ds = in + 2 * (size_t)G * T, *pos = ds + G * T;
    for (int j = 0; j < T; j++) pos[j] = j;
    plan_fill(p, tokens, b, 0, G, pos, T, in, in + (size_t)G * T, NULL, ds);
    ModelConfig c = {0};
    c.seq_len = T, c.cp_doc = by_doc;
    double work[8] = {0};
    for (int g = 0; g < G; g++) cp_ring_pairs(&c, R, ds + (size_t)g * T, pos, work);
    free(in);
    return spread_of(work, R);
}

// dev/bench_wlb.py's shape (T 1024, global batch 8 of micro-batch 1, documents log-normal median
// 78.5 sigma 0.99) at cp 2 and 4, batches 10..109 of greedy and wlb: the target is a
// cp-rank spread <= 5% under --cp-split doc; every batch is held to it.
static void test_cp_doc_spread(void) {
    int eot = 50256, T = 1024, G = 8, n_b = 100, skip = 10;
    size_t n = (size_t)(n_b + skip + 40) * G * T;
    int* t = doc_stream(n, eot, 78.5, 0.99);
    for (int packing = PACK_GREEDY; packing <= PACK_WLB; packing++)
        for (int R = 2; R <= 4; R += 2) {
            DocPlan p;
            plan_build(&p, t, n, eot, packing, G, 1, T);
            double worst = 0, mean = 0, zig = 0;
            for (int i = 0; i < n_b; i++) {
                double s = cp_rank_spread(&p, t, skip + i, R, 1);
                worst = s > worst ? s : worst, mean += s / n_b;
                zig += cp_rank_spread(&p, t, skip + i, R, 0) / n_b;
            }
            check(worst <= 0.05, "cp split doc: cp-rank spread at the bench's shape <= 5%",
                  "%s cp %d: mean %.2f%%, worst %.2f%% of %d batches (the sequence's zig-zag: mean %.1f%%)",
                  packing == PACK_WLB ? "wlb" : "greedy", R, 100 * mean, 100 * worst, n_b, 100 * zig);
            free_plan(&p);
        }
    free(t);
}

// The CPU kernel on each ring rank's rows in its documents' order (AttnBlock q_at, k_at), merged over the
// ring, against the whole sequence (tests/gpt_kernels.c test_attention_ring, split 2): documents across
// ranks and tiles (GQA, MQA), one document the whole sequence, every token its own (greedy's padding), T
// not a multiple of the tile, hd 64 and 128.
static void test_cp_doc_kernels(void) {
    int d16[32], s0[] = {3, 6, 13}, s1[] = {0, 8}, T = 2 * ATT_ROWS + 8, T2 = 136, s2[] = {5, 40, 41, 60};
    int *one = (int*)xcalloc(16, sizeof(int)), *own = (int*)xmalloc(sizeof(int) * 16);
    int *d72 = (int*)xmalloc(sizeof(int) * T), *d136 = (int*)xmalloc(sizeof(int) * T2);
    rng_seed(&test_rng, 2828);  // this section may run alone
    for (int p = 0; p < 16; p++) own[p] = p;
    docs_from_starts(d16, 16, s0, 3), docs_from_starts(d16 + 16, 16, s1, 2);
    docs_from_starts(d72, T, s2, 4), docs_from_starts(d136, T2, s2, 4);
    test_attention_ring(2, 16, 4, 2, 8, 2, 2, d16);
    test_attention_ring(1, 16, 2, 2, 4, 4, 2, one);
    test_attention_ring(1, 16, 2, 1, 4, 2, 2, own);
    test_attention_ring(1, T, 4, 2, 64, 4, 2, d72);
    test_attention_ring(1, T2, 2, 1, 128, 2, 2, d136);
    free(one), free(own), free(d72), free(d136);
}

// The pairs backend/cpu/attention.h computes (its forward's returned figure) over the visible pairs
// (attention_work) of every ring rank's blocks at dev/bench_wlb.py's shape, 4 sequences of greedy's
// batch 10: ring rank r's rows against each rank's keys, as cp_blocks makes them under --cp-split
// doc (R 1: the whole sequence). Tiles of 32 rows whatever their documents computed 1.25 / 1.54 /
// 1.95x at R 1 / 2 / 4; tiles of documents' runs joined where one call costs less, 1.13 / 1.15 / 1.25x.
static void test_cp_doc_pairs(void) {
    int eot = 50256, T = 1024, G = 8, n_seq = 4, hd = 16;
    size_t n = (size_t)40 * G * T;
    int *t = doc_stream(n, eot, 78.5, 0.99), *in = (int*)xmalloc(sizeof(int) * (3 * (size_t)G * T + 2 * T));
    int *ds = in + 2 * (size_t)G * T, *pos = ds + (size_t)G * T, *order = pos + T;
    for (int j = 0; j < T; j++) pos[j] = j;
    DocPlan p;
    plan_build(&p, t, n, eot, PACK_GREEDY, G, 1, T);
    plan_fill(&p, t, 10, 0, G, pos, T, in, in + (size_t)G * T, NULL, ds);
    float *q = randn_f((size_t)T * 3 * hd, 1.0f), *o = (float*)xmalloc(sizeof(float) * T * (hd + 1)), *lse = o + T * hd;
    int ok = 1;
    char what[160] = "";
    for (int R = 1; R <= 4; R *= 2) {
        int Ts = T / R;
        double computed = 0, visible = 0;
        for (int g = 0; g < n_seq; g++) {
            const int* doc = ds + (size_t)g * T;
            cp_doc_order(doc, T, R, order);
            for (int r = 0; r < R; r++) {
                visible += attention_work(doc, 1, T, order + r * Ts, Ts);
                for (int step = 0; step < R; step++) {  // its own keys first (init), as the ring runs
                    int src = (r - step + R) % R;
                    AttnBlock a = {1, Ts, 1, 1, hd, 3 * hd, 3 * hd, 0, Ts, 0, 0, Ts, 0, step == 0, doc, T,
                                   order + r * Ts, order + src * Ts, T};
                    computed += attention_block_forward(o, hd, lse, q, q + hd, &a);
                }
            }
        }
        ok &= computed / visible <= 1.3;
        snprintf(what + strlen(what), sizeof(what) - strlen(what), "%sR %d: %.3f", R > 1 ? ", " : "", R,
                 computed / visible);
    }
    check(ok, "cp split doc: the CPU kernel computes <= 1.3x the visible pairs (bench's documents)",
          "computed / visible pairs %s", what);
    free_plan(&p), free(t), free(in), free(q), free(o);
}

static void test_cp_doc(void) {
    check(flags_refused("--cp 2 --cp-kind ulysses --cp-split doc", "--cp-split doc: splits the ring's rows"),
          "cp split doc: refused under --cp-kind ulysses (whole sequences per rank)", NULL);
    check(flags_refused("--cp 4 --cp-kind 2d --cp-ulysses 4 --cp-split doc", "leaves a ring of one rank"),
          "cp split doc: refused under --cp-kind 2d when the ring has one rank (cp / U = 1)", NULL);
    test_cp_doc_order();
    test_cp_doc_kernels();
    test_cp_doc_pairs();
    test_cp_doc_spread();
}
