// tests/faults_runs.c: test_faults' runs stopped or broken on purpose: SIGKILL then --resume auto,
// SIGTERM / SIGINT, resharding, a rank killed or hung.
// Included by tests/test_faults.c after its helpers (one test binary); not built alone.

// ----------------------------------------------------------------------------
// 1. SIGKILL and exact resume (1 rank)

#define REF_STEPS 12
static Log ref;                 // uninterrupted 1-rank gpt2 run, --ckpt-every 2
static Log ref_llama;

static int reference(const char* tag, const char* model_flags, Log* g) {
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train %s --steps %d --ckpt-every 2 --ckpt-keep 100 --log %s "
             "--ckpt-dir %s", flags_with(model_flags), REF_STEPS, log, dir);
    double t0 = now_s();
    int rc = run_to_file(cmd, out);
    int ok = rc == 0 && log_read(log, g) == REF_STEPS;
    double drop = ok ? atof(g->loss[1]) - atof(g->loss[REF_STEPS]) : 0;
    ok = ok && drop > 0.05;  // equal losses prove little unless the model learns
    check(ok, tag, "exit %d, loss %s -> %s over %d steps (%.1f s)", rc, g->loss[1], g->loss[REF_STEPS], REF_STEPS,
          now_s() - t0);
    return ok;
}



// Resume the run in dir with --resume auto; its losses after the resume point must be the
// reference's, bit for bit. expect_step: the step it must resume from (-1: any).
static void resume_and_compare(const char* tag, const char* dir, int expect_step, const char* extra) {
    char cmd[4096], out[300], log[300], why[1024] = "";
    snprintf(out, sizeof(out), "%s/resume_out.txt", dir);
    snprintf(log, sizeof(log), "%s/resume_log.jsonl", dir);
    snprintf(cmd, sizeof(cmd), TRAIN "--steps %d --ckpt-every 2 --log %s --ckpt-dir %s --resume auto %s", REF_STEPS,
             log, dir, extra);
    int rc = run_to_file(cmd, out);
    int s = resumed_step(out);
    Log g;
    log_read(log, &g);
    double worst;
    int ok = rc == 0 && s >= 0 && (expect_step < 0 || s == expect_step) && g.first == s + 1 && g.last == REF_STEPS &&
             g.n == REF_STEPS - s && losses_match(&ref, &g, s + 1, REF_STEPS, 1, why, &worst);
    check(ok, tag, "resume exit %d from step %d%s, steps %d..%d bitwise equal%s%s", rc, s,
           expect_step >= 0 && s != expect_step ? " (expected another)" : "", s + 1, REF_STEPS, *why ? "; " : "", why);
}

// Resume the newest checkpoint in dir (saved at step `latest`) under `layout` for k more
// steps: it must start from `latest`, log k finite losses, and match the 1-rank reference
// within TOL where the reference has those steps.
static void resume_more(const char* tag, const char* suffix, const char* dir, const char* layout, int latest, int k) {
    char cmd[4096], out[300], log[300], name[160], why[512] = "";
    snprintf(out, sizeof(out), "%s/resume_out.txt", dir);
    snprintf(log, sizeof(log), "%s/resume_log.jsonl", dir);
    snprintf(cmd, sizeof(cmd), TRAIN "%s --steps %d --log %s --ckpt-dir %s --resume auto", layout, latest + k, log,
             dir);
    int rc = run_to_file(cmd, out);
    Log g;
    log_read(log, &g);
    double worst = 0;
    int finite = 1, compared = latest + k <= REF_STEPS;
    for (int s = latest + 1; s <= latest + k; s++) finite &= isfinite(atof(g.loss[s]));
    int ok = rc == 0 && resumed_step(out) == latest && g.n == k && finite &&
             (!compared || losses_match(&ref, &g, latest + 1, latest + k, 0, why, &worst));
    snprintf(name, sizeof(name), "%s%s", tag, suffix);
    if (compared)
        check(ok, name, "exit %d, steps %d..%d loss rel %.1e vs the 1-rank run%s%s", rc, latest + 1, latest + k, worst,
               *why ? "; " : "", why);
    else
        check(ok, name, "exit %d, steps %d..%d, last loss %s (past the %d-step reference: not compared)", rc,
              latest + 1, latest + k, g.loss[latest + k], REF_STEPS);
}

