// runtime/run.h: everything before the model, shared by train_gpt.c (CPU) and train_gpt.cu
// (GPU): the batch defaults, the ranks' agreement on every setting, and run_setup (flags,
// the self-launch under mpirun, MPI, the layout check, data, tokenizer, every output).
#ifndef RUNTIME_H
#define RUNTIME_H

#include <omp.h>
#include "layout/args.h"
#include "runtime/ckpt.h"
#include "data/data.h"
#include "runtime/export_hf.h"
#include "layout/grid.h"
#include "base/launcher.h"
#include "layout/params.h"
#include "layout/schedule.h"

// ----------------------------------------------------------------------------
// Every rank must run with the same settings. Ranks started with other flags (an MPMD
// mpirun line, a wrapper script that differs per node) would corrupt memory (another
// width) or train replicas that silently drift apart (another --lr). Each setting travels
// as one 64-bit value (integers as they are, numbers by their bits, text by a hash) and one
// all-gather at start-up, before any other collective, compares them.

#define MAX_SETTINGS MAX_FLAGS
typedef enum { SETTING_INT, SETTING_NUM, SETTING_TEXT } SettingKind;
typedef struct { const char* flag; SettingKind kind; uint64_t value; const char* text; } Setting;
typedef struct { Setting s[MAX_SETTINGS]; int n; } Settings;

// The settings as parsed, in FLAGS' order: the rows with agree (args.h).
static void settings_of(const Args* a, Settings* st) {
    st->n = 0;
    for (int i = 0; i < N_FLAGS; i++) {
        const Flag* f = &FLAGS[i];
        if (f->agree == AGREE_NO) continue;
        const char* at = (const char*)a + f->at;
        Setting* s = &st->s[st->n++];
        s->flag = f->flag, s->kind = SETTING_INT, s->text = NULL;
        if (f->agree == AGREE_GIVEN && !a->given[i]) s->value = 0;  // not given: resolved from the layout later
        else if (f->type == FLAG_TEXT) {
            s->kind = SETTING_TEXT, s->text = *(const char* const*)at, s->value = 0;  // FNV-1a; 0 for a flag not given
            if (s->text) {
                s->value = 1469598103934665603ull;
                for (const char* p = s->text; *p; p++) s->value = (s->value ^ (unsigned char)*p) * 1099511628211ull;
            }
        } else if (f->type == FLAG_NUM) {
            double x = f->size == sizeof(float) ? *(const float*)at : *(const double*)at;
            s->kind = SETTING_NUM;
            memcpy(&s->value, &x, sizeof(x));
        } else if (f->size == sizeof(uint64_t)) memcpy(&s->value, at, sizeof(uint64_t));
        else s->value = (uint64_t)(long long)*(const int*)at;
    }
}

// A setting's value as a message shows it; text only this rank holds (another rank's is a hash).
static void setting_show(const Setting* s, uint64_t value, int own, char* out, size_t cap) {
    double x;
    memcpy(&x, &value, sizeof(x));
    if (s->kind == SETTING_INT) snprintf(out, cap, "%lld", (long long)value);
    else if (s->kind == SETTING_NUM) snprintf(out, cap, "%g", x);
    else if (!value) snprintf(out, cap, "none");
    else if (own) snprintf(out, cap, "'%.400s'", s->text);
    else snprintf(out, cap, "another value");
}

