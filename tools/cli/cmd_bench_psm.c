/* `cleave bench-psm`: what prefilling under one split mode and generating
 * under another costs and saves, as whole requests.
 *
 * One request (-p P -n N): the process's wall clock from its start through
 * loading the model, the prefill, the switch (with -psm) and the
 * generation, each phase timed, as one markdown row. Run it once per plan
 * (-sm layer, -sm tensor, -psm layer -sm tensor, ...) to compare.
 *
 * A grid (--grid-pp P1,P2.. --grid-tg N1,N2..): the model is loaded once
 * and, for every prompt length, each plan runs one request of that prompt
 * and the largest generation length, timed at every generation length on
 * the way (the first N tokens of a longer answer are the same work as an
 * answer of N tokens). With --psm-rates, the policy's choice at each point
 * (cleave_psm_decide, as `run --psm-policy auto` makes it) and the time of
 * that plan, against the faster pure mode. A plan starts in its prefill
 * mode, as a request does whose context was placed for it.
 *
 * Tokens are pseudo-random ids after BOS (as in `cleave bench`); generated
 * tokens are fed, not sampled, so every plan does the same work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_LIST 16

typedef struct {
    const char *model, *rates, *csv;
    double link_gbs; /* one request: the devices' link in GB/s each way, 0 when not given */
    cli_placement place;
    cli_context_opts cx;
    long long n_ctx, n_prompt, n_gen;
    bool has_psm, control;
    cleave_split_mode psm;
    int grid_pp[MAX_LIST], grid_tg[MAX_LIST];
    size_t n_grid_pp, n_grid_tg;
} psm_opts;

static void usage(FILE *out) {
    fprintf(out,
            "usage: cleave bench-psm -m MODEL.gguf --devices D [-psm M] -sm M [-p 58248 -n 128]\n"
            "       cleave bench-psm -m MODEL.gguf --devices D --grid-pp L --grid-tg L [--psm-rates F]\n"
            "  -p, --n-prompt N        one request: prompt tokens (default 4096)\n"
            "  -n, --n-gen N           one request: generated tokens (default 128)\n"
            "  -psm, --prefill-split-mode M  one request: prefill under M, then switch to -sm\n"
            "  --grid-pp N[,N..]       a grid: prompt lengths\n"
            "  --grid-tg N[,N..]       a grid: generation lengths\n"
            "  --psm-rates PATH        a grid: the rates file (cleave calibrate) the policy decides by\n"
            "  --control               a grid: also time prefill tensor, then generate layer\n"
            "  --csv PATH              a grid: every time measured, one line per point\n"
            "  --link-gbs G            one request: the devices' link in GB/s each way (a measured\n"
            "                          peer copy rate): the switch's least time beside its time\n"
            "  -c, --ctx-size N        context (default: the longest request)\n"
            "  -b, --batch-size N      tokens per forward pass (default 4096)\n"
            "  -ub, --ubatch-size N    layer split: prefill as a pipeline of N-token micro-batches\n"
            "  -t, --threads N         CPU threads of each CPU device (default: the cores, divided\n"
            "                          among cpu:N's N devices)\n"
            "  -ctk T, -ctv T          K and V cache types: f16 (default), f32, bf16, q8_0, q5_0, q4_0\n" CLI_PLACEMENT_HELP);
}

static bool parse(int argc, char **argv, psm_opts *o) {
    o->n_prompt = 4096, o->n_gen = 128;
    o->cx = cli_context_default(4096);
    cli_usage_for("bench-psm", "-m MODEL --devices D [flags]");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int pr;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) {
            o->model = v, i++;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (!cli_int(a, v, 1, 1 << 24, &o->n_prompt)) return false;
            i++;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (!cli_int(a, v, 0, 1 << 24, &o->n_gen)) return false;
            i++;
        } else if (!strcmp(a, "-psm") || !strcmp(a, "--prefill-split-mode")) {
            if (cli_split_mode(a, v, &o->psm)) return false;
            o->has_psm = true, i++;
        } else if (!strcmp(a, "--grid-pp") || !strcmp(a, "--grid-tg")) {
            bool pp = !strcmp(a, "--grid-pp");
            if (!cli_int_list(a, v, pp ? o->grid_pp : o->grid_tg, MAX_LIST, pp ? &o->n_grid_pp : &o->n_grid_tg))
                return false;
            i++;
        } else if (!strcmp(a, "--psm-rates") && v) {
            o->rates = v, i++;
        } else if (!strcmp(a, "--csv") && v) {
            o->csv = v, i++;
        } else if (!strcmp(a, "--link-gbs")) {
            if (!cli_positive(a, v, &o->link_gbs)) return false;
            i++;
        } else if (!strcmp(a, "--control")) {
            o->control = true;
        } else if ((pr = cli_bench_flag(a, v, &o->n_ctx, &o->cx, &o->place)) != 0) {
            if (pr < 0) return false;
            i++;
        } else {
            cli_bad_option("bench-psm", "-m MODEL --devices D [flags]", a);
            return false;
        }
    }
    if (!o->model) {
        cli_usage_error("bench-psm", "-m MODEL --devices D [flags]", "-m MODEL is required");
        return false;
    }
    if (!o->n_grid_pp != !o->n_grid_tg) {
        fprintf(stderr, "cleave bench-psm: a grid needs both --grid-pp and --grid-tg\n");
        return false;
    }
    for (size_t i = 0; i < o->n_grid_pp + o->n_grid_tg; i++) {
        int v = i < o->n_grid_pp ? o->grid_pp[i] : o->grid_tg[i - o->n_grid_pp];
        if (v < 1) {
            fprintf(stderr, "cleave bench-psm: grid lengths must be positive\n");
            return false;
        }
    }
    return true;
}

