// tests/gpt_host.c: test_gpt's checks of what the host can give a run (runtime/train.h host_mem_available): the
// memory cgroup found from /proc/self/cgroup's text, one cgroup's headroom from its files' texts, the walk up a
// hierarchy built here under tmp_dir (a fake root: one cannot be mounted), each against hand-computed bytes; the
// real files of this machine once; and the host copy of the weights the CPU build counts with --zero 3.
// Included by tests/test_gpt.c after its helpers (one test binary); not built alone.

static void cgroup_file(const char* dir, const char* name, const char* text) {
    char path[600];
    snprintf(path, sizeof(path), "mkdir -p %s", dir);
    if (system(path)) fail("test: cannot make %s", dir);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    write_file(path, text, strlen(text));
}

static void test_cgroup_texts(void) {
    char dir[256];
    int v = cgroup_memory_dir("0::/user.slice/job-7\n", "/R", dir, sizeof(dir));
    check(v == 2 && !strcmp(dir, "/R/user.slice/job-7"), "host/cgroup v2: 0::PATH under the root", "v%d %s", v, dir);
    v = cgroup_memory_dir("12:pids:/x\n5:cpuacct,memory,cpu:/docker/abc\n0::/\n", "/R", dir, sizeof(dir));
    check(v == 1 && !strcmp(dir, "/R/memory/docker/abc"), "host/cgroup v1: the line listing memory, before 0::",
          "v%d %s", v, dir);
    v = cgroup_memory_dir("3:memory_x:/z\n0::/\n", "/R", dir, sizeof(dir));
    check(v == 2 && !strcmp(dir, "/R"), "host/cgroup: memory_x is no memory controller; PATH / is the root",
          "v%d %s", v, dir);
    v = cgroup_memory_dir("", "/R", dir, sizeof(dir));
    check(v == 0, "host/cgroup: none in an empty text", "v%d", v);
    // limit - (usage - inactive file pages), by hand
    double h = cgroup_headroom(2, "1073741824\n", "536870912\n", "anon 400\nfile 200\ninactive_file 134217728\n");
    check(h == 1073741824.0 - (536870912.0 - 134217728.0), "host/cgroup v2 headroom: 1 GiB - (512 - 128) MiB",
          "%.0f", h);
    h = cgroup_headroom(1, "5000\n", "3000\n", "inactive_file 7\ntotal_inactive_file 1000\n");
    check(h == 3000, "host/cgroup v1 headroom: 5000 - (3000 - total_inactive_file 1000)", "%.0f", h);
    h = cgroup_headroom(2, "1000", "50", "inactive_file 80\n");
    check(h == 1000, "host/cgroup headroom: more inactive pages than usage count as none used", "%.0f", h);
    h = cgroup_headroom(2, "1000", "2000", "");
    check(h == 0, "host/cgroup headroom: usage past the limit leaves 0", "%.0f", h);
    double none[3] = {cgroup_headroom(2, "max\n", "10\n", ""), cgroup_headroom(2, "abc", "1", ""),
                      cgroup_headroom(2, NULL, "1", "")};
    check(none[0] == -1 && none[1] == -1 && none[2] == -1, "host/cgroup headroom: max, junk, no file: no limit",
          "%.0f %.0f %.0f", none[0], none[1], none[2]);
}