// Collective over the world: every rank's settings against rank 0's; at the first that
// differs, rank 0 says which in one line and every rank exits 1.
static void settings_agree(const Args* a, int rank, int world) {
    Settings mine;
    settings_of(a, &mine);
    int n = mine.n;
    uint64_t values[MAX_SETTINGS], *all = (uint64_t*)xmalloc(sizeof(uint64_t) * n * world);
    for (int i = 0; i < n; i++) values[i] = mine.s[i].value;
    mpiCheck(MPI_Allgather(values, n, MPI_UINT64_T, all, n, MPI_UINT64_T,
                           MPI_COMM_WORLD));  // comm: world all-gather of the settings
    for (int i = 0; i < n; i++)
        for (int r = 1; r < world; r++) {
            uint64_t theirs = all[(size_t)r * n + i];
            if (theirs == all[i]) continue;
            if (rank == 0) {
                char vocab_start[512], vr[512];
                setting_show(&mine.s[i], all[i], 1, vocab_start, sizeof(vocab_start));
                setting_show(&mine.s[i], theirs, 0, vr, sizeof(vr));
                print_error(
                    "ranks disagree on %s: rank 0 has %s, rank %d has %s (every rank must be started with the same "
                    "settings)",
                    mine.s[i].flag, vocab_start, r, vr);
            }
            MPI_Finalize();
            exit(1);
        }
    free(all);
}

// ----------------------------------------------------------------------------
// --doc-mask from the training data (data/data.h): auto is on when it holds end-of-text
// tokens; on without any is refused (every rank reads the same data: rank 0 says so, once).
// doc_note says which and why (the start-up table).
static void doc_mask_resolve(Args* a, const TokenStream* train, int rank) {
    int has = train->n_eot > 0;
    if (a->doc_mask == DOC_MASK_ON && !has) {
        if (rank == 0)
            print_error("--doc-mask on: %s has no end-of-text token (%s) to start documents; byte-level text has none "
                        "(an llm.c .bin shard has <|endoftext|>), or use --doc-mask off", train->source,
                        train->eot >= 0 ? xstrprintf("id %d", train->eot) : "none in this vocabulary");
        MPI_Finalize();
        exit(1);
    }
    a->doc_masked = a->doc_mask == DOC_MASK_ON || (a->doc_mask == DOC_MASK_AUTO && has);
    const char* why = a->doc_mask != DOC_MASK_AUTO ? "--doc-mask" : "auto";
    a->doc_note = a->doc_masked ? xstrprintf("masked (%s): %zu end-of-text tokens (id %d) start documents; positions "
                                             "restart at each", why, train->n_eot, train->eot)
                  : has ? xstrprintf("one stream (--doc-mask off): %zu end-of-text tokens not used", train->n_eot)
                        : xstrprintf("one stream (%s): no end-of-text token in the data%s", why,
                                     a->eot_note ? a->eot_note : "");
}

// --packing greedy|wlb: each stream's plan of one pass over its documents (layout/packing.h),
// in micro-batch units of --micro-batch sequences.
static void packing_plans(const Args* a, TokenStream* train, TokenStream* val) {
    const ModelConfig* c = &a->cfg;
    TokenStream* streams[2] = {train, val};
    for (int i = 0; i < 2 && a->packing != PACK_CONCAT; i++) {
        if (streams[i]->n_tokens < 2) continue;  // no validation data (--eval-every 0 with a tiny stream)
        streams[i]->plan = (DocPlan*)xmalloc(sizeof(DocPlan));
        plan_build(streams[i]->plan, streams[i]->tokens, streams[i]->n_tokens, a->eot, a->packing,
                   c->global_batch, c->micro_batch, c->seq_len);
    }
}

// --data docs:lognormal[:MEDIAN[:SIGMA]]: the built-in corpus cut into long-tailed documents.
// Its documents start at byte-level text's end-of-text, 256.
static void open_doc_corpus(TokenStream* ts, const char* spec, int vocab, double median, double sigma) {
    if (vocab <= EOT_TOKEN)
        data_fail("--data %s: documents need an end-of-text token: vocab >= 257 (got %d)", spec, vocab);
    make_builtin_corpus(ts, 2000000, 42);
    docs_mark(ts->tokens, ts->n_tokens, EOT_TOKEN, median, sigma, 42);
    ts->source = xstrprintf("%s (built-in corpus, 2000000 tokens, log-normal document lengths)", spec);
}

// Everything before the model: flags, self-launch under mpirun, MPI, the ranks' settings
// and the layout check (on every rank, before any allocation), data, tokenizer, the
// checkpoint --resume auto continues from, and every output (outputs_check).
typedef struct {
    Args args;
    TokenStream train, val;
    Tokenizer tk;
    char resume_path[PATH_CAP];  // the checkpoint --resume auto found; args.resume points here then
    int world, rank;
} Run;