/* The context in `mode`, its cache emptied first (a switch then moves the
 * weights alone); progress hidden. */
static int enter_mode(cleave_context *ctx, cleave_split_mode mode) {
    cleave_kv_clear(ctx);
    if (cleave_context_split_mode(ctx) == mode) return 0;
    cleave_context_set_progress(ctx, NULL, NULL);
    cleave_status st = cleave_context_set_split_mode(ctx, mode, NULL, 0);
    return st ? cli_fail("switching split mode", st) : 0;
}

typedef struct {
    double prefill, sw, end[MAX_LIST]; /* seconds from the request's start */
    size_t sw_bytes;                     /* moved by the switch, all devices */
    size_t sw_link;                      /* the most one device sent or received from another */
} request_times;

/* One request on ctx (in its prefill mode): n_prompt tokens, a switch to
 * gen_mode if it differs, then generation with the time taken at each of
 * the marks (increasing generation lengths). */
static int time_request(cleave_context *ctx, const int32_t *toks, size_t n_prompt, cleave_split_mode gen_mode,
                        const int *marks, size_t n_marks, request_times *out) {
    memset(out, 0, sizeof *out);
    double t0 = cli_now();
    cleave_status st = cleave_decode(ctx, toks, n_prompt, 0, 0, false);
    if (st) return cli_fail("prompt processing", st);
    out->prefill = cli_now() - t0;
    if (cleave_context_split_mode(ctx) != gen_mode) {
        cleave_context_set_progress(ctx, NULL, NULL);
        double ts = cli_now();
        if ((st = cleave_context_set_split_mode(ctx, gen_mode, NULL, 0))) return cli_fail("switch", st);
        out->sw = cli_now() - ts;
        cleave_switch_report r;
        if (!cleave_context_switch_report(ctx, &r))
            for (size_t d = 0; d < r.n_devices; d++) {
                out->sw_bytes += r.bytes_in[d];
                size_t most = r.peer_in[d] > r.peer_out[d] ? r.peer_in[d] : r.peer_out[d];
                if (most > out->sw_link) out->sw_link = most;
            }
    }
    size_t k = 0;
    for (int i = 0; k < n_marks; i++) {
        while (k < n_marks && marks[k] == i) out->end[k++] = cli_now() - t0;
        if (k == n_marks) break;
        if ((st = cleave_decode(ctx, &toks[n_prompt + (size_t)i], 1, (int32_t)(n_prompt + (size_t)i), 0, false)))
            return cli_fail("generation", st);
    }
    return 0;
}

static int32_t *make_tokens(const cleave_model *m, size_t n) {
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    int32_t *t = malloc(n * sizeof *t);
    if (!t) {
        fprintf(stderr, "cleave bench-psm: out of memory for %zu tokens\n", n);
        return NULL;
    }
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        t[i] = (int32_t)((s >> 8) % d.n_vocab);
    }
    if (cleave_token_bos(m) >= 0) t[0] = cleave_token_bos(m);
    return t;
}

/* ---- one request, wall clock from the process's start -------------------- */

