// tests/gpu_att_sweep.cu: test_gpu --att-sweep, the attention kernels' variants checked and
// timed in one run. First every forward and backward tile of the registries against the CPU
// on small random shapes (test_attention); only if all pass,
// each variant is timed at the published shapes of FlashAttention-2's benchmark (hidden
// 2048, B*T = 16k tokens, head size 64 and 128, causal, T 1k-16k) and with grouped-query
// heads, on random data, one CUDA-event pair per call, the median of the calls, the inputs
// rotated over enough copies that no call finds the previous one's in L2. Rows go to a CSV
// (--csv FILE) and the fastest forward tile per head size to a table (--tiles FILE: the
// lines device,hd,tile that --attn-tile auto reads, other devices' lines kept).
// FLOPs: FlashAttention-2's convention for causal attention, 4 B H T^2 hd / 2 forward and
// 2.5 times that backward (its benchmark's counts, so the figures compare with its tables).
// --dry: tiny shapes and 2 calls, so the plumbing runs on the emulator (the times mean nothing).
// Included by tests/test_gpu.cu after its helpers and gpu_bench.cu; not built alone.

typedef struct {
    int B, T, H, KV, hd, nbuf, reps;
    bf16 *qkv[8], *out[8], *dout[8], *dqkv[8];  // nbuf sets of buffers in rotation
    float* lse[8];
    const AttFwdTile* tile;  // the forward timed, or (NULL) the backward btile
    const AttBwdTile* btile;
} SweepArgs;

