// dev/ckpt_compare.c: two checkpoints of the same model, tensor by tensor (used by
// dev/check_gpu_vs_cpu.sh to compare the GPU build's gradients with the CPU build's).
//
//   ckpt_compare [--part params|m|v] [--tol X] REF.bin GOT.bin
//
// For every tensor of the model (the shape comes from REF's header), the relative
// difference ||got - ref|| / ||ref|| of the chosen part (default m: after one step AdamW's
// first moment is (1 - beta1) times the clipped gradient, so m compares gradients element
// by element). Prints the worst tensors and one PASS or FAIL line; exits 1 when the worst
// is above --tol (default 1e-2), 2 on a bad file.
#include "runtime/ckpt.h"

static float* read_part(const char* path, int part, int32_t* h, size_t* n_full) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open checkpoint '%s': %s", path, strerror(errno));
    if (fread(h, 4, 256, f) != 256 || h[CK_MAGIC] != CKPT_MAGIC || h[CK_VERSION] < CKPT_VERSION_OLDEST ||
        h[CK_VERSION] > CKPT_VERSION)
        fail("%s: not a checkpoint of version %d to %d", path, CKPT_VERSION_OLDEST, CKPT_VERSION);
    *n_full = ckpt_header_n_full(h);
    float* x = (float*)xmalloc(sizeof(float) * *n_full);
    if (fseeko(f, 1024 + (off_t)part * *n_full * 4, SEEK_SET) || fread(x, 4, *n_full, f) != *n_full)
        fail("%s: truncated (%zu floats per part expected)", path, *n_full);
    fclose(f);
    return x;
}

int main(int argc, char** argv) {
    const char* names[] = {"params", "m", "v"};
    int part = 1;
    double tol = 1e-2;
    const char* path[2] = {NULL, NULL};
    int n_path = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--part") && i + 1 < argc) {
            i++;
            part = !strcmp(argv[i], "params") ? 0 : !strcmp(argv[i], "m") ? 1 : !strcmp(argv[i], "v") ? 2 : -1;
            if (part < 0) fail("--part must be params, m or v, got '%s'", argv[i]);
        } else if (!strcmp(argv[i], "--tol") && i + 1 < argc) {
            tol = parse_double(argv[++i], "--tol");
        } else if (n_path < 2 && argv[i][0] != '-') {
            path[n_path++] = argv[i];
        } else {
            fail("usage: ckpt_compare [--part params|m|v] [--tol X] REF.bin GOT.bin");
        }
    }
    if (n_path != 2) fail("usage: ckpt_compare [--part params|m|v] [--tol X] REF.bin GOT.bin");
    int32_t h[256], h2[256];
    size_t n_full, n_full2;
    float* ref = read_part(path[0], part, h, &n_full);
    float* got = read_part(path[1], part, h2, &n_full2);
    if (n_full2 != n_full || memcmp(h + CK_ARCH, h2 + CK_ARCH, (CK_VOCAB_PADDED - CK_ARCH + 1) * 4))
        fail("%s and %s hold different models", path[0], path[1]);
    ModelConfig c;
    memset(&c, 0, sizeof(c));
    c.arch = h[CK_ARCH], c.n_layer = h[CK_N_LAYER], c.n_head = h[CK_N_HEAD], c.n_kv_head = h[CK_N_KV_HEAD];
    c.d_model = h[CK_D_MODEL], c.d_ff = h[CK_D_FF], c.seq_len = h[CK_SEQ_LEN], c.vocab = h[CK_VOCAB];
    config_finalize(&c);
    c.tp = c.pp = c.vpp = c.dp = 1;
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    param_layout_build(P, &c, 1, 0, 1, 1, 0, 1);
    if (P->n_full != n_full)
        fail("%s: %zu floats per part, the model in its header has %zu", path[0], n_full, P->n_full);
    // per tensor kind (the name without its layer), the worst layer
    typedef struct { char kind[32]; double rel; int layer; } Worst;
    Worst w[64];
    int n_kinds = 0;
    double worst = 0;
    for (int i = 0; i < P->n; i++) {
        const Tensor* t = &P->t[i];
        double d = 0, r = 0;
        for (size_t k = t->full_offset; k < t->full_offset + t->size; k++) {
            double x = ref[k], y = got[k];
            d += (x - y) * (x - y), r += x * x;
        }
        double rel = r > 0 ? sqrt(d / r) : sqrt(d);
        if (!(rel == rel)) rel = INFINITY;  // NaN
        int j = 0;
        while (j < n_kinds && strcmp(w[j].kind, t->name)) j++;
        if (j == n_kinds && n_kinds < 64)
            snprintf(w[n_kinds].kind, sizeof(w[0].kind), "%s", t->name), w[n_kinds++].rel = -1;
        if (j < n_kinds && rel > w[j].rel) w[j].rel = rel, w[j].layer = t->layer;
        if (rel > worst) worst = rel;
    }
    for (int j = 0; j < n_kinds; j++) printf("  %-10s %.2e (layer %d)\n", w[j].kind, w[j].rel, w[j].layer);
    int ok = worst <= tol;
    printf("%s %s: worst tensor rel diff %.2e %s %.0e (%s vs %s)\n", ok ? "PASS" : "FAIL", names[part], worst,
           ok ? "<=" : ">", tol, path[1], path[0]);
    return ok ? 0 : 1;
}
