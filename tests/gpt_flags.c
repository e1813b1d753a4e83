// tests/gpt_flags.c: test_gpt's flag parsing (args.h's table) and layout checks.
// Included by tests/test_gpt.c after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// 8. Flag parsing; 9. layout checks.

typedef struct { const char* flags; } FlagsCtx;
static void parse_child(void* p) { new_args(((FlagsCtx*)p)->flags); }

// Every row of args.h's table: the ends of an integer's or number's range accepted and one past
// them refused with the row's words, each of a choice's names accepted and another refused; the
// planner's rows (planner=1) are exactly SIZE_FLAGS.
// Parsing `flags` (in a child) exits 1 with an error line that contains `want`.
static int flags_refused(const char* flags, const char* want) {
    char err[4096];
    FlagsCtx fc = {flags};
    return run_child(parse_child, &fc, err, sizeof(err)) == 1 && strstr(err, want);
}
static void test_flag_table(void) {
    char bad_range[512] = "", bad_choice[512] = "", flags[256], want[128];
    int n_ranges = 0, n_choices = 0, planner_ok = 1;
    for (int i = 0; i < N_FLAGS; i++) {
        const Flag* f = &FLAGS[i];
        int in_size = f >= SIZE_FLAGS && f < SIZE_FLAGS + N_SIZE_FLAGS;
        planner_ok &= f->planner == in_size;
        int is_int = f->type == FLAG_INT && f->hi < (1L << 31);  // --seed has no upper end
        if (is_int || f->type == FLAG_NUM) {
            char at[4][64];  // the ends (other rules may refuse them), then one past each
            if (is_int) {
                snprintf(want, sizeof(want), "%s must be in [%ld, %ld]", f->flag, f->lo, f->hi);
                snprintf(at[0], 64, "%ld", f->lo), snprintf(at[1], 64, "%ld", f->hi);
                snprintf(at[2], 64, "%ld", f->lo - 1), snprintf(at[3], 64, "%ld", f->hi + 1);
            } else {
                snprintf(want, sizeof(want), "%s must be in", f->flag);
                snprintf(at[0], 64, "%.17g", f->min), snprintf(at[1], 64, "%.17g", f->max);
                snprintf(at[2], 64, "%.17g", f->min - 1), snprintf(at[3], 64, "%.17g", f->max * 2 + 1);
            }
            for (int k = 0; k < 4; k++) {
                snprintf(flags, sizeof(flags), "%s %s", f->flag, at[k]);
                if (flags_refused(flags, want) != (k >= 2) && !bad_range[0])
                    snprintf(bad_range, sizeof(bad_range), "'%s' %s", flags,
                             k < 2 ? "refused by its range" : "not refused");
            }
            n_ranges++;
        } else if (f->type == FLAG_CHOICE) {
            char names[128];
            snprintf(names, sizeof(names), "%s", f->value);
            for (char* name = strtok(names, "|"); name; name = strtok(NULL, "|")) {
                snprintf(flags, sizeof(flags), "%s %s", f->flag, name);
                if (!strcmp(f->flag, "--cp-kind") && !strcmp(name, "2d")) strcat(flags, " --cp-ulysses 1");
                if (!strcmp(f->flag, "--reshard-after-forward")) strcat(flags, " --zero 3");
                Args* a = new_args(flags);
                if (*(int*)((char*)a + f->at) != choice_index(f->value, name) && !bad_choice[0])
                    snprintf(bad_choice, sizeof(bad_choice), "%s: stored %d", flags, *(int*)((char*)a + f->at));
            }
            snprintf(flags, sizeof(flags), "%s none-of-these", f->flag);
            snprintf(want, sizeof(want), "%s must be ", f->flag);
            if (!flags_refused(flags, want) && !bad_choice[0])
                snprintf(bad_choice, sizeof(bad_choice), "'%s' not refused", flags);
            n_choices++;
        }
    }
    check(!bad_range[0], "flags/table: each range's ends accepted, one past them refused naming the range",
          "%d flags%s%s", n_ranges, bad_range[0] ? ": " : "", bad_range);
    check(!bad_choice[0], "flags/table: each choice's names stored as their index, another name refused",
          "%d flags%s%s", n_choices, bad_choice[0] ? ": " : "", bad_choice);
    check(planner_ok && !strcmp(SIZE_FLAGS[SIZE_N_LAYER].flag, "--n-layer") &&
              !strcmp(SIZE_FLAGS[SIZE_CP_ULYSSES].flag, "--cp-ulysses"),
          "flags/table: the planner's rows are SIZE_FLAGS, --n-layer to --cp-ulysses", NULL);
}

