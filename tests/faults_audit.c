// tests/faults_audit.c: test_faults' cases of the seventh session's adversarial audit of the trainer's inputs and
// outputs (a hostile or careless user's sweep of checkpoints, data, outputs and flags after the earlier rounds): a
// --ckpt-dir whose LOCK is a file of the user's (a --data named LOCK there, or a hard link to one: the pid the lock
// writes truncated it before any other check ran); a file or directory flag given an empty value (--tokenizer ''
// trained without a word, as if the flag were not given); a --val-data that is (or whose glob holds) a file --data
// reads (its validation loss was of training tokens); an output onto the program's own file (--trace replaced the
// binary). Each asserts the whole first error line. Run through
// ./train and ./train_asan. Included by tests/test_faults.c after faults_bad_inputs.c (its bad_run and BAD); not
// built alone.

#define AUD BAD "/audit"

// Under the self-launcher: the run's processes left once it has returned (tests/faults_polish.c LEFT), the wait for
// its first checkpoint
#define AUD_LEFT "$(grep -l -s -a LAUNCHER_MARK=$$ /proc/[0-9]*/environ | wc -l)"
#define AUD_AFTER_CKPT "for i in $(seq 600); do test -s $d/LATEST && break; sleep 0.1; done; "

static const BadRun AUDIT_CASES[] = {
    // The launcher told its ranks by their program file: ranks running a ./train rebuilt before mpirun started them
    // (here: the launcher's argv[0] a copy, which mpirun runs) were not its ranks; with mpirun killed it did not
    // stop them ('mpirun ended by signal 9 before its 2 ranks' missing) and took them for what else mpirun left
    // ('launcher: 2 processes mpirun left ... stopping them'). Now ranks are mpirun's children by process id.
    // A rank stopped (SIGSTOP) when its mpirun is killed: it takes neither the launcher's stop nor Open MPI's abort,
    // and the launcher waited for it for ever (killed by the suite's timeout after 120 s). Now it is killed once
    // stopped for 4 s, with a line; the launcher exits 137 (mpirun's end) and leaves nothing running.
    {{"launcher_kills_rank_stopped_after_mpirun_tp2",
      "bash -c 'd=" AUD "/stopped; kids() { cat /proc/$1/task/*/children; }; LAUNCHER_MARK=$$ {train} --tp 2 "
      "--steps 1000 --ckpt-dir $d --ckpt-every 1 > /dev/null 2> $d.err & " AUD_AFTER_CKPT "m=$(kids $!); "
      "r=$(kids $m | tr \" \" \"\\n\" | grep . | head -1); kill -STOP $r; kill -KILL $m; wait $!; "
      "echo exit $? left " AUD_LEFT "'",
      "exit 137 left 0", 0},
     "rm -rf " AUD "/stopped*",
     "grep -q 'launcher: rank process [0-9]* stayed stopped (SIGSTOP) 4 s after mpirun ended: killing it (SIGKILL)' "
     AUD "/stopped.err"},
    {{"launcher_ranks_of_rebuilt_program_tp2",
      "bash -c 'd=" AUD "/rebuilt; set -- {train}; b=$1; shift; cp $b $d.bin; (export LAUNCHER_MARK=$$; exec -a $d.bin "
      "$b \"$@\" --tp 2 --steps 1000 --ckpt-dir $d --ckpt-every 1 > /dev/null 2> $d.err) & " AUD_AFTER_CKPT
      "kill -KILL $(cat /proc/$!/task/$!/children); wait $!; echo exit $? left " AUD_LEFT "'",
      "exit 137 left 0", 0},
     "rm -rf " AUD "/rebuilt*",
     "grep -q 'mpirun ended by signal 9 before its 2 ranks' " AUD "/rebuilt.err && ! grep -q 'processes mpirun left' "
     AUD "/rebuilt.err"},
    // a file of the user's under the name LOCK: refused before the lock's pid is written into it, the file unchanged
    {{"audit_ckpt_dir_lock_is_data", "--steps 1 --data " AUD "/ckl/LOCK --ckpt-dir " AUD "/ckl",
      "error: --ckpt-dir " AUD "/ckl: " AUD "/ckl/LOCK holds 4000 bytes that are not a process id, so it is not this "
      "program's lock file (a file of yours?): move it", 1},
     "rm -rf " AUD "/ckl && mkdir -p " AUD "/ckl && cp " BAD "/text_ok.txt " AUD "/ckl/LOCK",
     "cmp -s " BAD "/text_ok.txt " AUD "/ckl/LOCK"},
    {{"audit_ckpt_dir_lock_hard_link", "--steps 1 --ckpt-dir " AUD "/ckh",
      "error: --ckpt-dir " AUD "/ckh: " AUD "/ckh/LOCK has 2 names (hard links), so it is not this program's lock "
      "file: move it", 1},
     "rm -rf " AUD "/ckh && mkdir -p " AUD "/ckh && cp " BAD "/text_ok.txt " AUD "/mine.txt && ln " AUD "/mine.txt " AUD
     "/ckh/LOCK",
     "cmp -s " BAD "/text_ok.txt " AUD "/mine.txt"},
    // an empty LOCK (a crash before the pid was written) is the lock's own: taken
    {{"audit_ckpt_dir_lock_empty", "--steps 1 --ckpt-dir " AUD "/cke", "checkpoint: " AUD "/cke/ckpt_00000001.bin", 0},
     "rm -rf " AUD "/cke && mkdir -p " AUD "/cke && : > " AUD "/cke/LOCK", NULL},
    // an empty value for a file or directory: refused (--tokenizer '' was taken as no tokenizer, without a word)
    {{"audit_flag_empty_tokenizer", "--steps 1 --tokenizer ''",
      "error: --tokenizer: empty (expected FILE; leave the flag out for its default)", 1}, NULL, NULL},
    {{"audit_flag_empty_ckpt_dir", "--steps 1 --ckpt-dir=", "error: --ckpt-dir: empty (expected DIR; leave the flag "
      "out for its default)", 1}, NULL, NULL},
    // validation data that is training data: a validation loss of tokens the model trains on (it was shown as one)
    {{"audit_val_data_is_data", "--steps 1 --data " BAD "/text_ok.txt --val-data " BAD "/./text_ok.txt",
      "error: --val-data " BAD "/./text_ok.txt is also training data (--data " BAD "/text_ok.txt): its validation "
      "loss would be of tokens the model trains on; give other data, or leave --val-data out (the last 5% of --data "
      "is held out)", 1}, NULL, NULL},
    {{"audit_val_data_glob_holds_data_tp2", "--tp 2 --steps 1 --data " AUD "/v/t.txt --val-data '" AUD "/v/*.txt'",
      "error: [rank 0] --val-data " AUD "/v/*.txt: its file " AUD "/v/t.txt is also training data (--data " AUD
      "/v/t.txt)", 1},
     "mkdir -p " AUD "/v && cp " BAD "/text_ok.txt " AUD "/v/t.txt && cp " BAD "/text_ok.txt " AUD "/v/u.txt", NULL},
    // a run that would save over checkpoints of another: a requeue without --resume auto (it started again at
    // step 0 and replaced the earlier run's checkpoints one by one as it reached their steps), a rewind from an
    // older checkpoint over the later ones; refused at start-up, every file unchanged. --resume auto goes on.
    {{"audit_ckpt_fresh_over_earlier_run", "--steps 3 --seed 5 --ckpt-dir " AUD "/ckr",
      "error: --ckpt-dir " AUD "/ckr holds checkpoints of an earlier run (ckpt_00000002.bin, the newest, and 1 more): "
      "this run starts at step 0 and would replace them or point LATEST behind them; --resume auto continues that "
      "run, or give another --ckpt-dir", 1},
     "rm -rf " AUD "/ckr " AUD "/ckr_copy && " TRAIN "--steps 2 --ckpt-every 1 --ckpt-dir " AUD "/ckr > /dev/null 2>&1 "
     "&& cp -r " AUD "/ckr " AUD "/ckr_copy",
     "diff -r -x LOCK " AUD "/ckr " AUD "/ckr_copy"},
    {{"audit_ckpt_rewind_over_later_tp2", "--tp 2 --steps 3 --lr 1e-3 --ckpt-dir " AUD "/ckw --resume " AUD
      "/ckw/ckpt_00000001.bin",
      "error: [rank 0] --ckpt-dir " AUD "/ckw holds checkpoints past step 1, the one --resume gives "
      "(ckpt_00000002.bin): this run would replace them or point LATEST behind them; move them, or give another "
      "--ckpt-dir", 1},
     "rm -rf " AUD "/ckw " AUD "/ckw_copy && " TRAIN "--steps 2 --ckpt-every 1 --ckpt-dir " AUD "/ckw > /dev/null 2>&1 "
     "&& cp -r " AUD "/ckw " AUD "/ckw_copy",
     "diff -r -x LOCK " AUD "/ckw " AUD "/ckw_copy"},
    // one that stops short of them: its save would point LATEST behind them, and --resume auto from there
    // would replace them (it was let run: ckpt_00000005.bin of the earlier run lost at the next launch)
    {{"audit_ckpt_fresh_below_earlier_run", "--steps 1 --ckpt-dir " AUD "/ckb",
      "error: --ckpt-dir " AUD "/ckb holds checkpoints of an earlier run (ckpt_00000005.bin): this run starts at "
      "step 0 and would replace them or point LATEST behind them; --resume auto continues that run, or give "
      "another --ckpt-dir", 1},
     "rm -rf " AUD "/ckb && mkdir -p " AUD "/ckb && cp " BAD "/good/ckpt_00000001.bin " AUD "/ckb/ckpt_00000005.bin",
     "cmp -s " BAD "/good/ckpt_00000001.bin " AUD "/ckb/ckpt_00000005.bin && ! ls " AUD "/ckb/ckpt_00000001.bin"},
    // an output onto the program's own file (a copy of it here: "$0" is the binary under test), which the run
    // replaced (--trace prog: the trace where the binary was; --plan-csv: faults_plan_hostile.c)
    {{"audit_trace_on_the_program",
      "sh -c 'cp \"$0\" " AUD "/prog && exec " AUD "/prog \"$@\" --steps 1 --trace " AUD "/prog' {train}",
      "error: --trace " AUD "/prog: is a file this run reads (the program itself); it is not overwritten", 1},
     "rm -f " AUD "/prog", "cmp -s ./train " AUD "/prog"},
    {{"audit_ckpt_resume_auto_goes_on", "--steps 3 --ckpt-dir " AUD "/cka --resume auto", "resumed from " AUD
      "/cka/ckpt_00000002.bin", 0},
     "rm -rf " AUD "/cka && " TRAIN "--steps 2 --ckpt-every 1 --ckpt-dir " AUD "/cka > /dev/null 2>&1", NULL},
};

