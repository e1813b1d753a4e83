// tests/layouts_offload.c: test_layouts' --offload cases (backend/cpu/offload.h): every offload
// layout against the 1-rank run, with the run's final log line showing that it offloaded, and
// checkpoints that resume bit for bit with and without offload.
// Included by tests/test_layouts.c after its helpers (one test binary); not built alone.

// The number after "key": in the final line of run `tag`'s log (-1 when absent).
static double final_value(const char* tag, const char* key) {
    char path[600], line[4096], last[4096] = "", pat[80];
    snprintf(path, sizeof(path), "/tmp/test_layouts/%s/log.jsonl", tag);
    FILE* f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f))
        if (strstr(line, "\"final\"")) snprintf(last, sizeof(last), "%s", line);
    if (f) fclose(f);
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char* p = strstr(last, pat);
    return p ? atof(p + strlen(pat)) : -1;
}

// What a run must show it offloaded: 'o' AdamW's state (on the host, none on the device), 'a'
// activation slots in the tier (a stage held more than the 2 frames), '-' nothing moved (the
// schedule holds at most 2 in flight: pp 2 1F1B and ZB-H1 on stage 0).
typedef struct { const char* tag; const char* flags; const char* moved; } OffloadCase;

static void offload_suite(const char* model_tag, const char* model_flags, const OffloadCase* cases, int n) {
    Layout_* layouts = (Layout_*)xmalloc(sizeof(Layout_) * n);
    for (int i = 0; i < n; i++) layouts[i].tag = cases[i].tag, layouts[i].flags = cases[i].flags;
    suite(model_tag, model_flags, layouts, n);
    free(layouts);
    for (int i = 0; i < n; i++) {
        if (!selected(cases[i].tag)) continue;
        char tag[256];
        snprintf(tag, sizeof(tag), "%s_%s", model_tag, cases[i].tag);
        double opt_host = final_value(tag, "opt_host_bytes"), opt_dev = final_value(tag, "opt_bytes");
        double act_host = final_value(tag, "act_host_bytes");
        int want_opt = strchr(cases[i].moved, 'o') != NULL, want_act = strchr(cases[i].moved, 'a') != NULL;
        int ok = (want_opt ? opt_host > 0 && opt_dev == 0 : opt_host == 0) && (want_act ? act_host > 0 : act_host == 0);
        check(ok, tag, "offloaded: AdamW state %.0f B on the host, %.0f B on the device; activations %.0f B in "
              "the tier", opt_host, opt_dev, act_host);
    }
}

static void offload_suites(void) {
    static const OffloadCase gpt[] = {
        {"offload_opt_1rank", "--offload optimizer", "o"},
        {"offload_opt_dp2_zero1", "--dp 2 --zero 1 --offload optimizer", "o"},
        {"offload_opt_dp2_zero2", "--dp 2 --zero 2 --offload optimizer", "o"},
        {"offload_opt_dp2_zero3", "--dp 2 --zero 3 --offload optimizer", "o"},
        {"offload_opt_pp2", "--pp 2 --offload optimizer", "o"},
        {"offload_opt_tp2", "--tp 2 --offload optimizer", "o"},
        // 8 micro-batches (micro-batch 4 of the global 32)
        {"offload_act_pp2_1f1b", "--pp 2 --micro-batch 4 --offload activations", "-"},
        {"offload_act_pp2_gpipe", "--pp 2 --schedule gpipe --micro-batch 4 --offload activations", "a"},
        {"offload_act_pp4_1f1b", "--pp 4 --micro-batch 4 --offload activations", "a"},
        {"offload_act_1frame_pp4_1f1b", "--pp 4 --micro-batch 4 --offload activations --offload-frames 1", "a"},
        {"offload_act_1frame_pp2_vpp2", "--pp 2 --vpp 2 --micro-batch 4 --offload activations --offload-frames 1", "a"},
        {"offload_act_pp2_vpp2", "--pp 2 --vpp 2 --micro-batch 4 --offload activations", "a"},
        {"offload_act_pp2_zbh1", "--pp 2 --schedule zb-h1 --micro-batch 4 --offload activations", "-"},
        {"offload_act_pp4_zbh1", "--pp 4 --schedule zb-h1 --micro-batch 4 --offload activations", "a"},
        {"offload_act_tp2_pp2_gpipe_sp", "--tp 2 --sp --pp 2 --schedule gpipe --micro-batch 4 --offload activations",
         "a"},
        {"offload_both_dp2_zero3_pp2_gpipe", "--dp 2 --zero 3 --pp 2 --schedule gpipe --micro-batch 4 --offload both",
         "oa"},
        {"offload_both_dp2_zero2_pp2_vpp2", "--dp 2 --zero 2 --pp 2 --vpp 2 --micro-batch 2 --offload both", "oa"},
    };
    offload_suite("gpt2", "--model tiny", gpt, sizeof(gpt) / sizeof(gpt[0]));
    static const OffloadCase llama[] = {
        {"offload_both_pp2_vpp2", "--pp 2 --vpp 2 --micro-batch 4 --offload both", "oa"},
        {"offload_act_pp2_gpipe_full", "--pp 2 --schedule gpipe --recompute full --micro-batch 4 --offload activations",
         "a"},
    };
    offload_suite("llama", "--model llama-tiny", llama, sizeof(llama) / sizeof(llama[0]));
}

