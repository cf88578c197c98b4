/* What every subcommand shares: flag parsing, the context parameters the
 * flags make, progress, opening a model and its context (cli.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "base/error.h"
#include "base/file.h"

int cli_fail(const char *what, cleave_status st) {
    fprintf(stderr, "cleave: %s: %s (%s)\n", what, cleave_last_error(), cleave_status_name(st));
    return 1;
}

/* The subcommand whose command line is being read (cli_usage_for). */
static const char *usage_cmd, *usage_synopsis;

void cli_usage_for(const char *cmd, const char *synopsis) {
    usage_cmd = cmd;
    usage_synopsis = synopsis;
}

static void missing_value(const char *flag) {
    if (usage_cmd) cli_usage_error(usage_cmd, usage_synopsis, "%s needs a value", flag);
    else fprintf(stderr, "cleave: %s needs a value\n", flag);
}

int cli_usage_error(const char *cmd, const char *synopsis, const char *fmt, ...) {
    fprintf(stderr, "usage: cleave %s %s\n", cmd, synopsis);
    fprintf(stderr, "run 'cleave %s --help' for the flags\n", cmd);
    fprintf(stderr, "cleave %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}

int cli_bad_option(const char *cmd, const char *synopsis, const char *arg) {
    if (arg[0] == '-' && arg[1])
        return cli_usage_error(cmd, synopsis, "unknown option '%s' (or it lacks its value)", arg);
    return cli_usage_error(cmd, synopsis, "unexpected argument '%s'", arg);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

void cli_unescape(char *s) {
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r != '\\' || !r[1]) {
            *w++ = *r;
            continue;
        }
        char c = *++r;
        if (c == 'n') *w++ = '\n';
        else if (c == 't') *w++ = '\t';
        else if (c == 'r') *w++ = '\r';
        else if (c == '\\' || c == '"' || c == '\'') *w++ = c;
        else if (c == 'x' && hex_digit(r[1]) >= 0 && hex_digit(r[2]) >= 0) {
            *w++ = (char)(hex_digit(r[1]) * 16 + hex_digit(r[2]));
            r += 2;
        } else { /* not an escape: kept as written */
            *w++ = '\\';
            *w++ = c;
        }
    }
    *w = '\0';
}

uint64_t cli_resolve_seed(long long seed) {
    if (seed >= 0) {
        fprintf(stderr, "cleave: seed: %lld\n", seed);
        return (uint64_t)seed;
    }
    /* the clock's nanoseconds and the process id, mixed (splitmix64's
     * finalizer) so runs started together still differ; 32 bits, as
     * llama.cpp's, to be short enough to copy into -s */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32;
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    uint64_t s = x & 0xFFFFFFFFull;
    fprintf(stderr, "cleave: seed: %llu (random; -s %llu repeats this run)\n", (unsigned long long)s,
            (unsigned long long)s);
    return s;
}

bool cli_int(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    if (!v) {
        missing_value(flag);
        return false;
    }
    long long x = strtoll(v, &end, 10);
    if (*v == 0 || *end || x < lo || x > hi) {
        fprintf(stderr, "cleave: %s: '%s' is not a number in [%lld, %lld]\n", flag, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

bool cli_float(const char *flag, const char *v, float *out) {
    char *end;
    if (!v) {
        missing_value(flag);
        return false;
    }
    float x = strtof(v, &end);
    if (*v == 0 || *end || x != x) {
        fprintf(stderr, "cleave: %s: '%s' is not a number\n", flag, v);
        return false;
    }
    *out = x;
    return true;
}

bool cli_positive(const char *flag, const char *v, double *out) {
    float x;
    if (!cli_float(flag, v, &x)) return false;
    if (!(x > 0) || x > 1e30f) {
        fprintf(stderr, "cleave: %s: '%s' is not a number above 0\n", flag, v);
        return false;
    }
    *out = x;
    return true;
}

bool cli_int_list(const char *flag, const char *v, int *out, size_t cap, size_t *n) {
    *n = 0;
    if (!v) {
        missing_value(flag);
        return false;
    }
    char *buf = strdup(v);
    bool ok = buf != NULL;
    for (char *save = NULL, *tok = ok ? strtok_r(buf, ",", &save) : NULL; ok && tok;
         tok = strtok_r(NULL, ",", &save)) {
        long long x;
        if (*n == cap) {
            fprintf(stderr, "cleave: %s: at most %zu values\n", flag, cap);
            ok = false;
        } else if (!cli_int(flag, tok, 0, 1 << 24, &x)) {
            ok = false;
        } else {
            out[(*n)++] = (int)x;
        }
    }
    free(buf);
    if (ok && !*n) { /* "" or only commas: say so rather than fail in silence */
        fprintf(stderr, "cleave: %s needs at least one number (got '%s')\n", flag, v);
        ok = false;
    }
    return ok;
}

/* "a,b,c" of numbers >= 0 into out[cap]; false (printed) when bad. */
static bool number_list(const char *flag, const char *v, double *out, size_t cap, size_t *n) {
    *n = 0;
    const char *at = v;
    while (*at) {
        char *end;
        double x = strtod(at, &end);
        if (end == at || !(x >= 0) || x > 1e12 || (*end && *end != ',') || *n == cap) {
            fprintf(stderr, "cleave: %s: expected up to %zu numbers >= 0 separated by commas, got '%s'\n",
                    flag, cap, v);
            return false;
        }
        out[(*n)++] = x;
        at = *end ? end + 1 : end;
    }
    if (!*n) fprintf(stderr, "cleave: %s needs a value\n", flag);
    return *n > 0;
}

int cli_bench_flag(const char *flag, const char *v, long long *n_ctx, cli_context_opts *cx,
                   cli_placement *pl) {
    if (n_ctx && (!strcmp(flag, "-c") || !strcmp(flag, "--ctx-size")))
        return cli_int(flag, v, 0, 1 << 24, n_ctx) ? 1 : -1;
    int pr = cli_context_flag(flag, v, cx);
    return pr ? pr : cli_placement_flag(flag, v, pl);
}

int cli_split_mode(const char *flag, const char *v, cleave_split_mode *out) {
    if (!strcmp(v, "none")) *out = CLEAVE_SPLIT_NONE;
    else if (!strcmp(v, "layer")) *out = CLEAVE_SPLIT_LAYER;
    else if (!strcmp(v, "tensor") || !strcmp(v, "row")) *out = CLEAVE_SPLIT_TENSOR;
    else {
        fprintf(stderr, "cleave: %s: expected none, layer or tensor, got '%s'\n", flag, v);
        return -1;
    }
    return 0;
}

char *cli_read_file(const char *path, size_t *len) {
    *len = 0;
    FILE *f;
    if (file_fopen_read(path, &f)) return NULL; /* a FIFO, device or directory too (cleave_last_error says) */
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    if (!buf) err_set(CLEAVE_ERR_OOM, "%s: out of memory reading it", path);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (buf && failed) free(buf), buf = NULL;
    if (buf) buf[n] = '\0', *len = n;
    return buf;
}

int cli_placement_flag(const char *flag, const char *v, cli_placement *p) {
#define IS(s) (!strcmp(flag, s))
    if (!(IS("--device") || IS("--devices") || IS("-ngl") || IS("--n-gpu-layers") || IS("-sm") ||
          IS("--split-mode") || IS("-ts") || IS("--tensor-split") || IS("-mg") || IS("--main-gpu") ||
          IS("--vram-budget") || IS("--fit") || IS("--fit-ctx") || IS("--kv-vram-cells")))
        return 0;
    if (!v) {
        missing_value(flag);
        return -1;
    }
    double xs[CLEAVE_MAX_DEVICES];
    size_t n;
    if (IS("-ngl") || IS("--n-gpu-layers")) {
        /* all layers or none: a CPU/GPU mix is not offered */
        long long k;
        if (!cli_int(flag, v, 0, 1 << 20, &k)) return -1;
        p->devices = k > 0 ? "cuda:0" : "cpu";
        /* as llama.cpp: a request for GPU layers where there is no GPU
         * runs on the CPU, saying so, rather than failing */
        if (k > 0 && cleave_gpu_count() == 0) {
            fprintf(stderr, "cleave: warning: no GPU: running on the CPU (%s %s ignored)\n", flag,
                    v);
            p->devices = "cpu";
        }
        p->explicit_split = true;
    } else if (IS("--device") || IS("--devices")) {
        p->devices = v;
    } else if (IS("-sm") || IS("--split-mode")) {
        if (cli_split_mode(flag, v, &p->mode)) return -1;
    } else if (IS("-ts") || IS("--tensor-split")) {
        if (!number_list(flag, v, xs, CLEAVE_MAX_DEVICES, &n)) return -1;
        for (size_t i = 0; i < n; i++) p->shares[i] = (float)xs[i];
        p->n_shares = n;
    } else if (IS("--fit")) {
        if (strcmp(v, "on") && strcmp(v, "off")) {
            fprintf(stderr, "cleave: --fit: expected on or off, got '%s'\n", v);
            return -1;
        }
        p->fit = !strcmp(v, "on");
    } else if (IS("--fit-ctx")) {
        if (!cli_int(flag, v, 1, 1 << 24, &p->fit_ctx)) return -1;
    } else if (IS("--kv-vram-cells")) {
        if (!strcmp(v, "auto")) p->kv_vram_cells = CLEAVE_KV_VRAM_AUTO;
        else if (!strcmp(v, "all")) p->kv_vram_cells = CLEAVE_KV_VRAM_ALL;
        else if (!cli_int(flag, v, 0, 1 << 24, &p->kv_vram_cells)) return -1;
    } else if (IS("-mg") || IS("--main-gpu")) {
        if (!cli_int(flag, v, 0, CLEAVE_MAX_DEVICES - 1, &p->main_device)) return -1;
    } else {
        if (!number_list(flag, v, xs, CLEAVE_MAX_DEVICES, &n)) return -1;
        for (size_t i = 0; i < n; i++) p->budgets[i] = (size_t)(xs[i] * 1048576.0);
        p->n_budgets = n;
    }
    return 1;
#undef IS
}

void cli_memory_report(const cleave_context *ctx, bool peak) {
    for (size_t d = 0; d < cleave_context_n_devices(ctx); d++) {
        cleave_device_memory m;
        if (cleave_context_memory(ctx, d, &m)) continue;
        double mib = 1048576.0;
        size_t planned = m.planned_weights + m.planned_kv + m.planned_compute;
        fprintf(stderr, "cleave: %-28s planned %9.1f MiB (weights %.1f, KV %.1f, compute %.1f)",
                m.name, planned / mib, m.planned_weights / mib, m.planned_kv / mib,
                m.planned_compute / mib);
        /* the placement's own: equal to the planned compute less the collectives */
        fprintf(stderr, ", compute allocated %.1f MiB", m.compute / mib);
        if (m.planned_collective) fprintf(stderr, " + all-reduce %.1f MiB", m.planned_collective / mib);
        if (m.planned_kv_host)
            fprintf(stderr, "; KV tiers: %u cells a layer in device memory, host %.1f MiB, staging %.1f MiB",
                    m.kv_vram_cells, m.planned_kv_host / mib, m.kv_staging / mib);
        if (peak) fprintf(stderr, ", peak %.1f MiB", m.peak / mib);
        if (m.budget) fprintf(stderr, ", budget %.1f MiB", m.budget / mib);
        if (m.n_threads) fprintf(stderr, ", %u thread%s", m.n_threads, m.n_threads == 1 ? "" : "s");
        /* GPUs: the device's own count, as nvidia-smi shows it (the CUDA
         * context and library workspaces on top of the allocations) */
        if (peak && m.device_used) fprintf(stderr, ", device in use %.1f MiB", m.device_used / mib);
        /* a tensor split: the slice this device got, in the whole units
         * (quant blocks) the shares were rounded to */
        if (m.head_unit)
            fprintf(stderr, "; kv heads %u-%u, FFN rows %u-%u (shares rounded to %u kv head%s and %u rows)",
                    m.kv_heads[0], m.kv_heads[1], m.ff_rows[0], m.ff_rows[1], m.head_unit,
                    m.head_unit == 1 ? "" : "s", m.ff_unit);
        fprintf(stderr, "\n");
    }
}

cli_context_opts cli_context_default(long long n_batch) {
    return (cli_context_opts){.threads = 0, .n_batch = n_batch, .n_ubatch = 0, .kv_type = CLEAVE_TYPE_F16,
                              .kv_type_v = CLEAVE_KV_TYPE_AS_K};
}

int cli_context_flag(const char *flag, const char *v, cli_context_opts *o) {
    if (!strcmp(flag, "-t") || !strcmp(flag, "--threads"))
        return cli_int(flag, v, 0, 1024, &o->threads) ? 1 : -1;
    if (!strcmp(flag, "-b") || !strcmp(flag, "--batch-size"))
        return cli_int(flag, v, 1, 1 << 20, &o->n_batch) ? 1 : -1;
    if (!strcmp(flag, "-ub") || !strcmp(flag, "--ubatch-size"))
        return cli_int(flag, v, 0, 1 << 20, &o->n_ubatch) ? 1 : -1;
    bool k = !strcmp(flag, "-ctk") || !strcmp(flag, "--cache-type-k") || !strcmp(flag, "--cache-type");
    if (k || !strcmp(flag, "-ctv") || !strcmp(flag, "--cache-type-v")) {
        if (v && cleave_type_from_name(v, k ? &o->kv_type : &o->kv_type_v) == CLEAVE_OK) return 1;
        fprintf(stderr, "cleave: %s: unknown type '%s' (f16, f32, bf16, q8_0, q5_0, q4_0)\n", flag, v ? v : "");
        return -1;
    }
    return 0;
}

bool cli_phase_warning(const cleave_context *ctx) {
    static cleave_placement_report r; /* large: not on the stack */
    if (cleave_context_placement(ctx, &r) || !r.two_phases || r.switch_fits[CLEAVE_PHASE_GENERATE]) return true;
    fprintf(stderr, "cleave: warning: %s; answers are generated in %s mode\n", r.why,
            cleave_split_mode_name(r.phase[CLEAVE_PHASE_PREFILL].mode));
    return false;
}

cli_placement cli_placement_default(void) {
    cli_placement p;
    memset(&p, 0, sizeof p);
    p.fit = -1;
    p.kv_vram_cells = CLEAVE_KV_VRAM_ALL;
    return p;
}

cleave_context_params cli_context_params(const cli_context_opts *cx, const cli_placement *pl, uint32_t n_ctx) {
    cleave_context_params cp = cleave_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = (uint32_t)cx->n_batch;
    cp.n_ubatch = (uint32_t)cx->n_ubatch;
    cp.n_threads = (int)cx->threads;
    cp.kv_type = cx->kv_type;
    cp.kv_type_v = cx->kv_type_v;
    cli_placement_apply(pl, &cp);
    return cp;
}

int cli_phase_flag(const char *flag, const char *v, cli_placement *p) {
    bool psm = !strcmp(flag, "-psm") || !strcmp(flag, "--prefill-split-mode");
    bool pts = !strcmp(flag, "-pts") || !strcmp(flag, "--prefill-tensor-split");
    if (!psm && !pts) return 0;
    if (!v) {
        missing_value(flag);
        return -1;
    }
    if (psm) {
        if (cli_split_mode(flag, v, &p->psm)) return -1;
        p->has_psm = true;
        return 1;
    }
    double xs[CLEAVE_MAX_DEVICES];
    size_t n;
    if (!number_list(flag, v, xs, CLEAVE_MAX_DEVICES, &n)) return -1;
    for (size_t i = 0; i < n; i++) p->prefill_shares[i] = (float)xs[i];
    p->n_prefill_shares = n;
    return 1;
}

bool cli_phased(const cli_placement *p) { return p->has_psm && p->psm != p->mode; }

bool cli_phase_check(const cli_placement *p, const char *cmd, const char *synopsis) {
    if (p->n_prefill_shares && !cli_phased(p)) {
        cli_usage_error(cmd, synopsis,
                        "-pts gives the prefill phase's shares: it needs -psm with another mode than -sm "
                        "(one mode for both phases takes -ts)");
        return false;
    }
    return true;
}

void cli_placement_apply(const cli_placement *p, cleave_context_params *cp) {
    /* fit stays on while some phase has no shares of its own to fit */
    bool phased = cli_phased(p);
    bool every_phase_shared = p->n_shares && (!phased || p->n_prefill_shares);
    cp->fit = p->fit < 0 ? !(p->explicit_split || every_phase_shared) : p->fit == 1;
    cp->prefill_split_mode = phased ? p->psm : CLEAVE_SPLIT_AS_GENERATE;
    cp->prefill_shares = phased && p->n_prefill_shares ? p->prefill_shares : NULL;
    cp->n_prefill_shares = phased ? p->n_prefill_shares : 0;
    cp->fit_min_ctx = (uint32_t)p->fit_ctx;
    cp->devices = p->devices;
    cp->split_mode = p->mode;
    cp->shares = p->n_shares ? p->shares : NULL;
    cp->n_shares = p->n_shares;
    cp->budgets = p->n_budgets ? p->budgets : NULL;
    cp->n_budgets = p->n_budgets;
    cp->main_device = (int)p->main_device;
    cp->kv_vram_cells = p->kv_vram_cells;
}

bool cli_progress(float fraction, void *label) {
    /* one line per bar: redraw on change, end the line at 100% once; a
     * lower value than the last one starts a new bar */
    static int last = -1;
    int pct = (int)(fraction * 100.0f);
    if (pct > 100) pct = 100;
    if (pct != last) {
        fprintf(stderr, "\r%s: %3d%%", label ? (const char *)label : "progress", pct);
        if (pct == 100) fprintf(stderr, "\n");
        last = pct;
    }
    return true;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cli_new_context(cleave_model *m, const cleave_context_params *cp, cleave_context **ctx) {
    *ctx = NULL;
    cleave_context_params p = *cp;
    /* the CPU maps the file (nothing to show); other devices copy it */
    bool copies = p.devices && strncmp(p.devices, "cpu", 3) != 0;
    if (copies && !p.progress) {
        p.progress = cli_progress;
        p.progress_user = (void *)"loading weights";
    }
    cleave_status st = cleave_context_new(m, &p, ctx);
    if (st) return cli_fail("creating context", st);
    /* as llama.cpp: past the trained length positions are untrained ground */
    cleave_model_desc d;
    if (cleave_model_describe(m, &d) == CLEAVE_OK && d.n_ctx_train &&
        cleave_context_n_ctx(*ctx) > d.n_ctx_train)
        fprintf(stderr,
                "cleave: warning: the context of %u tokens is larger than the model's training "
                "context of %u; text past %u tokens may degrade\n",
                cleave_context_n_ctx(*ctx), d.n_ctx_train, d.n_ctx_train);
    return 0;
}

int cli_open(const char *path, const cleave_context_params *cp, cleave_model **m,
             cleave_context **ctx) {
    *m = NULL;
    *ctx = NULL;
    cleave_status st = cleave_model_load(path, NULL, m);
    if (st) return cli_fail("loading model", st);
    int rc = cli_new_context(*m, cp, ctx);
    if (rc) {
        cleave_model_free(*m);
        *m = NULL;
    }
    return rc;
}