// Every file this run reads and writes (files.h RunFiles): the data, tokenizer, checkpoint,
// llm.c weights, the --pp-costs trace, the files of --import-hf's directory and the tokenizer files --export-hf
// copies, the program's own file; the log, each rank's log, the trace, the llm.c export, each file --export-hf
// writes and --ckpt-dir's names. Registered on rank 0, where the outputs are written.
static void run_files(const Run* r, RunFiles* s) {
    const Args* a = &r->args;
    char path[PATH_CAP];
    files_input(s, "--tokenizer", a->tokenizer);
    files_input(s, "--import-llmc", a->import_llmc);
    files_input(s, "--pp-costs", a->pp_costs);
    if (a->resume) files_input(s, "--resume", a->resume), s->f[s->n - 1].spared = 1;
    for (int i = 0; a->import_hf && i < HF_IMPORT_N; i++)
        files_input(s, "--import-hf", path_format(path, "--import-hf", "%s/%s", a->import_hf, HF_IMPORT_FILES[i]));
    for (int i = 0; i < r->train.n_files; i++) files_input_read(s, "--data", &r->train.files[i]);
    for (int i = 0; i < r->val.n_files; i++) files_input_read(s, "--val-data", &r->val.files[i]);
    if (a->export_hf && a->tokenizer) hf_tokenizer_inputs(s, a->tokenizer);
    files_output(s, "--log", a->log);
    for (int rank = 0; a->log && a->log_ranks && rank < r->world; rank++)
        files_output(s, "--log-ranks", path_format(path, "--log-ranks", "%s.rank%d", a->log, rank));
    files_output(s, "--trace", a->trace);
    files_output(s, "--export-llmc", a->export_llmc);
    for (int i = 0; a->export_hf && i < HF_EXPORT_N; i++)
        files_output(s, "--export-hf", path_format(path, "--export-hf", "%s/%s", a->export_hf, HF_EXPORT_FILES[i]));
    if (a->ckpt_dir) files_output_dir(s, "--ckpt-dir", a->ckpt_dir, ckpt_dir_owns);
    files_std_streams(s);
    files_program(s);
}

// Every output, at start-up, before any step and before any is opened: first no output is
// an input or another output (run_files, files_check), then the directories the run makes
// (--export-hf's, --ckpt-dir: export_hf.h hf_export_prepare, ckpt.h ckpt_dir_prepare) are
// created, so that a log, trace or export inside one that does not exist yet (--ckpt-dir D
// --log D/log.jsonl) finds it, then each path fits, its directory takes a new file and nothing
// but a regular file sits where it goes (files.h output_check). The other ranks check their own
// --log-ranks files once rank 0 has made those directories.
static void outputs_check(const Run* r) {
    const Args* a = &r->args;
    char path[PATH_CAP], why[512];
    if (r->rank == 0) {
        RunFiles files = {0};
        run_files(r, &files);
        files_check(&files);
        files_free(&files);
        if (a->export_llmc && llmc_check(&a->cfg, why)) fail("--export-llmc %s: %s", a->export_llmc, why);
        if (a->export_hf) hf_export_prepare(a->export_hf, a->tokenizer);
        if (a->ckpt_dir) ckpt_dir_prepare(a);
        if (a->ckpt_dir && a->resume != r->resume_path) ckpt_dir_spare_others(a);  // (not --resume auto's)
        if (a->ckpt_dir && a->resume) ckpt_history_adopt(a);  // --ckpt-keep counts a job's earlier launches
        const char* flags[3] = {"--log", "--trace", "--export-llmc"};
        const char* paths[3] = {a->log, a->trace, a->export_llmc};
        for (int i = 0; i < 3; i++)
            if (paths[i]) output_check(paths[i], flags[i]);
    }
    if (a->log && a->log_ranks) {
        if (r->world > 1) mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
        output_check(path_format(path, "--log-ranks", "%s.rank%d", a->log, r->rank), "--log-ranks");
    }
}

