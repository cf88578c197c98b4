/* `cleave bench`: llama-bench semantics so numbers compare line by line.
 * ppN: N prompt tokens in batches from an empty cache, tokens/s.
 * tgN: N tokens generated one at a time from an empty cache, tokens/s.
 * One warm-up run per test, then -r timed repetitions: mean +- stddev. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define MAX_LIST 16

typedef struct {
    const char *model;
    cli_placement place;
    int pp[MAX_LIST], tg[MAX_LIST], depth[MAX_LIST];
    size_t n_pp, n_tg, n_depth;
    long long reps;
    cli_context_opts cx;
} bench_opts;

static void bench_usage(FILE *out) {
    fprintf(out,
            "usage: cleave bench -m MODEL.gguf [-p 512] [-n 128] [-r 5] [options]\n"
            "  -p, --n-prompt N[,N..]  prompt lengths (ppN tests; default 512, 0 = none)\n"
            "  -n, --n-gen N[,N..]     generation lengths (tgN tests; default 128, 0 = none)\n"
            "  -r, --repetitions N     timed runs per test (default 5)\n"
            "  -d, --n-depth N[,N..]   tokens already in the cache before each test (default 0;\n"
            "                          filled once per depth, each run's own tokens dropped after it)\n"
            "  -ub, --ubatch-size N    layer split: prefill as a pipeline of N-token micro-batches\n"
            "  -t, --threads N         CPU threads of each CPU device (default: the cores, divided\n"
            "                          among cpu:N's N devices)\n"
            "  -b, --batch-size N      tokens per forward pass (default 2048, as llama-bench's -b)\n"
            "  -ctk T, -ctv T          K and V cache types: f16 (default), f32, bf16, q8_0, q5_0, q4_0\n"
            CLI_PLACEMENT_HELP);
}

static bool parse(int argc, char **argv, bench_opts *o) {
    o->pp[0] = 512, o->n_pp = 1;
    o->tg[0] = 128, o->n_tg = 1;
    o->depth[0] = 0, o->n_depth = 1;
    o->reps = 5;
    /* 2048 tokens a pass, as llama-bench's batch: each weight read,
     * unpacked or converted once a pass serves four times the tokens of a
     * 512-token pass, for the activations' memory of 2048 tokens (an
     * H200, pp4096: 8B Q4_K_M 21019 -> 30311 tok/s, gpt-oss-20b 10375 ->
     * 14633; bench/moe-gpu-2026-12-03.md, call AF) */
    o->cx = cli_context_default(2048);
    cli_usage_for("bench", "-m MODEL [flags]");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int pr;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            exit(0);
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) o->model = v, i++;
        else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (!cli_int_list(a, v, o->pp, MAX_LIST, &o->n_pp)) return false;
            i++;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (!cli_int_list(a, v, o->tg, MAX_LIST, &o->n_tg)) return false;
            i++;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) {
            if (!cli_int_list(a, v, o->depth, MAX_LIST, &o->n_depth)) return false;
            i++;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (!cli_int(a, v, 1, 1000, &o->reps)) return false;
            i++;
        } else if ((pr = cli_bench_flag(a, v, NULL, &o->cx, &o->place)) != 0) {
            if (pr < 0) return false;
            i++;
        } else {
            cli_bad_option("bench", "-m MODEL [flags]", a);
            return false;
        }
    }
    if (!o->model) {
        cli_usage_error("bench", "-m MODEL [flags]", "-m MODEL is required");
        return false;
    }
    return true;
}

/* One timed run with the cache holding the first `depth` tokens (filled
 * once per depth, by fill_depth): then the run's own tokens are dropped
 * again, so every repetition starts from the same cache without paying
 * the depth's prefill again. Returns seconds, or a negative value on error. */
static double run_once(cleave_context *ctx, const int32_t *toks, int depth, int n, bool gen) {
    const int32_t *t = toks + depth;
    cleave_status st = CLEAVE_OK;
    double t0 = cli_now();
    if (gen) {
        for (int i = 0; i < n && !st; i++) st = cleave_decode(ctx, &t[i], 1, depth + i, 0, false);
    } else {
        st = cleave_decode(ctx, t, (size_t)n, depth, 0, false);
    }
    double dt = cli_now() - t0;
    if (!st) st = cleave_kv_seq_rm(ctx, 0, depth, -1);
    if (st) {
        cli_fail(gen ? "generation" : "prompt processing", st);
        return -1;
    }
    return dt;
}

/* An empty cache, then the first `depth` tokens (untimed; a deep one
 * takes a while, so its progress shows, and none during the timed runs). */
static int fill_depth(cleave_context *ctx, const int32_t *toks, int depth) {
    cleave_kv_clear(ctx);
    char label[64];
    snprintf(label, sizeof label, "filling the cache to depth %d", depth);
    cleave_context_set_progress(ctx, cli_progress, label);
    cleave_status st = depth ? cleave_decode(ctx, toks, (size_t)depth, 0, 0, false) : CLEAVE_OK;
    cleave_context_set_progress(ctx, NULL, NULL);
    if (st) cli_fail("filling the cache to the depth", st);
    return st ? 1 : 0;
}