// A stop while --export-hf (or --export-llmc) writes the final weights, of a wider model (its export takes seconds)
// over an earlier export of the tiny one: exit 128 + sig within seconds, one line naming the export, the earlier
// files unchanged, no temporary left (the stop was ignored: the export finished and the run exited 0). Under the
// self-launcher too (each tensor is gathered from every rank). Signalled once the model's temporary appears.
static void stop_during_export(const char* tag, const char* layout, const char* flag, int sig) {
    char dir[256], out[300], log[300], cmd[4096], said[512], ex[300];
    run_dir(tag, dir, out, log);
    int hf = !strcmp(flag, "--export-hf");
    snprintf(ex, sizeof(ex), "%s/%s", dir, hf ? "ex" : "ex.bin");
    int rc0 = sh(TRAIN "--steps 0 %s %s > %s/first.txt 2>&1 && cp -r %s %s/copy", flag, ex, dir, ex, dir);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train %s %s %s %s",
             flags_with("--steps 0 --d-model 768 --n-layer 6 --n-head 12"), layout, flag, ex);
    pid_t pid = spawn(cmd, out);
    double t0 = now_s();
    int reached = 0;
    while (!reached && now_s() - t0 < 120 && still_running(pid)) {
        usleep(5000);
        reached = sh("ls %s%s | grep -q '[.]tmp[.]train-'", ex, hf ? "" : "* 2>/dev/null") == 0;
    }
    double dt;
    int rc = signal_and_wait(pid, sig, 60, &dt);
    snprintf(said, sizeof(said), "stopped by signal %d during %s: %s not written (%s as %s)", sig, flag, ex,
             hf ? "its files are" : "a file there is", hf ? "they were" : "it was");
    int kept = sh("diff -r %s %s/copy > /dev/null && ! ls %s%s 2>/dev/null | grep -q '[.]tmp[.]'", ex, dir, ex,
                  hf ? "" : "*") == 0;
    check(rc0 == 0 && reached && rc == 128 + sig && dt < 10 && file_has(out, said) && kept, tag,
          "signal %d once the export's temporary appeared: exit %d after %.1f s, '%s' %s, the earlier export %s", sig,
          rc, dt, said, file_has(out, said) ? "printed" : "missing", kept ? "kept, no temporary" : "CHANGED");
}

