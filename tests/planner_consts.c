// planner_consts.c (included by test_planner.c): every constant the planner predicts with has a row in
// dev/PLANNER.md's "Device profile" section, which says its source, what it was checked on and its status
// (datasheet, published, code, measured, derived, fit, estimate, ...). The names come from the code, not a list
// kept here: every device key (device.h PROFILE_KEYS), every field of software.h's PlanSetup (read from the
// header), every numeric #define of planner/*.h. Where a table's header names built-in profiles (a100-80gb, ...)
// or software (trainer, scaling, ...), a row's values are checked against the code's.
#include <ctype.h>
#include <dirent.h>
#include <strings.h>

#define MD_MAX_CELLS 16
#define MD_MAX_ROWS 512
typedef struct {
    char* cells[MD_MAX_CELLS];
    int n, header;  // header: the row index of this row's table header
} MdRow;
typedef struct {
    char* text;  // the section, split in place
    MdRow rows[MD_MAX_ROWS];
    int n;
} MdTables;

// A whole file, NUL-terminated (the caller frees); NULL if it cannot be read.
static char* consts_read(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = n >= 0 ? (char*)malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) free(s), s = NULL;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static char* consts_trim(char* s) {
    while (*s == ' ') s++;
    for (char* e = s + strlen(s); e > s && e[-1] == ' '; ) *--e = 0;
    return s;
}

// Split a table line "| a | b |" in place into its cells.
static int md_split(char* line, char** cells) {
    int n = 0;
    char* p = line + 1;  // past the first '|'
    for (char* bar; (bar = strchr(p, '|')) && n < MD_MAX_CELLS; p = bar + 1) *bar = 0, cells[n++] = consts_trim(p);
    return n;
}

// Every table row of the section that starts at `heading` and ends at the next "## " heading.
static int md_tables(const char* path, const char* heading, MdTables* t) {
    char* all = consts_read(path);
    char* start = all ? strstr(all, heading) : NULL;
    if (!start) { free(all); return -1; }
    char* end = strstr(start + strlen(heading), "\n## ");
    if (end) *end = 0;
    t->text = all, t->n = 0;
    memmove(all, start, strlen(start) + 1);
    int header = -1;
    for (char *line = all, *next; line && t->n < MD_MAX_ROWS; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (line[0] != '|') { header = -1; continue; }
        if (!strncmp(line, "|---", 4)) { header = t->n - 1; continue; }
        MdRow* r = &t->rows[t->n];
        r->n = md_split(line, r->cells), r->header = header < 0 ? t->n : header;
        t->n++;
    }
    return 0;
}

// The constants a row names in its first cell: its `backticked` identifiers, or where it has none, its comma-
// separated parts that are each one identifier ("nic_gbits, nics_per_node"). Returns how many.
#define MD_MAX_NAMES 8
static int md_row_names(const char* cell, char names[MD_MAX_NAMES][64]) {
    static const char* const ident = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
    int n = 0;
    for (const char* p = cell; (p = strchr(p, '`')) && n < MD_MAX_NAMES; ) {
        size_t len = strspn(++p, ident);
        if (p[len] == '`' && len > 0 && len < 64) snprintf(names[n++], 64, "%.*s", (int)len, p);
        p = strchr(p, '`');
        if (!p) break;
        p++;
    }
    if (strchr(cell, '`')) return n;
    for (const char* p = cell; *p && n < MD_MAX_NAMES; ) {
        p += strspn(p, " ");
        size_t len = strspn(p, ident), after = len + strspn(p + len, " ");
        if (len == 0 || len >= 64 || (p[after] && p[after] != ',')) return 0;  // a part that is not one identifier
        snprintf(names[n++], 64, "%.*s", (int)len, p);
        p += after + (p[after] == ',');
    }
    return n;
}

static int md_row_has(const MdRow* r, const char* name) {
    char names[MD_MAX_NAMES][64];
    int n = r->n > 0 ? md_row_names(r->cells[0], names) : 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return 1;
    return 0;
}

// The column of the row's header whose name starts with `name` (case-insensitive); -1 if none.
static int md_column(const MdTables* t, const MdRow* r, const char* name) {
    const MdRow* h = &t->rows[r->header];
    for (int i = 0; i < h->n; i++)
        if (!strncasecmp(h->cells[i], name, strlen(name))) return i;
    return -1;
}

// The first body row whose first cell names `name`; NULL if none.
static const MdRow* md_row_of(const MdTables* t, const char* name) {
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].header != i && md_row_has(&t->rows[i], name)) return &t->rows[i];
    return NULL;
}

// Whether the row has a source, a "checked on" and a status that names one of the kinds.
static int md_row_sourced(const MdTables* t, const MdRow* r) {
    static const char* const kinds[] = {"datasheet", "published", "code", "measured", "derived", "fit", "estimate",
                                        "configuration", "definition", "limit", "unit"};
    int src = md_column(t, r, "source"), on = md_column(t, r, "checked on"), st = md_column(t, r, "status");
    if (src < 0 || on < 0 || st < 0 || src >= r->n || on >= r->n || st >= r->n) return 0;
    if (!*r->cells[src] || !*r->cells[on]) return 0;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        for (const char* p = r->cells[st]; (p = strstr(p, kinds[i])); p++)
            if ((p == r->cells[st] || !isalpha((unsigned char)p[-1])) && !isalpha((unsigned char)p[strlen(kinds[i])]))
                return 1;
    return 0;
}