static void kill_after_step(int k) {
    char tag[64], dir[256], cmd[4096], out[300], log[300], why[512] = "";
    snprintf(tag, sizeof(tag), "sigkill_after_step%d", k);
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "--steps %d --ckpt-every 2 --log %s --ckpt-dir %s", REF_STEPS, log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, k, pid, 60);
    kill(pid, SIGKILL);
    int rc = wait_for(pid, 10);
    Log g;
    log_read(log, &g);
    int latest = ckpt_dir_check(dir, FLAGS, why);
    int ok = reached && rc == 128 + SIGKILL && latest >= 0 && g.last < REF_STEPS;
    check(ok, tag, "killed after step %d (exit %d), LATEST step %d, checkpoints complete%s%s", g.last, rc, latest,
          *why ? "; " : "", why);
    if (ok) resume_and_compare(tag, dir, latest > 0 ? latest : -1, "");
}

// Kill the run the moment the temporary of file `target` (files.h's "<target>.tmp.train-<pid>-XXXXXX",
// AtomicFile) in dir has grown past min_bytes while being written (inotify), once file `after`
// (in dir, NULL: none) exists: in the middle of a checkpoint or manifest write.
static void kill_during_write(const char* tag, const char* target, long long min_bytes, const char* after,
                              long long full) {
    char dir[256], cmd[4096], out[300], log[300], why[512] = "", tpath[512];
    run_dir(tag, dir, out, log);
    snprintf(tpath, sizeof(tpath), "%s/%s", dir, target);
    char apath[512];
    snprintf(apath, sizeof(apath), "%s/%s", dir, after ? after : "");
    int fd = inotify_init1(IN_NONBLOCK);
    if (fd < 0 || inotify_add_watch(fd, dir, IN_CREATE | IN_MODIFY | IN_MOVED_TO) < 0) {
        check(0, tag, "inotify: %s", strerror(errno));
        return;
    }
    snprintf(cmd, sizeof(cmd), TRAIN "--steps %d --ckpt-every 2 --log %s --ckpt-dir %s", REF_STEPS, log, dir);
    pid_t pid = spawn(cmd, out);
    int hit = 0, n_partial = 0, n_renamed = 0;
    ModelConfig mc;
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    model_of(FLAGS, &mc, P);
    long long ckpt_full = ckpt_file_bytes(P->n_full, P->n);
    free(P);
    long long size_at_kill = -1;
    double t0 = now_s();
    char buf[8192] __attribute__((aligned(8)));
    while (!hit && now_s() - t0 < 60) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) {
            if (!still_running(pid)) break;
            continue;
        }
        ssize_t n = read(fd, buf, sizeof(buf));
        for (char* q = buf; n > 0 && q < buf + n && !hit;) {
            struct inotify_event* ev = (struct inotify_event*)q;
            // a final name may only appear by rename, and only complete
            int s;
            if (ev->len && sscanf(ev->name, "ckpt_%d.bin", &s) == 1 && strlen(ev->name) == 17) {
                if (ev->mask & IN_CREATE) n_partial++;
                if (ev->mask & IN_MOVED_TO) {
                    char fpath[600];
                    snprintf(fpath, sizeof(fpath), "%s/%s", dir, ev->name);
                    if (file_size(fpath) >= 0 && file_size(fpath) != ckpt_full)
                        n_partial++;  // (rotation may remove it)
                    n_renamed++;
                }
            }
            size_t tlen = strlen(target);
            int is_target = ev->len && strlen(ev->name) > tlen && !strncmp(ev->name, target, tlen) &&
                            temp_name_len(ev->name) == tlen;
            if (is_target) snprintf(tpath, sizeof(tpath), "%s/%s", dir, ev->name);
            if (is_target && file_size(tpath) >= min_bytes && (!after || file_size(apath) >= 0)) {
                kill(pid, SIGKILL);
                hit = 1;
            }
            q += sizeof(struct inotify_event) + ev->len;
        }
    }
    close(fd);
    if (!hit) kill(pid, SIGKILL);
    int rc = wait_for(pid, 10);
    size_at_kill = file_size(tpath);
    int latest = ckpt_dir_check(dir, FLAGS, why);
    // the write must still have been under way: the temp file left behind
    int ok = hit && rc == 128 + SIGKILL && size_at_kill >= 0 && latest >= 0 && n_partial == 0;
    check(ok, tag,
          "killed while %s's temporary was %lld of %lld bytes (exit %d); LATEST step %d; final names complete "
          "(%d renames seen, %d final names created directly or short)%s%s",
          target, size_at_kill, full, rc, latest, n_renamed, n_partial, *why ? "; " : "", why);
    if (!ok) return;
    // The directory scan (no manifest) must ignore the .tmp as well: resume a copy without LATEST.
    char copy[300];
    snprintf(copy, sizeof(copy), "%s_nolatest", dir);
    sh("rm -rf %s && cp -r %s %s && rm -f %s/LATEST", copy, dir, copy, copy);
    int highest = 0;
    DIR* d = opendir(copy);
    struct dirent* e;
    while (d && (e = readdir(d))) {
        int s;
        if (sscanf(e->d_name, "ckpt_%d.bin", &s) == 1 && strlen(e->d_name) == 17 && s > highest) highest = s;
    }
    if (d) closedir(d);
    resume_and_compare(tag, dir, latest, "");
    char tag2[128];
    snprintf(tag2, sizeof(tag2), "%s_no_manifest", tag);
    resume_and_compare(tag2, copy, highest, "");
}

