// hf_logits.c: our logits for a few tokens, for tests/test_export_hf.py to compare with what
// transformers computes from the --export-hf directory of the same weights.
//
//   ./hf_logits OUT.f32 TOKENS [train flags: the model's shape and --resume CHECKPOINT]
//
// TOKENS is a comma-separated list of at most seq-len ids. OUT.f32 gets one row of vocab
// fp32 logits per token: the logits after token i predict token i+1. The forward is the
// sampler's (runtime/train.h sample_text) on one rank: the embedding, every layer, the
// final norm and the head's row_logits, on one sequence.
#define TESTING
#include "train_gpt.c"

int main(int argc, char** argv) {
    if (argc < 3) fail("usage: %s OUT.f32 TOKENS [train flags]", argv[0]);
    static Args a;
    const char *out_path = argv[1], *list = argv[2];
    argv[2] = argv[0];
    parse_args(&a, argc - 2, argv + 2);  // the train flags, with the program's name in front
    ModelConfig* c = &a.cfg;
    args_derive(&a, 1);
    a.quiet = 1;
    char why[512];
    if (layout_check(c, 1, why)) fail("layout: %s", why);
    int *tokens = (int*)xcalloc(c->seq_len, sizeof(int)), n = 0;
    for (char* t = strtok(xstrprintf("%s", list), ","); t; t = strtok(NULL, ",")) {
        if (n == c->seq_len) fail("more than seq-len %d tokens", c->seq_len);
        long id = parse_long(t, "token");
        if (id < 0 || id >= c->vocab) fail("token %ld is outside the vocabulary of %d", id, c->vocab);
        tokens[n++] = (int)id;
    }
    MPI_Init(&argc, &argv);
    static Metrics met;
    metrics_init(&met, &a, 0, 1, 1e12, "hf_logits");
    static Model m;
    model_init(&m, &a, &met);
    if (a.import_hf) hf_import(a.import_hf, &m.L, &m.P, c, m.params);
    if (a.resume) ckpt_resume(&m.L, &m.P, c, &a, m.params, m.m_state, m.v_state, m.opt_lo, m.opt_hi);

    Slot* s = slot_get(&m, 0, 0);
    Chunk* ch = &m.chunks[0];
    embed_forward(&m, s->x[0], window_tokens(&m, tokens, m.T), 1);
    for (int i = 0; i < ch->n_layers; i++)
        layer_forward(&m, ch->layer0 + i, acts_of(&m, s, i), s->x[i], s->x[i + 1], 1);
    head_take(&m, 0, s);
    norm_forward(&m, s->head->lnf, s->head->lnf_mean, s->head->lnf_rstd, s->x[ch->n_layers], m.w.lnfw, m.w.lnfb, 1);
    float* row = (float*)xmalloc(sizeof(float) * c->vocab_padded);
    FILE* f = fopen(out_path, "wb");
    if (!f) fail("cannot write %s: %s", out_path, strerror(errno));
    for (int t = 0; t < n; t++) {
        row_logits(&m, s->head->lnf + (size_t)t * m.C, row);
        if (fwrite(row, sizeof(float), c->vocab, f) != (size_t)c->vocab) fail("write failed: %s", strerror(errno));
    }
    if (fclose(f)) fail("write failed: %s", strerror(errno));
    head_give(&m, 0, s);
    slot_put(&m, 0, s);
    MPI_Finalize();
    return 0;
}
