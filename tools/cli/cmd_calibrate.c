/* `cleave calibrate`: measures what the phase-switch policy needs on these
 * devices (prefill rates by prompt length and generation rates by context
 * depth under the layer and the tensor split, and the switch's cost) and
 * writes the rates file that `cleave run --psm-policy auto` reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_LIST 16

typedef struct {
    const char *model, *out;
    cli_placement place;
    int pp[MAX_LIST], depth[MAX_LIST];
    size_t n_pp, n_depth;
    long long n_ctx;
    cli_context_opts cx;
} calib_opts;

static void usage(FILE *out) {
    fprintf(out,
            "usage: cleave calibrate -m MODEL.gguf --devices D -o RATES [options]\n"
            "  -o, --output PATH       the rates file to write\n"
            "  --pp N[,N..]            prompt lengths to time (default 512,4096)\n"
            "  --depths N[,N..]        context depths to time generation at (default 128,4096)\n"
            "  -c, --ctx-size N        context (default: the largest length + 64)\n"
            "  -b, --batch-size N      tokens per forward pass (default 4096)\n"
            "  -ub, --ubatch-size N    layer split: prefill as a pipeline of N-token micro-batches\n"
            "  -t, --threads N         CPU threads of each CPU device (default: the cores, divided\n"
            "                          among cpu:N's N devices)\n"
            "  -ctk T, -ctv T          K and V cache types: f16 (default), f32, bf16, q8_0, q5_0, q4_0\n" CLI_PLACEMENT_HELP);
}

static bool parse(int argc, char **argv, calib_opts *o) {
    o->pp[0] = 512, o->pp[1] = 4096, o->n_pp = 2;
    o->depth[0] = 128, o->depth[1] = 4096, o->n_depth = 2;
    o->cx = cli_context_default(4096);
    cli_usage_for("calibrate", "-m MODEL --devices D -o RATES [flags]");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int pr;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) {
            o->model = v, i++;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) {
            o->out = v, i++;
        } else if (!strcmp(a, "--pp") || !strcmp(a, "--depths")) {
            bool pp = !strcmp(a, "--pp");
            if (!cli_int_list(a, v, pp ? o->pp : o->depth, MAX_LIST, pp ? &o->n_pp : &o->n_depth))
                return false;
            i++;
        } else if ((pr = cli_bench_flag(a, v, &o->n_ctx, &o->cx, &o->place)) != 0) {
            if (pr < 0) return false;
            i++;
        } else {
            cli_bad_option("calibrate", "-m MODEL --devices D -o RATES [flags]", a);
            return false;
        }
    }
    if (!o->model || !o->out) {
        cli_usage_error("calibrate", "-m MODEL --devices D -o RATES [flags]",
                        "-m MODEL and -o RATES are required");
        return false;
    }
    return true;
}

int cmd_calibrate(int argc, char **argv) {
    calib_opts o;
    memset(&o, 0, sizeof o);
    o.place = cli_placement_default();
    o.place.fit = 0;
    if (!parse(argc, argv, &o)) return 1;
    uint32_t pp[MAX_LIST], depth[MAX_LIST];
    long long need = 1;
    for (size_t i = 0; i < o.n_pp; i++) pp[i] = (uint32_t)(o.pp[i] > 0 ? o.pp[i] : 0), need = o.pp[i] > need ? o.pp[i] : need;
    for (size_t i = 0; i < o.n_depth; i++) depth[i] = (uint32_t)(o.depth[i] > 0 ? o.depth[i] : 0), need = o.depth[i] > need ? o.depth[i] : need;
    cleave_context_params cp = cli_context_params(&o.cx, &o.place, (uint32_t)(o.n_ctx ? o.n_ctx : need + 64));
    cp.split_mode = CLEAVE_SPLIT_LAYER;
    cleave_model *m;
    cleave_context *ctx;
    int rc = cli_open(o.model, &cp, &m, &ctx);
    if (rc) return rc;
    fprintf(stderr, "cleave calibrate: %s on %s, context %u\n", o.model, cleave_context_device(ctx),
            cleave_context_n_ctx(ctx));
    cleave_status st = cleave_psm_calibrate(ctx, pp, o.n_pp, depth, o.n_depth, o.out, cli_progress,
                                            (void *)"calibrating");
    if (st) rc = cli_fail("calibration", st);
    else fprintf(stderr, "cleave calibrate: rates written to %s\n", o.out);
    cleave_context_free(ctx);
    cleave_model_free(m);
    return rc;
}