static void size_label(char *buf, size_t cap, double params) {
    if (params >= 1e9) snprintf(buf, cap, "%.1fB", params / 1e9);
    else snprintf(buf, cap, "%.0fM", params / 1e6);
}

typedef struct {
    const char *model, *size, *params, *backend;
    double weight_bytes, n_params; /* for the achieved rates */
} bench_cols;

static int run_test(cleave_context *ctx, const bench_opts *o, const bench_cols *cols,
                    const int32_t *toks, int depth, int n, bool gen) {
    if (run_once(ctx, toks, depth, n, gen) < 0) return 1; /* warm-up */
    double sum = 0, sq = 0;
    for (long long r = 0; r < o->reps; r++) {
        double t = run_once(ctx, toks, depth, n, gen);
        if (t < 0) return 1;
        double ts = n / t;
        sum += ts;
        sq += ts * ts;
    }
    double mean = sum / (double)o->reps;
    double var = o->reps > 1 ? (sq - sum * sum / (double)o->reps) / (double)(o->reps - 1) : 0;
    char test[48];
    if (depth)
        snprintf(test, sizeof test, "%s%d @ d%d", gen ? "tg" : "pp", n, depth);
    else
        snprintf(test, sizeof test, "%s%d", gen ? "tg" : "pp", n);
    printf("| %s | %s | %s | %s | %lld | %s | %.2f ± %.2f |\n", cols->model, cols->size,
           cols->params, cols->backend, o->cx.threads, test, mean, sqrt(var > 0 ? var : 0));
    fflush(stdout);
    /* What the rate means against the hardware: decode streams every weight
     * once per token; a prompt token costs about 2 FLOP per parameter. */
    if (gen)
        fprintf(stderr, "%s: %.1f GB/s of weights read\n", test, mean * cols->weight_bytes / 1e9);
    else
        fprintf(stderr, "%s: %.1f TFLOP/s in the matrix products\n", test,
                mean * 2.0 * cols->n_params / 1e12);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    memset(&o, 0, sizeof o);
    o.place = cli_placement_default();
    o.place.fit = 0; /* a benchmark runs the context it asks for, or says why not */
    if (!parse(argc, argv, &o)) return 1;
    int max_n = 1, max_d = 0;
    for (size_t i = 0; i < o.n_pp; i++) max_n = o.pp[i] > max_n ? o.pp[i] : max_n;
    for (size_t i = 0; i < o.n_tg; i++) max_n = o.tg[i] > max_n ? o.tg[i] : max_n;
    for (size_t i = 0; i < o.n_depth; i++) max_d = o.depth[i] > max_d ? o.depth[i] : max_d;
    max_n += max_d;

    cleave_model *m = NULL;
    cleave_context *ctx = NULL;
    int32_t *toks = NULL;
    int rc = 1;
    cleave_context_params cp = cli_context_params(&o.cx, &o.place, (uint32_t)max_n);
    if ((rc = cli_open(o.model, &cp, &m, &ctx))) return rc;
    rc = 1;
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    toks = malloc((size_t)max_n * sizeof *toks);
    if (!toks) goto out;
    /* BOS then pseudo-random ids, as llama-bench does */
    uint32_t s = 12345;
    for (int i = 0; i < max_n; i++) {
        s = s * 1664525u + 1013904223u;
        toks[i] = (int32_t)((s >> 8) % d.n_vocab);
    }
    if (cleave_token_bos(m) >= 0) toks[0] = cleave_token_bos(m);

    char model_col[96], size_col[32], params_col[32], label[16];
    size_label(label, sizeof label, (double)d.n_params);
    snprintf(model_col, sizeof model_col, "%s %s %s", d.arch, label, cleave_type_name(d.weight_type));
    double bytes = (double)d.weight_bytes;
    if (bytes >= 1024.0 * 1048576.0) snprintf(size_col, sizeof size_col, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(size_col, sizeof size_col, "%.2f MiB", bytes / 1048576.0);
    if (d.n_params >= 1000000000ull) snprintf(params_col, sizeof params_col, "%.2f B", d.n_params / 1e9);
    else snprintf(params_col, sizeof params_col, "%.2f M", d.n_params / 1e6);
    if (o.cx.threads == 0) o.cx.threads = sysconf(_SC_NPROCESSORS_ONLN);

    printf("| model | size | params | backend | threads | test | t/s |\n");
    printf("| ----- | ---: | -----: | ------- | ------: | ---: | --: |\n");
    bench_cols cols = {model_col, size_col, params_col, cleave_context_device(ctx),
                       (double)d.weight_bytes, (double)d.n_params};
    if (!strncmp(cols.backend, "cpu", 3)) cols.backend = "CPU";
    rc = 0;
    for (size_t k = 0; k < o.n_depth && !rc; k++) {
        rc = fill_depth(ctx, toks, o.depth[k]);
        for (size_t i = 0; i < o.n_pp && !rc; i++)
            if (o.pp[i] > 0) rc = run_test(ctx, &o, &cols, toks, o.depth[k], o.pp[i], false);
        for (size_t i = 0; i < o.n_tg && !rc; i++)
            if (o.tg[i] > 0) rc = run_test(ctx, &o, &cols, toks, o.depth[k], o.tg[i], true);
    }
out:
    free(toks);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return rc;
}