static void test_cgroup_walk(void) {
    char root[300], dir[400], limit_file[600], want[600];
    // v2: a/b inside a/; the least headroom of the two, the root (no memory.max) passed over
    snprintf(root, sizeof(root), "%s/cg2", tmp_dir);
    snprintf(dir, sizeof(dir), "%s/a", root);
    cgroup_file(dir, "memory.max", "1000\n"), cgroup_file(dir, "memory.current", "400\n");
    cgroup_file(dir, "memory.stat", "anon 300\ninactive_file 100\n");
    snprintf(dir, sizeof(dir), "%s/a/b", root);
    cgroup_file(dir, "memory.max", "max\n"), cgroup_file(dir, "memory.current", "10\n");
    double h = cgroup_available("0::/a/b\n", root, limit_file, sizeof(limit_file));
    snprintf(want, sizeof(want), "%s/a/memory.max", root);
    check(h == 700 && !strcmp(limit_file, want), "host/cgroup walk: the parent's limit binds (1000 - (400 - 100))",
          "%.0f from %s", h, limit_file);
    cgroup_file(dir, "memory.max", "500\n"), cgroup_file(dir, "memory.current", "300\n");
    h = cgroup_available("0::/a/b\n", root, limit_file, sizeof(limit_file));
    snprintf(want, sizeof(want), "%s/a/b/memory.max", root);
    check(h == 200 && !strcmp(limit_file, want), "host/cgroup walk: the child's tighter limit (500 - 300)",
          "%.0f from %s", h, limit_file);
    // a container's view: its own cgroup at the root, /proc/self/cgroup naming the host's path
    cgroup_file(root, "memory.max", "800\n"), cgroup_file(root, "memory.current", "600\n");
    h = cgroup_available("0::/system.slice/docker-1.scope\n", root, limit_file, sizeof(limit_file));
    snprintf(want, sizeof(want), "%s/memory.max", root);
    check(h == 200 && !strcmp(limit_file, want), "host/cgroup walk: a path not there leads to the root's limit",
          "%.0f from %s", h, limit_file);
    // v1: the memory hierarchy at root/memory; its unlimited cgroup and the parent's 5000 - (1000 - 500)
    snprintf(root, sizeof(root), "%s/cg1", tmp_dir);
    snprintf(dir, sizeof(dir), "%s/memory/x", root);
    cgroup_file(dir, "memory.limit_in_bytes", "9223372036854771712\n");
    cgroup_file(dir, "memory.usage_in_bytes", "1\n");
    snprintf(dir, sizeof(dir), "%s/memory", root);
    cgroup_file(dir, "memory.limit_in_bytes", "5000\n"), cgroup_file(dir, "memory.usage_in_bytes", "1000\n");
    cgroup_file(dir, "memory.stat", "cache 900\ntotal_inactive_file 500\n");
    h = cgroup_available("4:memory:/x\n0::/\n", root, limit_file, sizeof(limit_file));
    snprintf(want, sizeof(want), "%s/memory/memory.limit_in_bytes", root);
    check(h == 4500 && !strcmp(limit_file, want), "host/cgroup v1 walk: up to the hierarchy's root",
          "%.0f from %s", h, limit_file);
    h = cgroup_available("4:memory:/x\n", "/nonexistent", limit_file, sizeof(limit_file));
    check(h == -1, "host/cgroup walk: no files, no limit", "%.0f", h);
}

// This machine's own files: the figure is MemAvailable or the cgroup's headroom, whichever is less, and says which.
static void test_host_available_here(void) {
    char source[PATH_CAP + 96], proc_cgroup[8192] = "", limit_file[PATH_CAP + 32] = "";
    const char *why = NULL, *why_meminfo = NULL;
    double available = host_mem_available(source, sizeof(source), &why);
    double meminfo = meminfo_available(&why_meminfo);
    const char* text = small_file_text("/proc/self/cgroup", proc_cgroup, sizeof(proc_cgroup));
    double cgroup = text ? cgroup_available(text, "/sys/fs/cgroup", limit_file, sizeof(limit_file)) : -1;
    int by_cgroup = cgroup >= 0 && cgroup < meminfo;
    // (MemAvailable moves between the two reads: within 64 MiB)
    double want = by_cgroup ? cgroup : meminfo;
    check(!why && available > 0 && fabs(available - want) < 64 * 1048576.0 &&
              (by_cgroup ? strstr(source, limit_file) != NULL : !strcmp(source, "MemAvailable")),
          "host/this machine: the lesser of MemAvailable and the memory cgroup's headroom, named",
          "%.2f GiB (%s); MemAvailable %.2f GiB, cgroup %.3g GiB (%s)", available / GiB, source, meminfo / GiB,
          cgroup / GiB, limit_file[0] ? limit_file : "no limit");
}

// The CPU build's --zero 3 holds a buffer of the whole local weights (params_host_take) beside the rest at
// initialization and each checkpoint: 4 bytes a parameter over the planner's bytes; other ZeRO stages none.
static void test_host_weights_copy(void) {
    Model m;
    memset(&m, 0, sizeof(m));
    m.P.n_padded = 1000;
    m.c.zero = 3;
    double zero3 = host_bytes_of_rank(&m, 1e6, 0);
    m.c.zero = 2;
    double zero2 = host_bytes_of_rank(&m, 1e6, 0);
    check(zero3 == 1e6 + 4000 && zero2 == 1e6, "host/the CPU build's --zero 3 weights copy counted",
          "zero 3 %.0f, zero 2 %.0f bytes (the planner's 1e6)", zero3, zero2);
}

static void test_host_memory(void) {
    test_cgroup_texts();
    test_cgroup_walk();
    test_host_available_here();
    test_host_weights_copy();
}