// The run's end-of-text id (a->eot), from where it is known, never from the vocabulary's size
// (--vocab 50304 pads GPT-2's 50257; another tokenizer's id is another number): --eot, else the
// --tokenizer file's, else the data's (stream_open: 256 in byte-level text and in shards of ids
// <= 256, GPT-2's 50256 in llm.c's shards of GPT-2's ids, unknown past them); -1: none known, or
// outside the vocabulary. --eot is checked against what
// shows it to be an ordinary token: a byte of byte-level text, a piece of the tokenizer file other
// than its end-of-text, an id of GPT-2's in shards that hold GPT-2's end-of-text; in shards it
// must occur (else no document starts).
// Then each stream counts its documents.
static void eot_resolve(Args* a, TokenStream* train, TokenStream* val, Tokenizer* tk) {
    int vocab = a->cfg.vocab, n = a->eot, bytes = train->eot == EOT_TOKEN;
    if (flag_given(a, "--eot")) {
        if (n >= vocab) data_fail("--eot %d: outside the vocabulary of %d (ids 0 to %d)", n, vocab, vocab - 1);
        if (bytes && n < 256)
            data_fail("--eot %d: %s is byte-level text, where ids 0-255 are its bytes (ordinary tokens); its "
                      "end-of-text is 256 (leave --eot out)", n, train->source);
        if (tk->piece && n != tk->eot) {
            char shown[64];
            printable(tk->piece[n], shown, sizeof(shown));
            data_fail("--eot %d: the tokenizer %s names %d its end-of-text; %d is an ordinary token of it ('%s'): "
                      "leave --eot out", n, a->tokenizer, tk->eot, n, shown);
        }
        if (train->eot == GPT2_EOT && !tk->piece && n != GPT2_EOT) {  // llm.c shards of GPT-2's ids
            stream_count_docs(train, GPT2_EOT);
            if (train->n_eot)
                data_fail("--eot %d: %s holds GPT-2's end-of-text 50256 (%zu times), so its ids are GPT-2's, where "
                          "%d is an ordinary token; leave --eot out, or give another tokenizer's file (--tokenizer)",
                          n, train->source, train->n_eot, n);
        }
        stream_count_docs(train, n);
        if (!bytes && !train->n_eot)
            data_fail("--eot %d: %s holds no token %d, so no document would start (the id of another tokenizer?)",
                      n, train->source, n);
    } else {
        if (train->text && tk->piece && tk->eot < 256)  // as --eot: a byte of the text cannot start documents
            data_fail("--tokenizer %s: its end-of-text is id %d, but %s is byte-level text, where ids 0-255 are its "
                      "bytes (ordinary tokens): not this data's tokenizer", a->tokenizer, tk->eot, train->source);
        a->eot = tk->piece ? tk->eot : train->eot < vocab ? train->eot : -1;
    }
    if (a->eot < 0 && train->eot < 0)
        a->eot_note = " (ids past GPT-2's: no end-of-text id known; --eot ID or --tokenizer FILE)";
    stream_count_docs(train, a->eot);
    stream_count_docs(val, a->eot);
    tk->eot = a->eot;  // samples start from it
}