// A stop while the weights are initialized (a model of 150M parameters: seconds of init_params, the log created
// just before): exit 128 + sig within a tensor's init, one line naming the phase (it waited for the whole
// initialization, then said "at start-up"; llama-7b's takes minutes on a CPU). Under the self-launcher, which
// passes the stop to every rank, the line is rank 0's alone (each rank printed it).
static void stop_during_init(const char* tag, const char* layout, int sig) {
    char dir[256], out[300], log[300], cmd[4096], said[128];
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train %s %s --log %s",
             flags_with("--steps 3 --d-model 1024 --n-layer 12 --n-head 16 --vocab 8192"), layout, log);
    int reached;
    double dt;
    int rc = signal_once_log_created(cmd, out, log, sig, &reached, &dt);
    snprintf(said, sizeof(said), "stopped by signal %d while initializing the weights", sig);
    int once = sh("test $(grep -c '%s' %s) = 1", said, out) == 0;
    double limit = *layout ? 3.0 : 1.5;  // (the launcher's mpirun ends in a second)
    check(reached && rc == 128 + sig && dt < limit && once, tag,
          "signal %d once the log was created: exit %d after %.1f s (at most %.1f), '%s' %s", sig, rc, dt, limit, said,
          once ? "printed once" : file_has(out, said) ? "PRINTED MORE THAN ONCE" : "missing");
}

