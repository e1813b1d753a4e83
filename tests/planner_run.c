// tests/planner_run.c: test_planner's plan of the run (planner/run_plan.h, ./train --plan
// --tokens N): the batch trade-off against hand-computed cases, and the command line.
// Included by tests/test_planner.c after planner_cli.c (its run_plan_capture, slurp); not built alone.

static void test_run_plan(void) {
    // E_min 1e9 tokens, B_noise 1e6: at B = 5e5, E = 1e9 (1 + 0.5) = 1.5e9 tokens in
    // S = (1e9 / 1e6)(1 + 2) = 3000 steps (= E / B); at B = B_noise twice E_min, S_min twice
    check(fabs(run_tokens_needed(1e9, 1e6, 5e5) - 1.5e9) < 1 && fabs(run_steps_needed(1e9, 1e6, 5e5) - 3000) < 1e-6 &&
              fabs(run_tokens_needed(1e9, 1e6, 1e6) - 2e9) < 1 && fabs(run_steps_needed(1e9, 1e6, 1e6) - 2000) < 1e-6,
          "run_tokens_steps_hand", "E %.6g S %.6g", run_tokens_needed(1e9, 1e6, 5e5), run_steps_needed(1e9, 1e6, 5e5));
    // Kaplan et al. 2020: B_crit(2 nats) = 2e8 / 2^(1/0.21) = 2e8 / 27.13 = 7.372e6 tokens
    double bc = kaplan_critical_batch(2.0);
    check(fabs(bc / 7.372e6 - 1) < 1e-3, "run_kaplan_critical_batch_hand", "%.6g", bc);
    // three batches (seq_len 1, 1 GPU) of 0.5M, 1M, 2M tokens at 1e5, 1.8e5, 2.4e5 tokens/s:
    // E = 1.5e9, 2e9, 3e9 -> 15000 s, 11111 s, 12500 s: the middle one, 3.086 hours
    RunCandidate r[3] = {{0}};
    double tok_s[3] = {1e5, 1.8e5, 2.4e5};
    for (int i = 0; i < 3; i++) {
        r[i].batch = 500000L << i, r[i].found = 1, r[i].best.tokens_per_s_per_gpu = tok_s[i];
        run_predict(&r[i], 1, 1, 1e9, 1e6);
    }
    int best = run_best(r, 3);
    check(best == 1 && fabs(r[1].hours - 2e9 / 1.8e5 / 3600) < 1e-9 && fabs(r[0].hours * 3600 - 15000) < 1e-6 &&
              fabs(r[2].gpu_hours * 3600 - 12500) < 1e-6,
          "run_best_hand", "best %d, hours %.4f %.4f %.4f", best, r[0].hours, r[1].hours, r[2].hours);
    // the command line: llama-tiny on 4 CPU "GPUs", every batch 2^17..2^25 tokens tried, the
    // starred row the least hours of the table; a noise scale from a trainer log; the refusals
    char log[256], out[256];
    snprintf(log, sizeof(log), "/tmp/test_planner_%d_noise.jsonl", (int)getpid());
    snprintf(out, sizeof(out), "/tmp/test_planner_%d_run.txt", (int)getpid());
    FILE* f = fopen(log, "w");
    fprintf(f, "{\"step\":1,\"noise_scale\":null}\n{\"step\":2,\"noise_scale\":30000}\n{\"step\":3,\"noise_scale\":65536}\n");
    fclose(f);
    const char* a[] = {"--plan", "--model", "llama-tiny", "--gpus", "4", "--device", "cpu", "--tokens", "1e11",
                       "--noise-log", log};
    int rc = run_plan_capture(a, 11, out);
    const char* s = slurp(out);
    double min_hours = 1e300, star_hours = -1;
    int rows = 0;
    for (const char* p = strstr(s, "GPU-hours\n"); p && (p = strchr(p, '\n')) && p[1] && p[1] != '\n'; p++) {
        const char* line = p + 1;
        const char* end = strchr(line, '\n');
        char buf[512], *tok[32];
        int n_tok = 0;
        snprintf(buf, sizeof(buf), "%.*s", end ? (int)(end - line) : (int)strlen(line), line);
        for (char* t = strtok(buf, " "); t && n_tok < 32; t = strtok(NULL, " ")) tok[n_tok++] = t;
        if (n_tok < 3) break;
        double h = atof(tok[n_tok - 2]), gh = atof(tok[n_tok - 1]);
        if (gh <= 0) continue;
        rows++;
        if (h < min_hours) min_hours = h;
        if (line[0] == '*') star_hours = h;
    }
    check(rc == 0 && strstr(s, "65.5K tokens (/tmp") && rows == 9 && min_hours > 0 && star_hours == min_hours && strstr(s, "best (*)"),
          "run_cli_llama_tiny_from_log", "rc %d, %d rows, starred %.4g, least %.4g: '%.400s'", rc, rows, star_hours,
          min_hours, s);
    const char* b[] = {"--plan", "--model", "llama-tiny", "--tokens", "1e8"};
    const char* c[] = {"--plan", "--model", "llama-tiny", "--tokens", "1e8", "--noise-scale", "1e5", "--global-batch",
                       "8"};
    int rc_b = run_plan_capture(b, 5, out);
    int no_source = strstr(slurp(out), "error: --tokens: give the noise scale once") != NULL;
    int rc_c = run_plan_capture(c, 9, out);
    check(rc_b == 1 && no_source && rc_c == 1 && strstr(slurp(out), "error: --tokens chooses the global batch"),
          "run_cli_refusals", "rc %d %d: '%.200s'", rc_b, rc_c, slurp(out));
    // the search tries the cut by cost: Llama 3 8B's head (1.8 layers' work) on the last of 8
    // stages of 4 layers; its best layout at pp 8 cuts by cost, and beats the even cut's best
    const char* d[] = {"--plan", "--model", "llama3-8b", "--gpus", "16", "--device", "h100-sxm", "--pp", "8",
                       "--top", "1"};
    const char* e[] = {"--plan", "--model", "llama3-8b", "--gpus", "16", "--device", "h100-sxm", "--pp", "8",
                       "--top", "1", "--pp-split", "even"};
    int rc_d = run_plan_capture(d, 11, out);
    const char* best_d = strstr(slurp(out), "best: ");
    double mfu_auto = best_d && strstr(best_d, "--pp-split auto") ? atof(strchr(best_d, '(') + 1) : -1;
    int rc_e = run_plan_capture(e, 13, out);
    const char* best_e = strstr(slurp(out), "best: ");
    double mfu_even = best_e && !strstr(best_e, "--pp-split auto") ? atof(strchr(best_e, '(') + 1) : -1;
    check(rc_d == 0 && rc_e == 0 && mfu_auto > mfu_even && mfu_even > 0, "search_tries_pp_split_auto_llama3_8b",
          "best MFU %.1f%% cut by cost, %.1f%% even", mfu_auto, mfu_even);
    // a cut only memory makes: LLaMA 7B's head (32k vocabulary) weighs 0.2 layers, so its FLOPs cut at
    // pp 4 is the even one, but the stages' memory moves layers: the best layout on 8 A100s cuts by cost
    const char* h[] = {"--plan", "--model", "llama-7b", "--gpus", "8", "--pp", "4", "--top", "1"};
    const char* i[] = {"--plan", "--model", "llama-7b", "--gpus", "8", "--pp", "4", "--top", "1", "--pp-split", "even"};
    int rc_f = run_plan_capture(h, 9, out);
    const char* best_f = strstr(slurp(out), "best: ");
    mfu_auto = best_f && strstr(best_f, "--pp-split auto") ? atof(strchr(best_f, '(') + 1) : -1;
    int rc_g = run_plan_capture(i, 11, out);
    const char* best_g = strstr(slurp(out), "best: ");
    mfu_even = best_g && !strstr(best_g, "--pp-split auto") ? atof(strchr(best_g, '(') + 1) : -1;
    check(rc_f == 0 && rc_g == 0 && mfu_auto > mfu_even && mfu_even > 0, "search_tries_memory_cut_llama_7b",
          "best MFU %.1f%% cut by cost, %.1f%% even", mfu_auto, mfu_even);
    remove(log), remove(out);
}