static int one_request(const psm_opts *o, double t_start) {
    size_t n_total = (size_t)(o->n_prompt + o->n_gen);
    cleave_context_params cp =
        cli_context_params(&o->cx, &o->place, (uint32_t)(o->n_ctx ? o->n_ctx : (long long)n_total));
    cleave_split_mode gen_mode = cp.split_mode, pre_mode = o->has_psm ? o->psm : cp.split_mode;
    cp.split_mode = pre_mode;
    cleave_model *m;
    cleave_context *ctx;
    int rc = cli_open(o->model, &cp, &m, &ctx);
    if (rc) return rc;
    double t_loaded = cli_now();
    int32_t *toks = make_tokens(m, n_total);
    request_times t;
    int mark = (int)o->n_gen;
    rc = toks ? time_request(ctx, toks, (size_t)o->n_prompt, gen_mode, &mark, 1, &t) : 1;
    if (!rc) {
        double load = t_loaded - t_start, gen = t.end[0] - t.prefill - t.sw;
        char plan[48];
        if (pre_mode == gen_mode) snprintf(plan, sizeof plan, "%s", cleave_split_mode_name(gen_mode));
        else snprintf(plan, sizeof plan, "%s, then %s", cleave_split_mode_name(pre_mode), cleave_split_mode_name(gen_mode));
        printf("| plan | prompt | generated | load s | prefill s | pp tok/s | switch s | switch GB | "
               "generation s | tg tok/s | wall s |\n");
        printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        printf("| %s | %lld | %lld | %.3f | %.3f | %.0f | %.3f | %.2f | %.3f | %.1f | %.3f |\n", plan,
               o->n_prompt, o->n_gen, load, t.prefill, o->n_prompt / t.prefill, t.sw, t.sw_bytes / 1e9,
               gen, gen > 0 ? o->n_gen / gen : 0.0, load + t.end[0]);
        cleave_switch_report r;
        if (t.sw > 0 && !cleave_context_switch_report(ctx, &r))
            fprintf(stderr,
                    "switch: %.1f ms (prepare %.1f, allocate %.1f, copy %.1f, free %.1f), KV %.2f GB\n",
                    r.seconds * 1e3, r.seconds_prepare * 1e3, r.seconds_alloc * 1e3, r.seconds_copy * 1e3,
                    r.seconds_free * 1e3, r.kv_bytes / 1e9);
        /* the switch against its limit: the busiest device's copies over its link */
        if (t.sw > 0 && o->link_gbs > 0)
            printf("\nswitch %.1f ms; the busiest device sent or received %.3f GB from another: at %.0f GB/s a "
                   "link, at least %.1f ms\n",
                   t.sw * 1e3, t.sw_link / 1e9, o->link_gbs, t.sw_link / (o->link_gbs * 1e9) * 1e3);
    }
    free(toks);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return rc;
}

/* ---- the grid ---------------------------------------------------------------- */

enum { PLAN_LAYER, PLAN_TENSOR, PLAN_LT, PLAN_TL, N_PLANS };
static const char *const plan_names[N_PLANS] = {"layer", "tensor", "layer, then tensor", "tensor, then layer"};
static const char *const plan_ids[N_PLANS] = {"layer", "tensor", "layer-tensor", "tensor-layer"}; /* CSV */
static const cleave_split_mode plan_pre[N_PLANS] = {CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR,
                                                     CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR};
static const cleave_split_mode plan_gen[N_PLANS] = {CLEAVE_SPLIT_LAYER, CLEAVE_SPLIT_TENSOR,
                                                     CLEAVE_SPLIT_TENSOR, CLEAVE_SPLIT_LAYER};