// A /proc/meminfo figure in bytes ("MemTotal", "MemAvailable"), -1 when missing.
#define GIB 1073741824.0
static double meminfo_bytes(const char* key) {
    FILE* f = fopen("/proc/meminfo", "r");
    char line[256], name[64];
    double kib = -1, v;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "%63[^:]: %lf kB", name, &v) == 2 && !strcmp(name, key)) kib = v;
    if (f) fclose(f);
    return kib < 0 ? -1 : kib * 1024;
}

// A run whose buffers pass this host's memory (the OOM killer ended it mid-allocation, without a word): refused
// at start-up, in under a second, with one line of its need and what is available (MemAvailable, or the memory
// cgroup's headroom where less); under the self-launcher the need of both ranks. The same shape with layers for 0.8
// of what is available starts: stopped (SIGTERM once its log appears)
// while initializing the weights, past the check. Sized by this machine: the first at 2 x MemTotal of weights,
// gradients and AdamW's m and v (16 B a parameter, 12 d^2 parameters a layer), the second by the refusal's bytes
// a layer (an upper bound: the embedding and the rest counted in).
static void host_memory(const char* bin) {
    char tag[64], dir[256], out[300], log[300], cmd[4096], args[256], line[512] = "";
    const char* pre = strstr(bin, "asan") ? "asan_" : "bad_";
    snprintf(tag, sizeof(tag), "%shost_memory_past", pre);
    // (the three go together: the later two are sized by the first's line)
    if (bad_filter && !strstr("host_memory_past_launcher_tp2 host_memory_under_starts", bad_filter)) return;
    double total = meminfo_bytes("MemTotal"), need = 0, each = 0, avail = 0;
    int d = 2048, layers = (int)(2 * total / (16.0 * 12 * d * d)) + 1, ranks = 0, n_error = 0;
    run_dir(tag, dir, out, log);
    snprintf(args, sizeof(args), "--steps 1 --d-model %d --n-head 16 --n-layer %d", d, layers);
    snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 %s %s", bin, flags_with(args));
    double t0 = now_s();
    int rc = run_to_file(cmd, out), fast = now_s() - t0 < 1;
    FILE* f = fopen(out, "r");
    while (f && fgets(line, sizeof(line), f) && strncmp(line, "error:", 6)) {}
    if (f) fclose(f);
    n_error = sh("test $(grep -c '^error:' %s) = 1", out) == 0;
    int parsed = sscanf(line, "error: this run needs %lf GiB of host memory on this machine (%d rank x %lf GiB), %lf "
                        "GiB available (", &need, &ranks, &each, &avail) == 4;
    check(rc == 1 && n_error && parsed && fast && ranks == 1 && need * GIB > 2 * total, tag,
          "%d layers of d %d: exit %d after %.2f s (at most 1), '%.*s', need %.1f GiB (more than 2 x MemTotal %.1f)",
          layers, d, rc, now_s() - t0, (int)strcspn(line, "\n"), line, need, total / GIB);

    snprintf(tag, sizeof(tag), "%shost_memory_past_launcher_tp2", pre);
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 %s %s --tp 2", bin, flags_with(args));
    rc = run_to_file(cmd, out);
    double need2 = 0, each2 = 0;
    n_error = sh("test $(grep -c '^error:' %s) = 1", out) == 0;
    f = fopen(out, "r");
    while (f && fgets(line, sizeof(line), f) && strncmp(line, "error:", 6)) {}
    if (f) fclose(f);
    parsed = sscanf(line, "error: [rank 0] this run needs %lf GiB of host memory on this machine (%d ranks x %lf GiB)",
                    &need2, &ranks, &each2) == 3;
    check(rc == 1 && n_error && parsed && ranks == 2 && fabs(need2 - 2 * each2) < 0.11 && need2 > need, tag,
          "the same at --tp 2: exit %d, '%.*s' (the sum of 2 ranks, each over half of one rank's %.1f GiB)", rc,
          (int)strcspn(line, "\n"), line, need);

    snprintf(tag, sizeof(tag), "%shost_memory_under_starts", pre);
    run_dir(tag, dir, out, log);
    int under = parsed && need > 0 ? (int)(0.8 * avail / (need / layers)) : 0;
    snprintf(args, sizeof(args), "--steps 1 --d-model %d --n-head 16 --n-layer %d", d, under);
    snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 %s %s --log %s", bin, flags_with(args),
             log);
    int reached = 0;
    double dt = 0;
    rc = under > 0 ? signal_once_log_created(cmd, out, log, SIGTERM, &reached, &dt) : -1;
    const char* said = "stopped by signal 15 while initializing the weights";
    check(reached && rc == 128 + SIGTERM && file_has(out, said) && !file_has(out, "error:"), tag,
          "%d layers (0.8 of the %.1f GiB available): exit %d, '%s' %s%s", under, avail, rc, said,
          file_has(out, said) ? "printed" : "missing", file_has(out, "error:") ? ", AN ERROR LINE" : "");
}