static void suite_sigkill(void) {
    if (!reference("ref_gpt2_1rank", "", &ref)) return;
    kill_after_step(3);
    kill_after_step(7);
    // checkpoint 6 half written (ckpt_file_bytes in all)
    ModelConfig c;
    ParamLayout* P = (ParamLayout*)xmalloc(sizeof(ParamLayout));
    model_of(FLAGS, &c, P);
    long long full = ckpt_file_bytes(P->n_full, P->n);
    free(P);
    kill_during_write("sigkill_mid_checkpoint_write", "ckpt_00000006.bin", 1, NULL, full);
    kill_during_write("sigkill_mid_manifest_write", "LATEST", 0, "ckpt_00000004.bin",
                      18);  // 4 renamed, LATEST still 2
}

// ----------------------------------------------------------------------------
// 2. SIGTERM / SIGINT

static void signal_1rank(int sig, const char* name) {
    char tag[64], dir[256], cmd[4096], out[300], log[300], why[512] = "";
    snprintf(tag, sizeof(tag), "%s_1rank", name);
    run_dir(tag, dir, out, log);
    // --steps 200 and no --ckpt-every: only the signal writes a checkpoint before the end
    snprintf(cmd, sizeof(cmd), TRAIN "--steps 200 --log %s --ckpt-dir %s", log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 2, pid, 60);
    kill(pid, sig);
    int rc = wait_for(pid, 30);
    if (rc < 0) kill_group(pid);
    Log g;
    log_read(log, &g);
    int latest = ckpt_dir_check(dir, FLAGS, why);
    char said[64];
    snprintf(said, sizeof(said), "stopped by signal after step %d", g.last);
    int ok = reached && rc == 128 + sig && latest == g.last && file_has(out, said);
    check(ok, tag, "exit %d after step %d, checkpoint step %d, '%s' %s%s%s", rc, g.last, latest, said,
           file_has(out, said) ? "printed" : "missing", *why ? "; " : "", why);
    if (ok && latest < REF_STEPS) resume_and_compare(tag, dir, latest, "");
}

// A multi-rank run stopped: `sig` to the self-launcher's process group (as a terminal's
// Ctrl-C or a scheduler reaches it; the launcher passes it on through mpirun), or to one rank
// only (ckpt_stop_requested is a MAX over the world, so one rank's signal stops all). Every
// way the job exits 128 + sig with a checkpoint and "stopped by signal".
static void signal_ranks(const char* tag, const char* layout, int sig, int to_one_rank) {
    char dir[256], cmd[4096], out[300], log[300], why[512] = "";
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "%s --steps 200 --log %s --ckpt-dir %s", layout, log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 2, pid, 90);
    pid_t ranks[16];
    int nr = rank_pids(pid, ranks, 16);
    if (to_one_rank && nr > 0) kill(ranks[nr - 1], sig);
    else kill(-pid, sig);
    double t0 = now_s();
    int rc = wait_for(pid, 60);
    double dt = now_s() - t0;
    if (rc < 0) kill_group(pid);
    Log g;
    log_read(log, &g);
    int latest = ckpt_dir_check(dir, FLAGS, why);
    int ok = reached && rc == 128 + sig && latest > 0 && latest >= g.last - 1 && file_has(out, "stopped by signal");
    check(ok, tag, "signal %d to %s: exit %d in %.1f s after step %d, checkpoint step %d, 'stopped by signal' %s%s%s",
          sig, to_one_rank ? "one rank" : "the launcher", rc, dt, g.last, latest,
          file_has(out, "stopped by signal") ? "printed" : "missing", *why ? "; " : "", why);
    if (latest <= 0 || strcmp(layout, "--tp 2 --pp 2")) return;
    // resumable: 2 more steps under the same layout
    resume_more(tag, "_resume", dir, layout, latest, 2);
}