// The median time (ms) of a.reps calls, call i on buffer set i % nbuf (one warm-up call first).
static double sweep_time(SweepArgs* a) {
    cudaEvent_t ev[2 * 64];
    int reps = a->reps < 64 ? a->reps : 64;
    for (int i = 0; i < 2 * reps; i++) cudaCheck(cudaEventCreate(&ev[i]));
    if (!a->tile) attention_buffers_reserve(a->B, a->T, a->H, a->KV, a->hd);
    for (int i = -1; i < reps; i++) {
        int k = (i + a->nbuf) % a->nbuf;
        if (i >= 0) cudaCheck(cudaEventRecord(ev[2 * i], st));
        if (a->tile) a->tile->launch(a->out[k], a->lse[k], a->qkv[k], a->B, a->T, a->H, a->KV, NULL, st);
        else {
            att_bwd_pick[a->hd] = a->btile;
            attention_backward_gpu(a->dqkv[k], a->dout[k], a->qkv[k], a->out[k], a->lse[k], a->B, a->T, a->H, a->KV,
                                   a->hd, NULL, st);
            att_bwd_pick[a->hd] = NULL;
        }
        if (i >= 0) cudaCheck(cudaEventRecord(ev[2 * i + 1], st));
    }
    cudaCheck(cudaStreamSynchronize(st));
    float ms[64];
    for (int i = 0; i < reps; i++) cudaCheck(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (int i = 0; i < 2 * reps; i++) cudaCheck(cudaEventDestroy(ev[i]));
    for (int i = 1; i < reps; i++)  // insertion sort, then the median
        for (int j = i; j > 0 && ms[j - 1] > ms[j]; j--) {
            float x = ms[j];
            ms[j] = ms[j - 1], ms[j - 1] = x;
        }
    return reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
}

// One shape: every forward tile of its head size and the backward; rows to csv, each forward
// tile's time added to fwd_ms[tile index] (for the choice of the fastest).
static void sweep_shape(int B, int T, int H, int KV, int hd, int dry, const char* device, FILE* csv,
                        double* fwd_ms) {
    SweepArgs a;
    memset(&a, 0, sizeof(a));
    a.B = B, a.T = T, a.H = H, a.KV = KV, a.hd = hd, a.reps = dry ? 2 : 20;
    size_t rows = (size_t)B * T, nqkv = rows * (H + 2 * KV) * hd, nout = rows * H * hd;
    size_t set_bytes = 2 * (2 * nqkv + 2 * nout) + 4 * rows * H;
    a.nbuf = (int)((256u << 20) / set_bytes + 1);  // at least 256 MiB in rotation: beyond any L2
    a.nbuf = a.nbuf < 2 ? 2 : a.nbuf > 8 ? 8 : a.nbuf;
    for (int k = 0; k < a.nbuf; k++) {
        a.qkv[k] = (bf16*)dbuf(2 * nqkv), a.dqkv[k] = (bf16*)dbuf(2 * nqkv);
        a.out[k] = (bf16*)dbuf(2 * nout), a.dout[k] = (bf16*)dbuf(2 * nout), a.lse[k] = (float*)dbuf(4 * rows * H);
        fill_random(a.qkv[k], nqkv, 3 * k + 1, 2.0f), fill_random(a.dout[k], nout, 3 * k + 2, 1.0f);
        attention_forward_gpu(a.out[k], a.lse[k], a.qkv[k], B, T, H, KV, hd, NULL, st);  // the backward's inputs
    }
    double flop = 4.0 * B * H * (double)T * T / 2 * hd;
    for (int i = 0; i < N_ATT_FWD_TILES + N_ATT_BWD_TILES; i++) {  // the forward tiles, then the backward's
        int fwd = i < N_ATT_FWD_TILES;
        if ((fwd ? ATT_FWD_TILES[i].hd : ATT_BWD_TILES[i - N_ATT_FWD_TILES].hd) != hd) continue;
        a.tile = fwd ? &ATT_FWD_TILES[i] : NULL, a.btile = fwd ? NULL : &ATT_BWD_TILES[i - N_ATT_FWD_TILES];
        double ms = sweep_time(&a), f = a.tile ? flop : 2.5 * flop;
        const char* name = a.tile ? a.tile->name : a.btile->name;
        if (a.tile) fwd_ms[i] += ms;
        printf("sweep %-8s B=%-3d T=%-5d H=%-2d KV=%-2d hd=%-3d %-8s %9.3f ms %7.1f TFLOP/s (causal)\n",
               a.tile ? "forward" : "backward", B, T, H, KV, hd, name, ms, f / ms / 1e9);
        if (csv)
            fprintf(csv, "%s,%s,%d,%d,%d,%d,%d,%s,%.4f,%.2f\n", device, a.tile ? "forward" : "backward", hd, B, T, H,
                    KV, name, ms, f / ms / 1e9);
        if (csv) fflush(csv);  // a run stopped at its time limit keeps the rows so far
        fflush(stdout);
    }
    free_all();
}

// --tiles FILE: its lines for other devices, then this device's fastest forward tile per head
// size (the least summed time over the shapes at T >= 2k, or all with --dry).
static void sweep_write_tiles(const char* path, const char* device, const double* fwd_ms) {
    char tmp[4096], line[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE* out = fopen(tmp, "w");
    if (!out) fail("--tiles %s: cannot write %s", path, tmp);
    fprintf(out, "device,hd,tile\n");
    FILE* in = fopen(path, "r");
    size_t n = strlen(device);
    while (in && fgets(line, sizeof(line), in))
        if (strncmp(line, "device,", 7) && !(strncmp(line, device, n) == 0 && line[n] == ',')) fputs(line, out);
    if (in) fclose(in);
    for (int hd = 16; hd <= 128; hd *= 2) {
        int best = -1;
        for (int i = 0; i < N_ATT_FWD_TILES; i++)
            if (ATT_FWD_TILES[i].hd == hd && fwd_ms[i] > 0 && (best < 0 || fwd_ms[i] < fwd_ms[best])) best = i;
        if (best >= 0) fprintf(out, "%s,%d,%s\n", device, hd, ATT_FWD_TILES[best].name);
    }
    if (fclose(out) || rename(tmp, path)) fail("--tiles %s: cannot write it", path);
    printf("sweep: fastest forward tiles written to %s\n", path);
}

static void att_sweep(int dry, const char* csv_path, const char* tiles_path, const char* device) {
    // correctness first: every forward tile, the backward, documents and GQA, on small shapes
    test_attention(1, 150, 4, 2, 64, 0, 1);
    test_attention(2, 150, 2, 1, 64, 1, 1);
    test_attention(1, 150, 2, 1, 128, 0, 1);
    test_attention(2, 150, 2, 2, 128, 1, 1);
    for (int i = 0; i < N_ATT_BWD_TILES; i++) {  // every backward configuration, GQA and documents
        int hd = ATT_BWD_TILES[i].hd;
        if (hd < 64) continue;
        att_bwd_pick[hd] = &ATT_BWD_TILES[i];
        test_attention(1, 129, 4, 1, hd, 1);
        test_attention(2, 100, 2, 2, hd);
        att_bwd_pick[hd] = NULL;
    }
    if (n_fail) {
        printf("sweep: %d checks failed: no timings\n", n_fail);
        return;
    }
    FILE* csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv_path && !csv) fail("--csv %s: cannot write it", csv_path);
    if (csv) fprintf(csv, "device,pass,hd,B,T,H,KV,tile,ms,tflops_causal\n");
    double fwd_ms[64] = {0}, unused[64] = {0};  // summed forward times per tile: those that choose, the rest
    int tokens = dry ? 256 : 16384, t_lo = dry ? 128 : 1024, t_hi = dry ? 256 : 16384, hidden = dry ? 512 : 2048;
    for (int hd = 64; hd <= 128; hd *= 2) {
        for (int T = t_lo; T <= t_hi; T *= 2) {
            sweep_shape(tokens / T, T, hidden / hd, hidden / hd, hd, dry, device, csv,
                        T >= 2048 || dry ? fwd_ms : unused);  // T 1k: timed, not in the choice
        }
        int T = dry ? 128 : 4096;  // grouped-query heads: 4 query heads per kv head
        sweep_shape(tokens / T, T, hidden / hd, hidden / hd / 4, hd, dry, device, csv, fwd_ms);
        if (tiles_path) sweep_write_tiles(tiles_path, device, fwd_ms);  // after each head size: a stopped run keeps it
    }
    if (csv) fclose(csv), printf("sweep: rows written to %s\n", csv_path);
}