// The training and validation streams and the tokenizer, read on every rank alike; an error
// in them is data.h's data_fail.
static void read_inputs(Run* r) {
    const Args* a = &r->args;
    const ModelConfig* c = &a->cfg;
    double median, sigma;
    if (a->data && docs_spec(a->data, &median, &sigma, "--data"))
        open_doc_corpus(&r->train, a->data, c->vocab, median, sigma);
    else if (a->data) stream_open(&r->train, a->data, c->vocab, "--data");
    else {
        if (c->vocab < 256)
            data_fail("the built-in corpus is byte-level text and needs vocab >= 256 (got %d; --data for other "
                      "tokens)", c->vocab);
        make_builtin_corpus(&r->train, 2000000, 42);
    }
    if (a->val_data) stream_open(&r->val, a->val_data, c->vocab, "--val-data");
    else stream_split(&r->train, &r->val, 0.05);
    for (int i = 0; i < r->val.n_files; i++)  // (a file of both: a validation loss of tokens the model trains on)
        for (int j = 0; j < r->train.n_files; j++)
            if (file_id_same(r->val.files[i].id, r->train.files[j].id))
                data_fail("--val-data %s%s%s is also training data (--data %s): its validation loss would be of "
                          "tokens the model trains on; give other data, or leave --val-data out (the last 5%% of "
                          "--data is held out)", a->val_data,
                          strcmp(a->val_data, r->val.files[i].path) ? ": its file " : "",
                          strcmp(a->val_data, r->val.files[i].path) ? r->val.files[i].path : "", a->data);
    if ((r->train.eot == EOT_TOKEN) != (r->val.eot == EOT_TOKEN)) {  // (data.h stream_open: the ids' kind)
        const TokenStream* s[2] = {&r->train, &r->val};
        const char* kind[2];
        for (int i = 0; i < 2; i++)
            kind[i] = s[i]->eot == EOT_TOKEN ? "byte-level" : s[i]->eot == GPT2_EOT ? "GPT-2's" : "past GPT-2's";
        data_fail("--val-data %s holds %s ids, --data %s %s: the validation loss would be of another tokenizer's "
                  "tokens", r->val.source, kind[1], r->train.source, kind[0]);
    }
    if (stream_n_seq(&r->train, c->seq_len) < 1)
        data_fail("--data %s: fewer than seq-len+1 = %d tokens", r->train.source, c->seq_len + 1);
    if (a->eval_every && stream_n_seq(&r->val, c->seq_len) < 1)
        data_fail("validation data %s: fewer than seq-len+1 tokens", r->val.source);
    tokenizer_load(&r->tk, a->tokenizer, c->vocab);
    eot_resolve(&r->args, &r->train, &r->val, &r->tk);
}

// After read_inputs, collective over the world: the lowest rank that met an error in the
// data prints it, the one line of the run, and every rank exits 1 (each met it, as a rule:
// the ranks read the same files; one that did not still learns of it here, not in a hang).
static void data_errors_agree(int rank, int world) {
    int mine = data_error_msg[0] ? rank : world, first = mine;
    if (world > 1)  // comm: world all-reduce (min) of the ranks that met an error
        mpiCheck(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == world) return;
    if (rank == first) print_error("%s", data_error_msg);
    MPI_Finalize();
    exit(1);
}

// A layout error's words, and where it says the model does not split over --tp the values it splits
// over ("n_head 4 is not divisible by tp 3 (this model splits over --tp 1, 2, 4)").
static const char* layout_why(const ModelConfig* c, char* why) {
    char probe[WHY_CAP], list[128] = "";
    if (!tp_check(c, c->tp, probe) || strcmp(probe, why)) return why;
    for (int tp = 1, n = 0; tp <= c->n_head && n < 12; tp++)
        if (!tp_check(c, tp, probe))
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", n++ ? ", " : "", tp);
    snprintf(why + strlen(why), WHY_CAP - strlen(why), " (this model splits over --tp %s)", list);
    return why;
}