// Append each name without a sourced row to `missing`; returns how many.
static int consts_rows_for(const MdTables* t, const char* const* names, int n, char* missing, size_t cap) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const MdRow* r = md_row_of(t, names[i]);
        if (r && md_row_sourced(t, r)) continue;
        size_t used = strlen(missing);
        snprintf(missing + used, cap - used, "%s%s%s", used ? ", " : "", names[i], r ? " (no source / status)" : "");
        bad++;
    }
    return bad;
}

// The fields of software.h's PlanSetup, read from the header: each "    int NAME;" line of its struct. Returns how
// many (all ints: the caller checks that they fill sizeof(PlanSetup)), -1 if the header cannot be read.
static int software_field_names(char* names[64]) {
    char* h = consts_read("planner/software.h");
    char* end = h ? strstr(h, "\n} PlanSetup;") : NULL;
    if (!end) { free(h); return -1; }
    *end = 0;
    char* start = h;
    for (char* p; (p = strstr(start, "typedef struct {")); ) start = p + 1;
    int n = 0;
    for (char* line = start; (line = strstr(line, "\n    int ")) && n < 64; ) {
        line += 9;
        size_t len = strspn(line, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (line[len] == ';') names[n++] = strndup(line, len);
    }
    free(h);
    return n;
}

// The numeric #defines of planner/*.h (a value of digits, '.', 'e', operators and parentheses only).
static int planner_define_names(char* names[128]) {
    DIR* dir = opendir("planner");
    int n = 0;
    for (struct dirent* e; dir && (e = readdir(dir)); ) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".h")) continue;
        char path[300];
        snprintf(path, sizeof(path), "planner/%s", e->d_name);
        char* text = consts_read(path);
        for (char* line = text; line && (line = strstr(line, "\n#define ")) && n < 128; line++) {
            char name[64], value[128] = "";
            if (sscanf(line + 9, "%63s %127[^\n]", name, value) != 2 || strchr(name, '(')) continue;
            for (char* comment; (comment = strstr(value, "//")) || (comment = strstr(value, "/*")); ) *comment = 0;
            if (strspn(value, "0123456789.eE+-*/<>() ") == strlen(value) && strpbrk(value, "0123456789"))
                names[n++] = strdup(name);
        }
        free(text);
    }
    if (dir) closedir(dir);
    return n;
}

// The value a cell gives for the part-th of its comma-separated values (bold marks skipped); 0 if none.
static int md_cell_value(const char* cell, int part, double* v) {
    for (; part > 0 && cell; part--) cell = strchr(cell, ','), cell = cell ? cell + 1 : NULL;
    if (!cell) return 0;
    cell += strspn(cell, " *");
    char* end;
    *v = strtod(cell, &end);
    return end != cell;
}

// A row naming device keys (one or several, comma-separated): each column named after a built-in profile holds
// that profile's values, in the key's units. Appends a mismatch to `bad`; returns 1 if it checked the row.
static int device_row_values(const MdTables* t, const MdRow* r, char* bad, size_t cap) {
    const MdRow* h = &t->rows[r->header];
    char names[MD_MAX_NAMES][64];
    int n = md_row_names(r->cells[0], names);
    const ProfileKey* keys[MD_MAX_NAMES];
    for (int j = 0; j < n; j++) {
        keys[j] = NULL;
        for (int i = 0; i < N_PROFILE_KEYS && !keys[j]; i++)
            if (!strcmp(PROFILE_KEYS[i].key, names[j])) keys[j] = &PROFILE_KEYS[i];
        if (!keys[j]) return 0;  // not a row of device keys
    }
    if (n == 0) return 0;
    int checked = 0;
    for (int col = 1; col < h->n && col < r->n; col++) {
        DeviceProfile d;
        if (profile_builtin(h->cells[col], &d)) continue;
        checked = 1;
        for (int i = 0; i < n; i++) {
            const char* at = (const char*)&d + keys[i]->offset;
            double code = keys[i]->is_int ? *(const int*)at : *(const double*)at / keys[i]->scale, v;
            if (md_cell_value(r->cells[col], i, &v) && fabs(v - code) <= 2e-3 * fabs(code)) continue;
            size_t used = strlen(bad);
            snprintf(bad + used, cap - used, "%s%s on %s: table '%s', code %g", used ? "; " : "", keys[i]->key,
                     h->cells[col], r->cells[col], code);
        }
    }
    return checked;
}

