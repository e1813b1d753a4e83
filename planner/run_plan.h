// planner/run_plan.h: ./train --plan --tokens N: the global batch and the layout chosen together,
// for the shortest time to a target rather than the highest MFU at a batch given.
//
// The model of the run is McCandlish, Kaplan, Amodei et al. 2018 ("An Empirical Model of
// Large-Batch Training", section 2.2-2.3, eq. 2.11): with B_noise the gradient noise scale, a
// target that takes E_min tokens at a batch far below it and S_min steps at a batch far above
// it takes, at a global batch of B tokens,
//     S = S_min (1 + B_noise / B) steps,   E = E_min (1 + B / B_noise) tokens,
// with E_min = S_min B_noise (E = S B). Each candidate batch gets this planner's best layout
// (plan_search: the highest predicted MFU that fits), whose step time gives its tokens per
// second; the time to the target is E / (tokens per second). A larger batch runs faster per
// token (the layout keeps more GPUs busy, the bubble and dp's share shrink) and needs more
// tokens: the table shows where the two meet.
// B_noise, in tokens: --noise-scale N (the trainer's --noise-scale measures it: the JSON key
// noise_scale), --noise-log FILE (a trainer log's last noise_scale), or --target-loss L:
// Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", eq. 5.3) found the critical
// batch B_crit(L) = B* / L^(1/alpha_B), B* = 2e8 tokens, alpha_B = 0.21 (L in nats per token,
// their WebText2 and tokenizer), and B_crit ~ B_noise (McCandlish et al., section 3.3).
#ifndef PLANNER_RUN_PLAN_H
#define PLANNER_RUN_PLAN_H

#include <stdio.h>
#include "planner/search.h"  // PlanResult, PlanFilter, the search

#define KAPLAN_B_STAR 2e8     // tokens (Kaplan et al. 2020, eq. 5.3)
#define KAPLAN_ALPHA_B 0.21
// The losses whose critical batch is 1 to 1e18 tokens (the range of --noise-scale): L = (B* / B)^alpha_B
#define KAPLAN_LOSS_MIN 0.01  // 1e18 tokens at 0.0092
#define KAPLAN_LOSS_MAX 50.0  // 1 token at 55

// Tokens and steps to the target at a global batch of b tokens (e_min, b_noise in tokens).
static double run_tokens_needed(double e_min, double b_noise, double b) { return e_min * (1 + b / b_noise); }
static double run_steps_needed(double e_min, double b_noise, double b) { return e_min / b_noise * (1 + b_noise / b); }
static double kaplan_critical_batch(double loss) { return KAPLAN_B_STAR / pow(loss, 1 / KAPLAN_ALPHA_B); }

typedef struct {
    long batch;        // global batch, sequences
    int found;         // a layout fits
    PlanResult best;   // the best layout at this batch (plan_search's first)
    double tok_s;      // its tokens per second, all GPUs
    double steps, tokens, hours, gpu_hours;
} RunCandidate;

// The candidate of the least time to the target, -1 if none has a layout.
static int run_best(const RunCandidate* r, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (r[i].found && (best < 0 || r[i].hours < r[best].hours)) best = i;
    return best;
}

// Fill in a candidate's predictions from its layout's throughput.
static void run_predict(RunCandidate* r, int seq_len, int gpus, double e_min, double b_noise) {
    double b = (double)r->batch * seq_len;
    r->tok_s = r->best.tokens_per_s_per_gpu * gpus;
    r->tokens = run_tokens_needed(e_min, b_noise, b);
    r->steps = run_steps_needed(e_min, b_noise, b);
    r->hours = r->tokens / r->tok_s / 3600;
    r->gpu_hours = r->hours * gpus;
}

// The last "noise_scale" a trainer log (--log, JSON lines) holds, in tokens.
static double noise_scale_from_log(const char* path) {
    char why[256];
    FILE* f = input_open(path, why, sizeof(why), NULL);  // a regular file (a FIFO would hang open())
    if (!f) fail("--noise-log %s: cannot open: %s", path, why);
    char line[4096];
    double last = NAN;
    while (fgets(line, sizeof(line), f)) {
        const char* at = strstr(line, "\"noise_scale\":");
        if (!at) continue;
        char* end;
        double v = strtod(at + 14, &end);
        if (end != at + 14 && v >= 1 && v <= 1e18) last = v;  // a count of tokens (cli.h plan_tokens' range)
    }
    fclose(f);
    if (!(last > 0))
        fail("--noise-log %s: no noise_scale of 1 to 1e18 tokens in it (run ./train with --noise-scale --log FILE)",
             path);
    return last;
}