static void run_setup(Run* r, int argc, char** argv) {
    parse_args(&r->args, argc, argv);
    ModelConfig* c = &r->args.cfg;
    char why[WHY_CAP];
    FlagRules rules = flag_rules(&r->args);
    int launched = under_launcher();
    if (!launched) {
        // Started by hand: the world is the layout. Check it here, once, then start the
        // ranks under mpirun if there is more than one.
        long long need = (long long)(c->dp ? c->dp : 1) * c->tp * c->pp * c->cp;  // layout_check caps it
        args_derive(&r->args, need > INT_MAX ? INT_MAX : (int)need);  // dp, the batch (layout/args.h)
        if (config_check(c, &rules, need > INT_MAX ? INT_MAX : (int)need, why)) fail("layout: %s", layout_why(c, why));
        if (need > 1) files_std_streams_export(), relaunch_under_mpirun((int)need, argc, argv);
        // one rank: Open MPI's singleton starts no daemon (it would serve only MPI_Comm_spawn,
        // never called here): start-up 0.2-0.4 s sooner (measured, Open MPI 4.1)
        setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
    }
    ckpt_install_signals();  // from here a stop signal ends the run cleanly (exit 128 + the signal)
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &r->world);
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    if (r->world > 1) {  // the watchdog from the first collective on: a rank stopped or killed ends the job
        watchdog_start(r->args.timeout_s, r->rank);
        watchdog_phase = "at start-up, comparing the ranks' settings (the first collective): a rank did not reach it";
        settings_agree(&r->args, r->rank, r->world);
        fail_rank = r->rank, fail_hook = mpi_fail_hook;
    }
    // a user's own mpirun (the self-launcher shares the cores out): ranks x threads past the cores
    const char* local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int on_host = local ? atoi(local) : r->world, threads = omp_get_max_threads();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (r->rank == 0 && r->world > 1 && !getenv("OMP_NUM_THREADS") && (long)on_host * threads > cores)
        fprintf(stderr, "warning: OMP_NUM_THREADS is not set: %d ranks on this host x %d OpenMP threads each on %ld "
                "cores; start them with -x OMP_NUM_THREADS=%ld (mpirun) or --cpus-per-task (srun)\n", on_host, threads,
                cores, cores / on_host > 1 ? cores / on_host : 1);
    args_derive(&r->args, r->world);  // dp, the batch (layout/args.h)
    if (config_check(c, &rules, r->world, why)) {  // dp known now
        if (r->rank == 0) print_error("layout: %s", layout_why(c, why));
        MPI_Finalize();
        exit(1);
    }
    int *tag_ub, flag, n_micro = c->global_batch / (c->dp * c->micro_batch);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    long long max_tag = 2LL * n_micro * c->pp * c->vpp - 1;  // p2p_tag of the last micro-batch's last chunk
    if (flag && max_tag > *tag_ub)
        fail("layout: %d micro-batches x %d chunks need message tags up to %lld, past MPI's %d; lower --global-batch",
             n_micro, c->pp * c->vpp, max_tag, *tag_ub);
    Args* a = &r->args;
    if (r->rank == 0 && a->ckpt_dir)
        ckpt_dir_lock(a->ckpt_dir);  // another run's directory: refused before reading anything
    jmp_buf data_error;  // data.h's data_fail comes back here
    watchdog_pause();  // (each phase below that may take long: the same work on every rank)
    if (!setjmp(data_error)) {
        data_error_at = &data_error;
        read_inputs(r);
    }
    data_error_at = NULL;
    watchdog_resume("at start-up, after reading the data, waiting for the other ranks to read it: a rank died or "
                    "hangs there");
    data_errors_agree(r->rank, r->world);
    doc_mask_resolve(a, &r->train, r->rank);
    watchdog_pause();
    packing_plans(a, &r->train, &r->val);
    watchdog_resume("at start-up, after the --packing plan, waiting for the other ranks' plans: a rank died or hangs "
                    "there");
    if (a->resume && !strcmp(a->resume, "auto")) {  // before outputs_check creates --ckpt-dir
        if (!a->ckpt_dir) fail("--resume auto needs --ckpt-dir");
        watchdog_pause();
        ckpt_find_latest(a->ckpt_dir, r->resume_path, r->rank == 0);
        watchdog_resume("at start-up, after finding the checkpoint to resume (--resume auto), waiting for the other "
                        "ranks: a rank died or hangs there");
        a->resume = r->resume_path[0] ? r->resume_path : NULL;  // none yet: a fresh start
        const char* import = a->import_hf ? "--import-hf" : a->import_llmc ? "--import-llmc" : NULL;
        if (a->resume && import && r->rank == 0)  // the import gave a job's first launch its weights
            printf("resume: %s is not read: the run continues from its checkpoint\n", import);
        if (a->resume) a->import_hf = a->import_llmc = NULL;
    }
    outputs_check(r);
}

#endif