// Send sig to pid, wait up to limit_s for it to end: its exit code (-1: it had not; killed), the wait in *dt.
static int signal_and_wait(pid_t pid, int sig, double limit_s, double* dt) {
    kill(pid, sig);
    double t1 = now_s();
    int rc = wait_for(pid, limit_s);
    *dt = now_s() - t1;
    if (rc < 0) kill_group(pid);
    return rc;
}

// A stop that comes during a long loop other than the steps: the end-of-run sample, an
// evaluation, the reading of the data. The run must end within a few seconds with 128 +
// sig and say so. wait_text: what the output or the log shows once the loop has begun (NULL:
// wait `wait_s` seconds instead). max_step >= 0: the stop came at start-up, whose length the
// machine's load sets: the run must not train past step max_step (the first point where the
// ranks meet and look), and end within 60 s (a hang), not within a few.
static void stop_in_loop(const char* tag, const char* args, const char* wait_text, double wait_s, int sig,
                         const char* said, int max_step) {
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train %s --log %s", flags_with(args), log);
    pid_t pid = spawn(cmd, out);
    double t0 = now_s();
    int reached = 0;
    while (!reached && now_s() - t0 < 60 && still_running(pid)) {
        usleep(10000);
        reached = wait_text ? file_has(out, wait_text) || file_has(log, wait_text) : now_s() - t0 >= wait_s;
    }
    double dt;
    int rc = signal_and_wait(pid, sig, 30, &dt);
    Log g;
    int steps = log_read(log, &g) ? g.last : 0;
    int ok = reached && rc == 128 + sig && dt < (max_step >= 0 ? 60 : 10) && file_has(out, said) &&
             (max_step < 0 || steps <= max_step);
    check(ok, tag, "signal %d once '%s' showed: exit %d after %.1f s, '%s' %s, %d steps trained", sig,
          wait_text ? wait_text : "(start-up)", rc, dt, said, file_has(out, said) ? "printed" : "missing", steps);
}

// A stop under the self-launcher once the ranks are past reading the data (rank 0 has created the log: both
// met after reading), while they set the model up (a wider model: its set-up takes a second or more): the run
// ends before step 1, 128 + sig, a line saying so (at start-up, or while initializing the weights: each tensor's
// initialization looks for a stop), no step in the log, no checkpoint (it trained step 1, saved it and stopped
// after it).
// Start cmd, wait until it has created its log (before the model's set-up), send sig: the exit code, *reached
// (the log was there, still empty) and *dt (seconds from the signal to the exit).
static int signal_once_log_created(const char* cmd, const char* out, const char* log, int sig, int* reached,
                                   double* dt) {
    pid_t pid = spawn(cmd, out);
    double t0 = now_s();
    while (file_size(log) < 0 && still_running(pid) && now_s() - t0 < 120) usleep(1000);
    *reached = file_size(log) == 0;
    return signal_and_wait(pid, sig, 60, dt);
}
static void stop_before_first_step(const char* tag, int sig) {
    char dir[256], cmd[4096], out[300], log[300], ck[300];
    run_dir(tag, dir, out, log);
    snprintf(ck, sizeof(ck), "%s/ck", dir);
    snprintf(cmd, sizeof(cmd), TRAIN "--tp 2 --d-model 512 --n-layer 8 --steps 3 --log %s --ckpt-dir %s", log, ck);
    int reached;
    double dt;
    int rc = signal_once_log_created(cmd, out, log, sig, &reached, &dt);
    Log g;
    int steps = log_read(log, &g);
    const char* said = "at start-up, before step 1: nothing trained, no checkpoint written";
    if (!file_has(out, said)) said = "while initializing the weights";  // (the first part of the set-up)
    int saved = sh("ls %s/ckpt_*.bin > /dev/null 2>&1", ck) == 0;
    check(reached && rc == 128 + sig && steps == 0 && !saved && file_has(out, said), tag,
          "signal %d once the log was created: exit %d after %.1f s, %d steps trained, checkpoint %s, '%s' %s", sig, rc,
          dt, steps, saved ? "WRITTEN" : "none", said, file_has(out, said) ? "printed" : "missing");
}