// A row naming a PlanSetup field: each column named after a --software holds plan_setup_for's value of it.
static int software_row_values(const MdTables* t, const MdRow* r, char* const* fields, int n_fields, char* bad,
                               size_t cap) {
    static const char* const software[] = {"trainer", "scaling", "framework", "foundry", "megatron", "deepspeed2021",
                                           "nanotron"};
    const MdRow* h = &t->rows[r->header];
    char names[MD_MAX_NAMES][64];
    int field = -1;
    if (md_row_names(r->cells[0], names) != 1) return 0;
    for (int i = 0; i < n_fields && field < 0; i++) field = strcmp(fields[i], names[0]) ? -1 : i;
    if (field < 0) return 0;
    const char* name = names[0];
    int checked = 0;
    for (int col = 1; col < h->n && col < r->n; col++)
        for (int s = 0; s <= SOFTWARE_NANOTRON; s++) {
            if (strcmp(h->cells[col], software[s])) continue;
            PlanSetup k = plan_setup_for(s);
            int code;
            double v;
            memcpy(&code, (const char*)&k + field * sizeof(int), sizeof(int));  // PlanSetup: ints only (checked)
            checked = 1;
            if (md_cell_value(r->cells[col], 0, &v) && v == code) continue;
            size_t used = strlen(bad);
            snprintf(bad + used, cap - used, "%s%s on %s: table '%s', code %d", used ? "; " : "", name, software[s],
                     r->cells[col], code);
        }
    return checked;
}

static void test_constants_have_rows(void) {
    MdTables* t = (MdTables*)calloc(1, sizeof(MdTables));
    int ok = !md_tables("dev/PLANNER.md", "\n## Device profile\n", t) && t->n < MD_MAX_ROWS;
    check(ok, "constants_table_found", ok ? NULL : "dev/PLANNER.md: no '## Device profile' section, or over %d rows",
          MD_MAX_ROWS);
    if (!ok) { free(t); return; }
    static char missing[8192], bad[8192];
    const char* keys[N_PROFILE_KEYS];
    for (int i = 0; i < N_PROFILE_KEYS; i++) keys[i] = PROFILE_KEYS[i].key;
    missing[0] = 0;
    int bad_keys = consts_rows_for(t, keys, N_PROFILE_KEYS, missing, sizeof(missing));
    check(!bad_keys, "constants_device_keys_have_rows", "%d keys; without a sourced row in dev/PLANNER.md: %s",
          N_PROFILE_KEYS, bad_keys ? missing : "none");
    char* fields[64];
    int n_fields = software_field_names(fields);
    missing[0] = 0;
    int bad_fields = n_fields > 0 ? consts_rows_for(t, (const char* const*)fields, n_fields, missing, sizeof(missing))
                                  : 1;
    check(n_fields > 0 && n_fields * sizeof(int) == sizeof(PlanSetup) && !bad_fields,
          "constants_software_fields_have_rows", "%d int fields read of PlanSetup's %zu bytes; without a row: %s",
          n_fields, sizeof(PlanSetup), bad_fields ? missing : "none");
    char* defines[128];
    int n_defines = planner_define_names(defines);
    missing[0] = 0;
    int bad_defines = consts_rows_for(t, (const char* const*)defines, n_defines, missing, sizeof(missing));
    check(n_defines > 0 && !bad_defines, "constants_defines_have_rows",
          "%d numeric #defines in planner/; without a row: %s", n_defines, bad_defines ? missing : "none");
    int device_rows = 0, software_rows = 0;
    bad[0] = 0;
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].header != i) device_rows += device_row_values(t, &t->rows[i], bad, sizeof(bad));
    char profiles[512];  // every built-in profile has a column: PROFILE_NAMES, "name (alias), name, ..."
    snprintf(profiles, sizeof(profiles), "%s", PROFILE_NAMES);
    for (char* name = strtok(profiles, ", "); name; name = strtok(NULL, ", ")) {
        int found = name[0] == '(';  // an alias, not a column of its own
        for (int i = 0; i < t->n && !found; i++)
            for (int col = 1; col < t->rows[i].n && t->rows[i].header == i && !found; col++)
                found = !strcmp(t->rows[i].cells[col], name);
        size_t used = strlen(bad);
        if (!found) snprintf(bad + used, sizeof(bad) - used, "%sno column for profile %s", used ? "; " : "", name);
    }
    check(device_rows >= N_PROFILE_KEYS - 8 && !bad[0], "constants_device_rows_are_the_profiles",
          "%d rows of device keys; differences from the code: %s", device_rows, bad[0] ? bad : "none");
    bad[0] = 0;
    for (int i = 0; i < t->n && n_fields > 0; i++)
        if (t->rows[i].header != i)
            software_rows += software_row_values(t, &t->rows[i], fields, n_fields, bad, sizeof(bad));
    check(software_rows == n_fields && !bad[0], "constants_software_rows_are_the_setups",
          "%d of %d fields' rows give each software's value; differences from the code: %s", software_rows, n_fields,
          bad[0] ? bad : "none");
    for (int i = 0; i < n_fields; i++) free(fields[i]);
    for (int i = 0; i < n_defines; i++) free(defines[i]);
    free(t->text);
    free(t);
}