// Checkpoints of offloaded runs: the file holds tensors, not where they lived. One rank with
// --offload optimizer ends bit for bit where the run without ends (the same arithmetic), and a
// run resumed at step 3 with offload switched off, or on, ends there too; likewise pp 4 with
// --offload activations against pp 4 without.
static void offload_checkpoints(void) {
    if (!selected("offload_ckpt")) return;
    static const char* runs[][4] = {
        // tag, the whole run's flags, the resumed run's flags, the reference's flags
        {"opt_on", "--model tiny --offload optimizer", "--model tiny", "--model tiny"},
        {"opt_off", "--model tiny", "--model tiny --offload optimizer", "--model tiny"},
        {"act_on", "--model tiny --pp 4 --micro-batch 4 --offload both", "--model tiny --pp 4 --micro-batch 4",
         "--model tiny --pp 4 --micro-batch 4"},
    };
    for (int k = 0; k < 3; k++) {
        char whole[600], cut[600], ref[600], cmd[2048];
        snprintf(whole, sizeof(whole), "/tmp/test_layouts/offload_ckpt_%s/whole", runs[k][0]);
        snprintf(cut, sizeof(cut), "/tmp/test_layouts/offload_ckpt_%s/cut", runs[k][0]);
        snprintf(ref, sizeof(ref), "/tmp/test_layouts/offload_ckpt_%s/ref", runs[k][0]);
        snprintf(cmd, sizeof(cmd), "rm -rf /tmp/test_layouts/offload_ckpt_%s && mkdir -p %s %s", runs[k][0], whole,
                 ref);
        int rc = system(cmd) ? -1 : train_in(whole, runs[k][1], 5, 0);
        if (!rc) rc = train_in(ref, runs[k][3], 5, 0);
        if (!rc) rc = ckpt_copy(whole, 3, cut) ? -1 : train_in(cut, runs[k][2], 5, 1);
        size_t nw = 0, nc = 0, nr = 0;
        char *w = rc ? NULL : ckpt_body(whole, &nw), *c = rc ? NULL : ckpt_body(cut, &nc);
        char* r = rc ? NULL : ckpt_body(ref, &nr);
        int same = w && c && r && nw == nr && nc == nr && !memcmp(w, r, nr) && !memcmp(c, r, nr);
        char name[80];
        snprintf(name, sizeof(name), "offload_ckpt_%s", runs[k][0]);
        check(same, name, "[%s] 5 steps, and resumed at step 3 as [%s], against [%s] (exit %d, %zu bytes): %s",
              runs[k][1], runs[k][2], runs[k][3], rc, nr, same ? "identical" : "DIFFER");
        free(w), free(c), free(r);
    }
}