static int plan_of(const cleave_psm_decision *d) {
    if (d->prefill == d->generate) return d->prefill == CLEAVE_SPLIT_TENSOR ? PLAN_TENSOR : PLAN_LAYER;
    return d->prefill == CLEAVE_SPLIT_LAYER ? PLAN_LT : PLAN_TL;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int grid(psm_opts *o) {
    qsort(o->grid_pp, o->n_grid_pp, sizeof(int), cmp_int);
    qsort(o->grid_tg, o->n_grid_tg, sizeof(int), cmp_int);
    int max_pp = o->grid_pp[o->n_grid_pp - 1], max_tg = o->grid_tg[o->n_grid_tg - 1];
    size_t n_total = (size_t)max_pp + (size_t)max_tg;
    cleave_context_params cp =
        cli_context_params(&o->cx, &o->place, (uint32_t)(o->n_ctx ? o->n_ctx : (long long)n_total));
    cp.split_mode = CLEAVE_SPLIT_LAYER;
    cleave_model *m;
    cleave_context *ctx;
    int rc = cli_open(o->model, &cp, &m, &ctx);
    if (rc) return rc;
    FILE *csv = NULL;
    int32_t *toks = make_tokens(m, n_total);
    rc = toks ? 0 : 1;
    if (!rc && o->csv && !(csv = fopen(o->csv, "w"))) {
        fprintf(stderr, "cleave bench-psm: cannot write %s\n", o->csv);
        rc = 1;
    }
    if (csv) fprintf(csv, "prompt,generated,plan,prefill_s,switch_s,switch_bytes,total_s,auto_plan\n");
    /* warm-up: every mode's kernels and decode graphs run once, with a
     * whole batch, so that what starts with the first large all-reduce
     * (NCCL) is not timed */
    const int warm_mark[1] = {max_tg < 16 ? max_tg : 16}; /* within the context: max_pp + max_tg */
    size_t warm = cp.n_batch ? cp.n_batch : 512;
    if (warm > (size_t)max_pp) warm = (size_t)max_pp;
    request_times t;
    for (int p = PLAN_LAYER; !rc && p <= PLAN_TENSOR; p++)
        if (!(rc = enter_mode(ctx, plan_pre[p]))) rc = time_request(ctx, toks, warm, plan_gen[p], warm_mark, 1, &t);
    printf("| prompt | generated | layer s | tensor s | layer, then tensor s |%s best pure s | auto: plan | "
           "auto s | auto / best pure |\n",
           o->control ? " tensor, then layer s |" : "");
    printf("| ---: | ---: | ---: | ---: | ---: |%s ---: | --- | ---: | ---: |\n", o->control ? " ---: |" : "");
    int n_plans = o->control ? N_PLANS : PLAN_TL;
    for (size_t i = 0; !rc && i < o->n_grid_pp; i++) {
        request_times rt[N_PLANS];
        for (int p = 0; !rc && p < n_plans; p++) {
            if (!(rc = enter_mode(ctx, plan_pre[p])))
                rc = time_request(ctx, toks, (size_t)o->grid_pp[i], plan_gen[p], o->grid_tg, o->n_grid_tg, &rt[p]);
            fprintf(stderr, "prompt %d, %s: prefill %.3f s, switch %.3f s, %d tokens at %.3f s\n",
                    o->grid_pp[i], plan_names[p], rt[p].prefill, rt[p].sw, max_tg, rt[p].end[o->n_grid_tg - 1]);
        }
        for (size_t k = 0; !rc && k < o->n_grid_tg; k++) {
            double best = rt[PLAN_LAYER].end[k] < rt[PLAN_TENSOR].end[k] ? rt[PLAN_LAYER].end[k]
                                                                         : rt[PLAN_TENSOR].end[k];
            int chosen = -1;
            cleave_psm_decision d;
            if (o->rates) {
                cleave_status st = cleave_psm_decide(o->rates, (uint32_t)o->grid_pp[i], (uint32_t)o->grid_tg[k],
                                                     0.02, &d);
                if (st) {
                    rc = cli_fail("--psm-rates", st);
                    break;
                }
                chosen = plan_of(&d);
                if (chosen >= n_plans) chosen = -1; /* not timed without --control */
            }
            printf("| %d | %d | %.3f | %.3f | %.3f |", o->grid_pp[i], o->grid_tg[k], rt[PLAN_LAYER].end[k],
                   rt[PLAN_TENSOR].end[k], rt[PLAN_LT].end[k]);
            if (o->control) printf(" %.3f |", rt[PLAN_TL].end[k]);
            if (chosen >= 0)
                printf(" %.3f | %s | %.3f | %.3f |\n", best, plan_names[chosen], rt[chosen].end[k],
                       rt[chosen].end[k] / best);
            else
                printf(" %.3f | %s | | |\n", best, o->rates ? "(tensor, then layer: untimed)" : "-");
            for (int p = 0; csv && p < n_plans; p++)
                fprintf(csv, "%d,%d,%s,%.6f,%.6f,%zu,%.6f,%s\n", o->grid_pp[i], o->grid_tg[k], plan_ids[p],
                        rt[p].prefill, rt[p].sw, rt[p].sw_bytes, rt[p].end[k],
                        chosen == p ? "yes" : "no");
        }
        fflush(stdout);
        if (csv) fflush(csv);
    }
    if (csv) fclose(csv);
    free(toks);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return rc;
}

int cmd_bench_psm(int argc, char **argv) {
    double t_start = cli_now();
    psm_opts o;
    memset(&o, 0, sizeof o);
    o.place = cli_placement_default();
    o.place.fit = 0; /* a benchmark runs the context it asks for, or says why not */
    if (!parse(argc, argv, &o)) return 1;
    return o.n_grid_pp ? grid(&o) : one_request(&o, t_start);
}