// SIGTERM / SIGINT in one very long step (65536 sequences: a minute or more here): the first is
// acted on once the step ends; a second exits at once (within 5 s), 128 + it, without saving, with
// one line (the launcher's under `layout`), and the checkpoint dir is as it was: empty, nothing new (no
// checkpoint, LATEST or temporary). (An earlier run's checkpoint there would refuse the run at start-up:
// ckpt.h ckpt_dir_spare_others.)
static void second_signal_in_long_step(const char* tag, const char* layout, int sig, const char* said) {
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd),
             "OMP_NUM_THREADS=1 ./train --model tiny --micro-batch 8 --global-batch 65536 --eval-every 0 "
             "--sample-len 0 --peak-tflops 1 --warmup 20 --lr 2e-2 --eps 1e-4 %s --steps 1 --log %s --ckpt-dir %s",
             layout, log, dir);
    pid_t pid = spawn(cmd, out);
    double t0 = now_s();
    while (!file_has(out, "planner (cpu profile)") && still_running(pid) && now_s() - t0 < 60) usleep(10000);
    usleep(500000);  // into the step
    kill(-pid, sig);
    usleep(1500000);
    int waited = still_running(pid);  // the first: at the step's end
    kill(-pid, sig);
    double t1 = now_s();
    int rc = wait_for(pid, 30);
    double dt = now_s() - t1;
    if (rc < 0) kill_group(pid);
    Log g;
    int steps = log_read(log, &g);
    int same = sh("cd %s && test -z \"$(ls | grep -v -x -e LOCK -e log.jsonl -e out.txt)\"", dir) == 0;
    int ok = waited && rc == 128 + sig && dt < 5 && file_has(out, said) && !steps && same;
    check(ok, tag, "signal %d twice in a long step: the first %s, exit %d %.1f s after the second, '%s' %s, %d steps, "
          "checkpoint dir %s", sig, waited ? "waited for the step" : "ENDED THE RUN", rc, dt, said,
          file_has(out, said) ? "printed" : "missing", steps, same ? "as it was" : "CHANGED");
}

// Bytes pid has read through read() so far (/proc/PID/io's rchar), or -1.
static long long bytes_read_by(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/io", (int)pid);
    FILE* f = fopen(path, "r");
    long long n = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "rchar:", 6)) n = atoll(line + 6);
    if (f) fclose(f);
    return n;
}