// A stop sent to a plain `mpirun -np 2` (not the self-launcher) while the weights are initialized: mpirun passes
// SIGTERM to every rank and ends the job at the first rank's exit, so each rank said its line, or none did when
// mpirun killed rank 0 mid-tensor (1 of 6 runs). Now rank 0 says it, once, in each of 3 runs (the other rank waits
// to be ended); ended within 5 s.
static void stop_plain_mpirun(const char* bin) {
    char tag[64], dir[256], out[300], log[300], cmd[4096], said[128];
    snprintf(tag, sizeof(tag), "%sstop_plain_mpirun_tp2", strstr(bin, "asan") ? "asan_" : "bad_");
    if (bad_filter && !strstr(tag, bad_filter)) return;
    run_dir(tag, dir, out, log);
    snprintf(said, sizeof(said), "stopped by signal %d while initializing the weights", SIGTERM);
    int once = 0, runs = 3, rc = 0, reached = 0;
    double dt = 0, slowest = 0;
    for (int i = 0; i < runs; i++) {
        sh("rm -f %s", log);
        snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 mpirun --oversubscribe "
                 "--allow-run-as-root --bind-to none -np 2 %s %s --tp 2 --log %s", bin,
                 flags_with("--steps 3 --d-model 1024 --n-layer 12 --n-head 16 --vocab 8192"), log);
        rc = signal_once_log_created(cmd, out, log, SIGTERM, &reached, &dt);
        if (dt > slowest) slowest = dt;
        if (!reached || rc < 0 || sh("test $(grep -c '%s' %s) = 1", said, out)) break;
        once++;
    }
    check(once == runs && slowest < 5, tag, "SIGTERM to mpirun once the log was created: '%s' once in %d of %d runs "
          "(the last: exit %d after %.1f s; the slowest %.1f s, at most 5)", said, once, runs, rc, dt, slowest);
}

static void suite_audit(const char* bin) {
    sh("mkdir -p " AUD);
    bad_runs(bin, AUDIT_CASES, sizeof(AUDIT_CASES) / sizeof(AUDIT_CASES[0]));
    host_memory(bin);
    stop_plain_mpirun(bin);
}