// Column `name` of the first row of a --plan-csv file (NAN when absent).
static double plan_csv_value(const char* path, const char* name) {
    char head[4096] = "", row[4096] = "";
    FILE* f = fopen(path, "r");
    int ok = f && fgets(head, sizeof(head), f) && fgets(row, sizeof(row), f);
    if (f) fclose(f);
    if (!ok) return NAN;
    char *h = head, *r = row;
    for (;;) {
        size_t hn = strcspn(h, ",\n"), rn = strcspn(r, ",\n");
        if (hn == strlen(name) && !strncmp(h, name, hn)) return rn ? atof(r) : NAN;
        if (h[hn] != ',' || r[rn] != ',') return NAN;
        h += hn + 1, r += rn + 1;
    }
}

// One layout through ./train --plan --plan-csv with `offload`; its CSV's path in csv.
static int plan_layout(const char* tag, const char* layout, const char* offload, char* csv, size_t cap) {
    char cmd[2048], out[600];
    snprintf(csv, cap, "/tmp/test_layouts/offload_plan_%s.csv", tag);
    snprintf(out, sizeof(out), "/tmp/test_layouts/offload_plan_%s.txt", tag);
    snprintf(cmd, sizeof(cmd),
             "./train --plan --model llama-7b --gpus 8 --device a100-80gb --micro-batch 1 --recompute none "
             "--attention flash2 --rms-kernel on --sp 0 %s --offload %s --plan-csv %s",
             layout, offload, csv);
    return run_to_file(cmd, out);
}

// The planner's offload terms on one layout each (planner/memory.h, time.h): --offload optimizer
// (dp 2 tp 2 pp 2 zero 1) leaves no optimizer state and 2 of the 6 bytes of weights per parameter
// on the device (the bf16 copy; the fp32 master goes to the host: backend/gpu/offload_gpu.h) and
// takes longer for its optimizer step;
// --offload activations (dp 2 pp 4, 1F1B: stage 0 holds 4 micro-batches) holds fewer activations
// and takes no less time.
static void offload_planner(void) {
    if (!selected("offload_plan")) return;
    char a[600], b[600], c[600], d[600];
    const char *opt = "--dp 2 --tp 2 --pp 2 --vpp 1 --schedule 1f1b --zero 1",
               *act = "--dp 2 --pp 4 --vpp 1 --schedule 1f1b --zero 1";
    int rc = plan_layout("opt_none", opt, "none", a, sizeof(a)) | plan_layout("opt", opt, "optimizer", b, sizeof(b)) |
             plan_layout("act_none", act, "none", c, sizeof(c)) | plan_layout("act", act, "activations", d, sizeof(d));
    double w0 = plan_csv_value(a, "mem_weights_gib"), w1 = plan_csv_value(b, "mem_weights_gib");
    double o0 = plan_csv_value(a, "mem_optim_gib"), o1 = plan_csv_value(b, "mem_optim_gib");
    double t0 = plan_csv_value(a, "t_optim_s"), t1 = plan_csv_value(b, "t_optim_s");
    int ok = !rc && o0 > 0 && o1 == 0 && fabs(3 * w1 / w0 - 1) < 1e-3 && t1 > t0;
    check(ok, "offload_plan optimizer", "llama-7b dp 2 tp 2 pp 2 zero 1: optimizer %.2f -> %.2f GiB, weights %.2f -> "
          "%.2f GiB (the fp32 master leaves), optimizer step %.3f -> %.3f s", o0, o1, w0, w1, t0, t1);
    double a0 = plan_csv_value(c, "mem_act_gib"), a1 = plan_csv_value(d, "mem_act_gib");
    double s0 = plan_csv_value(c, "t_step_s"), s1 = plan_csv_value(d, "t_step_s");
    ok = !rc && a1 > 0 && a1 < a0 && s1 >= s0;
    check(ok, "offload_plan activations", "llama-7b dp 2 pp 4 1F1B: stage activations %.2f -> %.2f GiB, step %.3f -> "
          "%.3f s", a0, a1, s0, s1);
}