// The watchdog from the first collective (base/watchdog.h): of two ranks reading a large file, rank 1
// is stopped (SIGSTOP) once it has read 64 MiB of it. Stopped for stop_s (> 0), well under
// --timeout-s: rank 0's wait for it is no stall, and both train (exit 0, no watchdog line). Stopped
// for good (stop_s 0): rank 0 ends the job with one error line naming where it waits (`phase`),
// after --timeout-s plus its own reading time (the phase's grace); the launcher exits non-zero and
// every process is gone. after_data: stop rank 1 once it has read the whole file instead (a later
// part of start-up: the line must only say "at start-up"). Killed (stop_s < 0, SIGKILL): mpirun sees
// it and ends the job well before --timeout-s, with no watchdog line.
static void watchdog_at_startup(const char* tag, const char* big, double timeout, double stop_s, int after_data,
                                const char* phase) {
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    snprintf(cmd, sizeof(cmd), TRAIN "--tp 2 --timeout-s %.0f --steps 2 --data %s --log %s", timeout, big, log);
    pid_t pid = spawn(cmd, out), ranks[16];
    double t0 = now_s(), t_stop = 0;
    long long at = after_data ? file_size(big) : 64LL << 20;
    int nr = 0, stopped = 0;
    while (now_s() - t0 < 120 && still_running(pid) && !stopped) {
        usleep(1000);
        nr = rank_pids(pid, ranks, 16);
        if (nr == 2 && bytes_read_by(ranks[1]) >= at)
            stopped = kill(ranks[1], stop_s < 0 ? SIGKILL : SIGSTOP) == 0, t_stop = now_s();
    }
    if (stopped && stop_s > 0) usleep((useconds_t)(stop_s * 1e6)), kill(ranks[1], SIGCONT);
    // a stall ends within the timeout, rank 0's reading time (under 60 s even loaded) and mpirun's teardown
    double limit = stop_s > 0 ? 120 : timeout + 60 + 15;
    int rc = wait_for(pid, limit);
    pid_t left[64];
    int n_left;
    while ((n_left = pids_matching(dir, left, 64)) > 0 && now_s() - t_stop < limit) usleep(50000);
    double gone = now_s() - t_stop;
    if (rc < 0 || n_left) {
        if (stopped) kill(ranks[1], SIGKILL);
        kill_group(pid);
        for (int i = 0; i < n_left; i++) kill(left[i], SIGKILL);
    }
    FILE* f = fopen(out, "r");
    char line[4096], said[4096] = "";
    int n_error = 0;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "error:", 6) && !n_error++) snprintf(said, sizeof(said), "%.300s", line);
    if (f) fclose(f);
    said[strcspn(said, "\n")] = 0;
    if (stop_s < 0) {
        check(stopped && rc > 0 && !n_error && !n_left && gone < timeout, tag, "rank 1 %s while reading the data: "
              "launcher exit %d after %.1f s (--timeout-s %.0f), %d error lines, %d processes left",
              stopped ? "killed" : "NOT killed", rc, gone, timeout, n_error, n_left);
        return;
    }
    if (stop_s > 0) {
        check(stopped && rc == 0 && !n_error, tag, "rank 1 %s for %.1f s while reading the data (--timeout-s %.0f): "
              "exit %d, watchdog %s", stopped ? "stopped" : "NOT stopped", stop_s, timeout, rc,
              n_error ? "FIRED" : "quiet");
        return;
    }
    int ok = stopped && rc > 0 && rc != 124 && n_error == 1 && strstr(said, phase) && strstr(said, "no progress") &&
             !n_left && gone >= timeout - 1;
    check(ok, tag, "rank 1 stopped %s: launcher exit %d after %.1f s (--timeout-s %.0f), %d error line%s ('%s'), "
          "%d processes left", after_data ? "after reading the data" : "while reading the data", rc, gone, timeout,
          n_error, n_error == 1 ? "" : "s", said, n_left);
}

// ----------------------------------------------------------------------------
// 3. Resharding: steps 1..4 under layout A, 5..8 under layout B.

static void reshard(const char* tag, const char* model_flags, const Log* r, const char* ref_dir, const char* from,
                    const char* to) {
    char dir[256], cmd[4096], out[300], log[300], why[512] = "", mflags[1024];
    snprintf(dir, sizeof(dir), ROOT "/reshard_%s", tag);
    fresh_dir(dir);
    snprintf(out, sizeof(out), "%s/out1.txt", dir);
    snprintf(log, sizeof(log), "%s/log1.jsonl", dir);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train %s %s --steps 4 --log %s --ckpt-dir %s",
             flags_with(model_flags), from, log, dir);
    double t0 = now_s();
    int rc1 = run_to_file(cmd, out);
    snprintf(out, sizeof(out), "%s/out2.txt", dir);
    snprintf(log, sizeof(log), "%s/log2.jsonl", dir);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 ./train %s %s --steps 8 --log %s --ckpt-dir %s --resume auto",
             flags_with(model_flags), to, log, dir);
    int rc2 = rc1 == 0 ? run_to_file(cmd, out) : -1;
    Log g;
    log_read(log, &g);
    double worst_loss = 0;
    int ok = rc1 == 0 && rc2 == 0 && resumed_step(out) == 4 && g.first == 5 &&
             losses_match(r, &g, 5, 8, 0, why, &worst_loss);
    char a[600], b[600];
    snprintf(a, sizeof(a), "%s/ckpt_00000008.bin", ref_dir);
    snprintf(b, sizeof(b), "%s/ckpt_00000008.bin", dir);
    snprintf(mflags, sizeof(mflags), "%s", flags_with(model_flags));
    double worst_param = ok ? ckpt_param_diff(a, b, mflags) : 1e30;
    ok = ok && worst_param <= TOL;
    char name[128];
    snprintf(name, sizeof(name), "reshard_%s", tag);
    check(ok, name, "[%s] -> [%s]: exits %d %d, steps 5..8 loss rel %.1e, params rel %.1e (%.1f s)%s%s", from, to, rc1,
          rc2, worst_loss, worst_param, now_s() - t0, *why ? "; " : "", why);
}