static void test_flags(void) {
    check(new_args("--model llama3-8b")->cfg.rope_theta == 500000.0f && new_args("--model llama-7b")->cfg.rope_theta ==
              10000.0f && new_args("--model llama3-8b --rope-theta 1e6")->cfg.rope_theta == 1e6f,
          "flags/rope-theta: llama3-8b 500000 (Llama 3's), llama-7b 10000, --rope-theta overrides", NULL);
    Args* a = new_args(
        "--model tiny --n-layer 3 --d-model 32 --lr 2e-4 --steps 7 --micro-batch 3 --tp 2 --pp 3 --vpp 2 --sp "
        "--zero 1 --recompute selective --on-nan skip --seed 5 --schedule gpipe --ckpt-dir /x --resume auto");
    ModelConfig* c = &a->cfg;
    check(c->n_layer == 3 && c->d_model == 32 && c->d_ff == 128 && fabsf(c->lr - 2e-4f) < 1e-10f && c->steps == 7 &&
              c->micro_batch == 3 && c->tp == 2 && c->pp == 3 && c->vpp == 2 && c->sp && c->zero == 1 &&
              c->recompute == RECOMPUTE_SELECTIVE && a->on_nan_skip && c->seed == 5 && c->schedule == SCHED_GPIPE &&
              !strcmp(a->ckpt_dir, "/x") && !strcmp(a->resume, "auto") && c->n_head == 4 && c->seq_len == 32 &&
              c->vocab == 257 && c->vocab_padded == 384,
          "flags/good command line parsed (preset + overrides, d_ff follows d_model)", NULL);
    Args* d = new_args("");
    check(!strcmp(d->model, "small") && d->cfg.schedule == SCHED_1F1B && d->cfg.d_model == 128 && d->cfg.steps == 1500,
          "flags/defaults", NULL);
    Args* v = new_args("--vpp 2");
    check(v->cfg.schedule == SCHED_INTERLEAVED, "flags/--vpp > 1 defaults to interleaved", NULL);
    Args* l = new_args("--arch llama");
    check(!strcmp(l->model, "llama-small") && l->cfg.arch == ARCH_LLAMA && l->cfg.n_kv_head == 2 && l->cfg.d_ff == 384,
          "flags/--arch llama picks llama-small (GQA 4q/2kv, d_ff 384)", "d_ff %d", l->cfg.d_ff);
    struct { const char* flags; const char* want; } bad[] = {
        {"--steps abc", "--steps: expected an integer"},
        {"--steps 1e3", "--steps: expected an integer"},
        {"--steps 99999999999999999999", "--steps: 99999999999999999999 is out of range"},
        {"--lr -1", "--lr must be in"},
        {"--lr nan", "--lr: expected a number"},
        {"--lr 1e400", "--lr: 1e400 is out of range"},
        {"--lr abc", "--lr: expected a number"},
        {"--tp 0", "--tp must be in"},
        {"--vpp 65", "--vpp must be in"},
        {"--zero 4", "--zero must be in"},
        {"--micro-batch -2", "--micro-batch must be in"},
        {"--seed -1", "--seed must be >= 0"},
        {"--bogus 1", "unknown flag --bogus"},
        {"--steps", "flag --steps needs a value"},
        {"positional", "unexpected argument 'positional'"},
        {"--schedule zigzag", "--schedule must be"},
        {"--recompute some", "--recompute must be"},
        {"--on-nan ignore", "--on-nan must be"},
        {"--gelu-fusion yes", "--gelu-fusion must be on or off"},
        {"--weight-pass later", "--weight-pass must be immediate or deferred"},
        {"--weight-pass deferred --recompute full", "not with --recompute full"},
        {"--arch bert", "--arch must be"},
        {"--model gpt5", "unknown preset 'gpt5'"},
        {"--d-model 30 --n-head 4", "--d-model 30 is not divisible by --n-head 4"},
        {"--model llama-tiny --n-kv-head 3", "--n-head 4 is not divisible by --n-kv-head 3"},
        {"--model tiny --n-kv-head 2", "grouped-query attention needs --arch llama"},
        {"--model llama-tiny --d-model 12 --n-head 4", "even head size"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char name[160];
        snprintf(name, sizeof(name), "flags/'%s' rejected", bad[i].flags);
        FlagsCtx fc = {bad[i].flags};
        check_fails(name, parse_child, &fc, bad[i].want);
    }
    test_flag_table();
}

static Args* new_args(const char* flags);
static void new_args_child(void* flags) { new_args((const char*)flags); }
static void test_layout_check(void) {
    struct { const char* flags; int world; const char* want;
    } cases[] = {
        // want NULL: accepted
        {"--model tiny", 1, NULL},
        {"--model tiny --dp 2 --tp 2 --pp 2 --global-batch 64 --micro-batch 4 --sp --zero 2", 8, NULL},
        {"--model tiny --pp 2 --vpp 2 --micro-batch 2 --global-batch 4", 2, NULL},
        {"--model llama-tiny --tp 2", 2, NULL},
        {"--model tiny --tp 2", 4, "does not match the world"},
        {"--model tiny --tp 3", 3, "not divisible by tp 3"},
        {"--model llama-tiny --tp 4", 4, "n_kv_head 2 is not divisible by tp 4"},
        {"--model tiny --pp 4 --vpp 2 --micro-batch 1 --global-batch 4", 4, "every chunk needs a layer"},
        {"--model tiny --sp", 1, "--sp needs --tp > 1"},
        {"--model tiny --dp 2 --micro-batch 4 --global-batch 12", 2, "not divisible by dp 2 x micro-batch 4"},
        {"--model tiny --pp 4 --micro-batch 4 --global-batch 8", 4, "1F1B needs at least pp micro-batches"},
        {"--model tiny --pp 2 --vpp 2 --micro-batch 1 --global-batch 3", 2, "multiple of pp"},
        {"--model tiny --zero 1", 1, "needs dp x cp > 1"},
        {"--model tiny --tp 2 --sp --seq-len 33", 2, "not divisible by tp"},
        {"--model tiny --seq-len 1048576 --micro-batch 2048 --global-batch 2048", 1,
         "tokens per data-parallel rank per step, more than"},
        {"--model tiny --dp 2 --seq-len 1048576 --micro-batch 1024 --global-batch 2048", 2, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        Args* a = new_args(cases[i].flags);
        char why[512], name[200];
        const char* r = layout_check(&a->cfg, cases[i].world, why);
        snprintf(name, sizeof(name), "layout_check/'%s' on %d rank%s %s", cases[i].flags, cases[i].world,
                 cases[i].world > 1 ? "s" : "", cases[i].want ? "rejected" : "accepted");
        if (cases[i].want)
            check(r && strstr(r, cases[i].want), name, "got \"%s\", want \"%s\"", r ? r : "(accepted)", cases[i].want);
        else check(!r, name, "got \"%s\"", r ? r : "");
    }    // --micro-batch alone sets the global batch to dp x pp x micro-batch: in 64 bits, capped
    check_fails("layout_check/--micro-batch 2^20 x dp 4096 as the global batch refused", new_args_child,
                (void*)"--model tiny --dp 4096 --micro-batch 1048576", "more than 2^30");
}