static void run_print_row(const RunCandidate* r, int seq_len, int mark) {
    char b1[32], b2[32];
    if (!r->found) {
        printf("  %8ld %9s  no layout fits\n", r->batch, fmt_count((double)r->batch * seq_len, b1));
        return;
    }
    const PlanResult* p = &r->best;
    char layout[128];
    snprintf(layout, sizeof(layout), "dp %d tp %d cp %d pp %d vpp %d mb %d %s%s", p->dp, p->tp, p->cp, p->pp, p->vpp,
             p->micro_batch, schedule_name(p->schedule), p->pp_split ? "+auto" : "");
    printf("%s %8ld %9s  %-46s %5.1f %10.0f %9s %10.1f %11.0f\n", mark ? "*" : " ", r->batch,
           fmt_count((double)r->batch * seq_len, b1), layout, 100 * p->mfu, r->steps, fmt_count(r->tokens, b2),
           r->hours, r->gpu_hours);
}

// The batches tried: powers of two from 2^17 tokens (or one sequence) to 2^25, in sequences.
static int run_batches(int seq_len, long* batch) {
    int n = 0;
    for (long tokens = 1L << 17; tokens <= 1L << 25; tokens *= 2)
        if (tokens >= seq_len) batch[n++] = tokens / seq_len;
    return n;
}

static void run_plan(const ModelConfig* c, int gpus, int gpus_per_node, const DeviceProfile* d, const PlanSetup* k,
                     const PlanFilter* f, double e_min, double b_noise, const char* noise_source) {
    long batch[16];
    int n = run_batches(c->seq_len, batch);
    RunCandidate* r = (RunCandidate*)xcalloc(n, sizeof(RunCandidate));
    char b1[32], b2[32], b3[32];
    printf("run: to a target of %s tokens at a small batch (E_min), noise scale B_noise %s tokens (%s);\n",
           fmt_count(e_min, b1), fmt_count(b_noise, b2), noise_source);
    printf("     S = S_min (1 + B_noise/B), E = E_min (1 + B/B_noise) (McCandlish et al. 2018), S_min = %s steps\n\n",
           fmt_count(e_min / b_noise, b3));
    for (int i = 0; i < n; i++) {
        PlanResult* res;
        int n_valid = 0, n_fit = 0;
        r[i].batch = batch[i];
        int rows = plan_search(c, gpus, (int)batch[i], gpus_per_node, d, k, f, 1, &res, &n_valid, &n_fit);
        if (rows > 0 && n_fit > 0 && res[0].fits) {
            r[i].found = 1, r[i].best = res[0];
            run_predict(&r[i], c->seq_len, gpus, e_min, b_noise);
        }
        free(res);
    }
    int best = run_best(r, n);
    printf("  %8s %9s  %-46s %5s %10s %9s %10s %11s\n", "batch", "tokens", "layout (best MFU at this batch)", "MFU%",
           "steps", "tokens", "hours", "GPU-hours");
    for (int i = 0; i < n; i++) run_print_row(&r[i], c->seq_len, i == best);
    if (best < 0)  // nothing to recommend: not a success (it printed the table and exited 0)
        fail("--tokens: no batch of the %d tried (%ld to %ld sequences) has a layout that fits in %.3g GiB per GPU "
             "(see ./train --plan at one batch for why)", n, batch[0], batch[n - 1], d->mem_bytes / GiB);
    const PlanResult* p = &r[best].best;
    printf("\nbest (*): --global-batch %ld --dp %d --tp %d --pp %d --vpp %d --micro-batch %d --schedule %s%s "
           "--recompute %s --zero %d%s: %.1f hours, %.0f GPU-hours (%.1f%% MFU)\n",
           r[best].batch, p->dp, p->tp, p->pp, p->vpp, p->micro_batch, schedule_name(p->schedule),
           p->pp_split ? " --pp-split auto" : "", plan_recompute_name(p->recompute), p->zero, p->sp ? " --sp" : "",
           r[best].hours, r[best].gpu_hours, 100 * p->mfu);
    free(r);
}

#endif