// ----------------------------------------------------------------------------
// 4. One rank of eight killed

static void rank_killed(void) {
    const char* tag = "rank_sigkill_dp2_tp2_pp2";
    char dir[256], cmd[4096], out[300], log[300], why[512] = "";
    run_dir(tag, dir, out, log);
    const double timeout = 20, margin = 15;
    snprintf(cmd, sizeof(cmd),
             TRAIN "--dp 2 --tp 2 --pp 2 --timeout-s %.0f --steps 1000 --ckpt-every 1 --log %s --ckpt-dir %s", timeout,
             log, dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 2, pid, 120);
    pid_t ranks[16];
    int nr = rank_pids(pid, ranks, 16);
    usleep(50000);  // into the next step
    pid_t victim = nr > 0 ? ranks[nr / 2] : 0;
    if (victim) kill(victim, SIGKILL);
    double t0 = now_s();
    int rc = wait_for(pid, timeout + margin);
    pid_t left[64];
    int n_left;
    while ((n_left = pids_matching(dir, left, 64)) > 0 && now_s() - t0 < timeout + margin) usleep(50000);
    double gone = now_s() - t0;
    if (rc < 0 || n_left) {
        kill_group(pid);
        for (int i = 0; i < n_left; i++) kill(left[i], SIGKILL);
    }
    int latest = ckpt_dir_check(dir, FLAGS, why);
    int ok = reached && nr == 8 && rc > 0 && n_left == 0 && latest > 0;
    check(ok, tag,
          "%d ranks, killed pid %d: launcher exit %d, all processes gone after %.1f s (limit %.0f), %d left; LATEST "
          "step %d%s%s",
          nr, (int)victim, rc, gone, timeout + margin, n_left, latest, *why ? "; " : "", why);
    if (latest <= 0) return;
    // the last complete checkpoint resumes on one rank and trains a step
    resume_more(tag, "_resume_1rank", dir, "", latest, 1);
}

// A rank that hangs (SIGSTOP) instead of dying: nothing tells mpirun, so only the
// watchdog (--timeout-s) of the ranks waiting on it can end the job.
static void rank_hung(void) {
    const char* tag = "rank_sigstop_watchdog_dp2_tp2";
    char dir[256], cmd[4096], out[300], log[300];
    run_dir(tag, dir, out, log);
    const double timeout = 5, margin = 15;
    snprintf(cmd, sizeof(cmd), TRAIN "--dp 2 --tp 2 --timeout-s %.0f --steps 1000 --log %s --ckpt-dir %s", timeout, log,
             dir);
    pid_t pid = spawn(cmd, out);
    int reached = wait_log(log, 2, pid, 120);
    pid_t ranks[16];
    int nr = rank_pids(pid, ranks, 16);
    pid_t victim = nr > 0 ? ranks[nr - 1] : 0;
    if (victim) kill(victim, SIGSTOP);
    double t0 = now_s();
    int rc = wait_for(pid, timeout + margin);
    pid_t left[64];
    int n_left;
    while ((n_left = pids_matching(dir, left, 64)) > 0 && now_s() - t0 < timeout + margin) usleep(50000);
    double gone = now_s() - t0;
    if (rc < 0 || n_left) {
        if (victim) kill(victim, SIGKILL);
        kill_group(pid);
        for (int i = 0; i < n_left; i++) kill(left[i], SIGKILL);
    }
    int said = file_has(out, "no progress for");
    int ok = reached && nr == 4 && rc > 0 && n_left == 0 && gone >= timeout - 1 && said;
    check(ok, tag,
          "%d ranks, stopped pid %d: launcher exit %d, all processes gone after %.1f s (--timeout-s %.0f, limit %.0f), "
          "%d left, watchdog message %s",
          nr, (int)victim, rc, gone, timeout, timeout + margin, n_left, said ? "printed" : "missing");
}
