// fuzz/fuzz_ckpt.c: the checkpoint reader (ckpt.h): ckpt_header_check on the header and
// ckpt_resume on the whole file, for a small model (1 layer, d_model 16, seq 8: 116 KB
// files) on one rank.
//
// Input: up to 1024 bytes XORed onto a valid header for that model (zero bytes keep it
// valid, so most inputs get past the magic and the shape checks), then byte 1024 picks the
// path (% 3: 0 --resume FILE, 1 --resume auto scanning the directory, 2 --resume auto through
// a manifest LATEST whose text is the next 32 bytes) and whether the header's checksum is
// computed after the XOR (/ 3 odd: so the checks behind the checksum see the changed header;
// even: of the template, so any change must be caught by the checksum), bytes 1025..1026 a
// size change of the file (-32768..32767 bytes), and the rest is tiled over the three float
// sections (an empty rest leaves zeros). The index holds the true lengths and checksums of
// the tiled sections, so a body is accepted or refused on its values.
#include "fuzz_common.h"
#define printf(...) (0 ? printf(__VA_ARGS__) : 0)  // ckpt_resume's "resumed from" line: never printed
#include "runtime/ckpt.h"

static Args args;
static ParamLayout P;
static Layout L;
static float *params, *m_state, *v_state;
static int32_t template_h[256];

static void setup(void) {
    static int done = 0;
    if (done) return;
    done = 1;
    char* argv[] = {"fuzz", "--model", "tiny", "--n-layer", "1", "--d-model", "16", "--n-head", "2", "--seq-len", "8",
                    "--micro-batch", "1", "--global-batch", "1", NULL};
    parse_args(&args, 15, argv);
    args.cfg.dp = 1;
    param_layout_build(&P, &args.cfg, 1, 0, 1, 1, 0, 1);
    memset(&L, 0, sizeof(L));
    L.world = 1, L.dp = L.tp = L.pp = L.vpp = L.cp = L.replicas = 1;
    params = (float*)calloc(P.n_padded, sizeof(float));
    m_state = (float*)calloc(P.n_padded, sizeof(float));
    v_state = (float*)calloc(P.n_padded, sizeof(float));
    ckpt_header_fill(template_h, &args.cfg, 3, P.n_full, P.n);
    // these live across inputs: take them off the tracker's list so fuzz_reset keeps them
    void* keep[] = {params, m_state, v_state};
    for (int i = 0; i < 3; i++) {
        FzBlock* b = (FzBlock*)((char*)keep[i] - offsetof(FzBlock, align));
        b->prev->next = b->next, b->next->prev = b->prev;
        b->prev = b->next = b;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    setup();
    fail_hook = fuzz_fail_jump;
    int32_t h[256];
    memcpy(h, template_h, sizeof(h));
    for (size_t i = 0; i < size && i < 1024; i++) ((uint8_t*)h)[i] ^= data[i];
    int mode = size > 1024 ? data[1024] % 3 : 0, sign_changed = size > 1024 && data[1024] / 3 % 2;
    int delta = size > 1026 ? (int16_t)(data[1025] | data[1026] << 8) : 0;
    const uint8_t* pat = size > 1027 + 32 ? data + 1027 + 32 : NULL;
    size_t pat_n = pat ? size - 1027 - 32 : 0;
    // the whole file in memory: header, body, index (lengths, then checksums), header checksum
    long long whole = ckpt_file_bytes(P.n_full, P.n);
    uint8_t* file = (uint8_t*)calloc((size_t)whole, 1);
    float* body = (float*)(file + 1024);
    for (long long i = 0; pat && i < whole - 1024 - 32LL * P.n; i++) ((uint8_t*)body)[i] = pat[i % pat_n];
    uint64_t* lens = (uint64_t*)(file + 1024 + 12 * P.n_full);
    uint64_t* sums = lens + P.n;
    for (int sec = 0; sec < 3; sec++)
        for (int i = 0; i < P.n; i++) {
            lens[i] = P.t[i].size;
            sums[sec * P.n + i] = hash_bytes(body + sec * P.n_full + P.t[i].full_offset, sizeof(float) * P.t[i].size);
        }
    uint64_t sum = ckpt_header_checksum(sign_changed ? h : template_h, lens, sums, P.n);
    h[CK_SUM_LO] ^= (int32_t)(uint32_t)sum, h[CK_SUM_HI] ^= (int32_t)(uint32_t)(sum >> 32);
    memcpy(file, h, 1024);
    int header_signed = ckpt_header_sum(h) == ckpt_header_checksum(h, lens, sums, P.n);
    long long fsize = whole + delta < 0 ? 0 : whole + delta;
    char dir[128], path[256];
    snprintf(dir, sizeof(dir), "/tmp/fuzz_ckpt_%d", (int)getpid());
    mkdir(dir, 0755);
    unlink(strcat(strcpy(path, dir), "/LATEST"));
    if (mode == 0) snprintf(path, sizeof(path), "%s/ck.bin", dir);
    else snprintf(path, sizeof(path), "%s/ckpt_%08d.bin", dir, 5);
    FILE* f = fopen(path, "wb");
    if (!f) abort();
    fwrite(file, 1, (size_t)(fsize < whole ? fsize : whole), f);
    for (long long i = whole; i < fsize; i++) fputc(0, f);
    fclose(f);
    free(file);
    if (mode == 2) {
        char latest[300], text[33] = {0};
        if (size > 1027) memcpy(text, data + 1027, size - 1027 < 32 ? size - 1027 : 32);
        snprintf(latest, sizeof(latest), "%s/LATEST", dir);
        FILE* m = fopen(latest, "wb");
        if (!m) abort();
        fwrite(text, 1, strlen(text), m);
        fclose(m);
    }
    if (!setjmp(fuzz_jump)) {
        char why[512];
        const char* bad = ckpt_header_check(h, &args.cfg, P.n_full, fsize, why);
        if (bad && !*bad) abort();
        static char found[PATH_CAP];
        if (mode) ckpt_find_latest(dir, found, 0);  // --resume auto, as run_setup resolves it
        args.resume = mode == 0 ? path : found;
        int step = ckpt_resume(&L, &P, &args.cfg, &args, params, m_state, v_state, 0, P.n_local);
        // resume must refuse what the header check refuses, and a header its checksum does not match
        if (bad || step < 0 || !header_signed) abort();
        for (size_t i = 0; i < P.n_local; i++)
            if (!isfinite(params[i]) || !isfinite(m_state[i]) || !isfinite(v_state[i]) || v_state[i] < 0) abort();
    }
    fuzz_reset();
    return 0;
}
