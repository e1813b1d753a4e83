// tests/gpt_noise.c: test_gpt's gradient noise scale (runtime/noise_scale.h) on a case where
// it is known.
// Included by tests/test_gpt.c after its helpers (one test binary); not built alone.

// A quadratic with chosen noise: example j's loss 1/2 |w - w* - xi_j|^2 in D dimensions, xi_j
// ~ N(0, sigma^2 I), so at a fixed w its gradient is G - xi_j with G = w - w*: tr(Sigma) =
// D sigma^2 and B_simple = D sigma^2 / |G|^2. Each step draws B_big examples, R replicas of
// B_small = B_big / R; the estimator sees what the trainer has: the mean over the replicas of
// the squared norm of each one's mean gradient, and the squared norm of the step's.
static double noise_gauss(uint64_t* s) {
    double u1 = ((*s = *s * 6364136223846793005ULL + 1442695040888963407ULL) >> 11) * 0x1.0p-53 + 1e-300;
    double u2 = ((*s = *s * 6364136223846793005ULL + 1442695040888963407ULL) >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static double noise_scale_quadratic(int D, double sigma, double g_norm, int R, int b_small, int steps, uint64_t seed) {
    NoiseScale ns = {0, 0};
    double *G = (double*)xmalloc(sizeof(double) * D), *big = (double*)xmalloc(sizeof(double) * D),
           *rep = (double*)xmalloc(sizeof(double) * D), est = NAN;
    for (int i = 0; i < D; i++) G[i] = g_norm / sqrt((double)D);
    for (int t = 0; t < steps; t++) {
        double small_sq = 0, big_sq = 0;
        for (int i = 0; i < D; i++) big[i] = 0;
        for (int r = 0; r < R; r++) {
            double sq = 0;
            for (int i = 0; i < D; i++) rep[i] = 0;
            for (int j = 0; j < b_small; j++)
                for (int i = 0; i < D; i++) rep[i] += G[i] - sigma * noise_gauss(&seed);
            for (int i = 0; i < D; i++) big[i] += rep[i], rep[i] /= b_small, sq += rep[i] * rep[i];
            small_sq += sq / R;
        }
        for (int i = 0; i < D; i++) big[i] /= (double)R * b_small, big_sq += big[i] * big[i];
        est = noise_scale_update(&ns, small_sq, big_sq, b_small, (double)R * b_small);
    }
    free(G), free(big), free(rep);
    return est;
}

static void test_noise_scale(void) {
    // B_simple = 64 x 1 / 0.64 = 100, measured at batches of 32 and 64, 128, 256 (R 2, 4, 8)
    // and at 8 and 64 (R 8): after 200 steps the averages (about the last 20) within 20%
    const int R[] = {2, 4, 8, 8}, b_small[] = {32, 32, 32, 8};
    for (int k = 0; k < 4; k++) {
        double est = noise_scale_quadratic(64, 1.0, 0.8, R[k], b_small[k], 200, 1234 + k), want = 100;
        char name[128];
        snprintf(name, sizeof(name), "noise_scale/quadratic D 64 sigma 1 |G|^2 0.64: B_simple 100 from %d x %d", R[k],
                 b_small[k]);
        check(fabs(est / want - 1) <= 0.2, name, "estimate %.1f (tolerance 20%%)", est);
    }
    // a noiseless gradient: tr(Sigma) 0, B_simple 0; all noise (G = 0): |G|^2 averages near 0
    double est = noise_scale_quadratic(16, 0.0, 1.0, 4, 16, 20, 7);
    check(fabs(est) < 1e-9, "noise_scale/no noise: 0", "estimate %g", est);
    // its rules are config_check's (layout/layout_check.h), shared by parsing and the launched ranks:
    // dp x cp >= 2 once the world is known, no zero 2/3 or sp at parsing already
    ModelConfig c = {0};
    apply_preset(&c, find_preset("tiny"));
    c.pp = c.tp = c.cp = c.cp_ulysses = c.vpp = c.micro_batch = 1, c.global_batch = 4, c.dp = 1;
    config_finalize(&c);
    FlagRules f = {0};
    f.noise_scale = 1;
    char why[WHY_CAP];
    const char* one = config_check(&c, &f, 1, why);
    check(one && strstr(one, "dp x cp >= 2 (got 1)"), "noise_scale/config_check: dp 1 refused", "%s",
          one ? one : "NULL");
    why[0] = 0;
    check(!config_check(&c, &f, 0, why), "noise_scale/config_check: at parsing (dp not known) not yet refused", "%s",
          why);
    c.dp = 2;
    why[0] = 0;
    check(!config_check(&c, &f, 2, why), "noise_scale/config_check: dp 2 zero 0 accepted", "%s", why);
    c.zero = 2;
    const char* z = config_check(&c, &f, 0, why);
    check(z && strstr(z, "--zero 2"), "noise_scale/config_check: zero 2 refused at parsing", "%s", z ? z : "NULL");
    c.zero = 0, c.cp = 2, c.dp = 1;
    why[0] = 0;
    check(!config_check(&c, &f, 2, why), "noise_scale/config_check: cp 2 (two replicas) accepted", "%s", why);
    f.noise_scale = 0, c.zero = 3, c.dp = 2, c.cp = 1;
    why[0] = 0;
    check(!config_check(&c, &f, 2, why), "noise_scale/config_check: without --noise-scale zero 3 is fine", "%s", why);
}
