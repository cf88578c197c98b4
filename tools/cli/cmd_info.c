/* `cleave info`: what a model is (architecture, shapes, tensors, memory),
 * and with placement flags, "will it fit": each phase's placement per
 * device, the switch's peak and the largest context under each mode, from
 * cleave_placement_preview, without placing anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define INFO_SYNOPSIS "MODEL.gguf [-c CONTEXT] [--devices D -sm M [-psm M] [-ts L] [-pts L] ...]"

static void info_usage(void) {
    printf("usage: cleave info " INFO_SYNOPSIS "\n"
           "  the model's architecture, shapes, tensors and memory on stdout; with placement\n"
           "  flags, where each phase would go on the devices, the split-mode switch's peak and\n"
           "  the largest context of each mode, without loading the weights\n"
           "  -c, --ctx-size N        the context (default: the model's, at most 4096)\n"
           "  -b, --batch-size N      tokens per forward pass (default 512)\n"
           "  -ctk, -ctv TYPE         the K and V cache types (default f16)\n"
           "  -psm, --prefill-split-mode M  the prefill phase's mode (with -sm: the generation's)\n"
           "  -pts, --prefill-tensor-split L  the prefill phase's shares\n"
           "  --psm-keep-both         a switch keeps both placements resident\n"
           "  --link-gbs G            the devices' link in GB/s each way (e.g. a measured peer copy\n"
           "                          rate): the least time the switch's copies take\n" CLI_PLACEMENT_HELP);
}

static double mib(size_t b) { return b / 1048576.0; }

/* "60.0,40.0" of the shares (percent), "equal"-free: as placed. */
static void shares_text(const double *w, size_t n, char *buf, size_t cap) {
    double sum = 0;
    for (size_t d = 0; d < n; d++) sum += w[d];
    size_t at = 0;
    buf[0] = 0;
    for (size_t d = 0; d < n && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%.1f", d ? "," : "", sum > 0 ? 100.0 * w[d] / sum : 0.0);
}

/* A tensor split's cut: each device's kv heads and FFN rows, and where a
 * device with a share holds none of one (fewer units than devices: the
 * split cannot spread that part). */
static void print_cuts(const cleave_placement_report *r, const cleave_phase_placement *ph) {
    uint32_t heads = 0, rows = 0;
    size_t idle_heads = 0, idle_rows = 0;
    for (size_t d = 0; d < r->n_devices; d++) {
        heads += ph->kv_heads[d], rows += ph->ff_rows[d];
        if (ph->shares[d] > 0) idle_heads += ph->kv_heads[d] == 0, idle_rows += ph->ff_rows[d] == 0;
    }
    printf("  kv heads (of %u, in units of %u):", heads, ph->head_align);
    for (size_t d = 0; d < r->n_devices; d++) printf("%s %s %u", d ? "," : "", r->device[d], ph->kv_heads[d]);
    printf("\n  FFN rows (of %u, in units of %u):", rows, ph->ff_align);
    for (size_t d = 0; d < r->n_devices; d++) printf("%s %s %u", d ? "," : "", r->device[d], ph->ff_rows[d]);
    printf("\n");
    if (idle_rows)
        printf("  note: the FFN cuts into %u units of %u rows (the down projection's quant blocks), so %zu "
               "device%s with a share hold%s no FFN rows and the split cannot spread it evenly\n",
               rows / (ph->ff_align ? ph->ff_align : 1), ph->ff_align, idle_rows, idle_rows == 1 ? "" : "s",
               idle_rows == 1 ? "s" : "");
    if (idle_heads)
        printf("  note: %u kv heads in units of %u leave %zu device%s with a share without attention\n", heads,
               ph->head_align, idle_heads, idle_heads == 1 ? "" : "s");
}

static void print_phase(const cleave_placement_report *r, int k, const char *name, const char *how) {
    const cleave_phase_placement *ph = &r->phase[k];
    char sh[256] = "";
    if (ph->mode != CLEAVE_SPLIT_NONE) shares_text(ph->shares, r->n_devices, sh, sizeof sh);
    printf("%s: %s split%s%s%s%s\n", name, cleave_split_mode_name(ph->mode), sh[0] ? ", shares " : "", sh,
           sh[0] ? " " : "", sh[0] ? how : "");
    if (!ph->fits) {
        printf("  does not fit (see below)\n");
        return;
    }
    printf("  %-24s %10s %10s %10s %10s %10s %10s\n", "device (MiB)", "weights", "KV", "compute", "total", "budget",
           "KV host");
    for (size_t d = 0; d < r->n_devices; d++) {
        size_t total = ph->weights[d] + ph->kv[d] + ph->compute[d];
        char budget[32];
        if (r->budget[d]) snprintf(budget, sizeof budget, "%.2f", mib(r->budget[d]));
        else snprintf(budget, sizeof budget, "-");
        printf("  %-24s %10.2f %10.2f %10.2f %10.2f %10s %10.2f\n", r->device[d], mib(ph->weights[d]),
               mib(ph->kv[d]), mib(ph->compute[d]), mib(total), budget, mib(ph->kv_host[d]));
    }
    if (ph->kv_vram_cells < r->n_ctx)
        printf("  KV cache in two tiers: %u of %u cells of each layer in device memory\n", ph->kv_vram_cells,
               r->n_ctx);
    if (ph->mode == CLEAVE_SPLIT_TENSOR) print_cuts(r, ph);
}

static void print_peak(const cleave_placement_report *r, int k, const char *name) {
    printf("%s: peak", name);
    for (size_t d = 0; d < r->n_devices; d++) {
        bool over = r->budget[d] && r->switch_peak[k][d] > r->budget[d];
        printf("%s %s %.2f MiB%s", d ? "," : "", r->device[d], mib(r->switch_peak[k][d]), over ? " (over its budget)" : "");
    }
    printf(" -> %s\n", r->switch_fits[k] ? "fits" : "does not fit");
}

/* What the switch copies between the devices (the context full), and with
 * a link's bandwidth, the least time those copies can take: each device
 * sends and receives at once, so its larger direction over the link. */
static void print_moves(const cleave_placement_report *r, int k, double link_gbs) {
    printf("  copies (MiB out/in, the context full):");
    double worst = 0;
    for (size_t d = 0; d < r->n_devices; d++) {
        size_t o = r->switch_bytes_out[k][d], in = r->switch_bytes_in[k][d];
        printf("%s %s %.1f/%.1f", d ? "," : "", r->device[d], mib(o), mib(in));
        double larger = (double)(o > in ? o : in);
        if (larger > worst) worst = larger;
    }
    if (link_gbs > 0) printf("; at %.0f GB/s a link, at least %.1f ms", link_gbs, worst / (link_gbs * 1e9) * 1e3);
    printf("\n");
}

static void print_report(const cleave_placement_report *r, const cli_placement *pl, const char *kv,
                         double link_gbs) {
    printf("context %u cells (both phases), batch %u, KV %s, %zu device%s\n", r->n_ctx, r->n_batch, kv,
           r->n_devices, r->n_devices == 1 ? "" : "s");
    const char *fit = pl->fit == 0 ? "(equal)" : "(fitted)";
    if (r->two_phases) {
        print_phase(r, CLEAVE_PHASE_PREFILL, "prefill", pl->n_prefill_shares ? "(-pts)" : fit);
        print_phase(r, CLEAVE_PHASE_GENERATE, "generation", pl->n_shares ? "(-ts)" : fit);
        if (r->phase[CLEAVE_PHASE_GENERATE].fits) {
            print_peak(r, CLEAVE_PHASE_GENERATE, "switch to generation");
            print_moves(r, CLEAVE_PHASE_GENERATE, link_gbs);
            print_peak(r, CLEAVE_PHASE_PREFILL, "switch back to prefill");
            print_moves(r, CLEAVE_PHASE_PREFILL, link_gbs);
        }
        if (r->why[0]) printf("warning: %s\n", r->why);
    } else {
        print_phase(r, CLEAVE_PHASE_PREFILL, "both phases", pl->n_shares ? "(-ts)" : fit);
    }
    printf("largest context%s:\n", pl->fit == 0 ? "" : " (5% of each budget free)");
    static const char *const modes[3] = {"none", "layer", "tensor"};
    for (int m = 0; m < 3; m++)
        if (r->n_devices > 1 || m == 0) printf("  %-28s %u\n", modes[m], r->largest_ctx[m]);
    if (r->two_phases) {
        char pair[64];
        snprintf(pair, sizeof pair, "%s, then %s", cleave_split_mode_name(r->phase[0].mode),
                 cleave_split_mode_name(r->phase[1].mode));
        printf("  %-28s %u\n", pair, r->largest_ctx_phases);
    }
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    long long n_ctx = 0;
    cli_placement pl = cli_placement_default();
    cli_context_opts cx = cli_context_default(512);
    bool placing = false, keep_both = false;
    double link_gbs = 0; /* GB/s, 0: not given */
    cli_usage_for("info", INFO_SYNOPSIS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int pr;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            info_usage();
            return 0;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!cli_int(a, v, 1, 1 << 24, &n_ctx)) return 1;
            i++;
        } else if (!strcmp(a, "--link-gbs")) {
            if (!cli_positive(a, v, &link_gbs)) return 1;
            placing = true, i++;
        } else if (!strcmp(a, "--psm-keep-both")) {
            keep_both = placing = true;
        } else if ((pr = cli_placement_flag(a, v, &pl)) != 0 || (pr = cli_phase_flag(a, v, &pl)) != 0 ||
                   (pr = cli_context_flag(a, v, &cx)) != 0) {
            if (pr < 0) return 1;
            placing = true, i++;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            return cli_bad_option("info", INFO_SYNOPSIS, a);
        }
    }
    if (!path) return cli_usage_error("info", INFO_SYNOPSIS, "a MODEL.gguf is required");
    if (!placing) {
        cleave_status st = cleave_print_info(path, (uint32_t)n_ctx, stdout);
        return st ? cli_fail("info", st) : 0;
    }
    if (!cli_phase_check(&pl, "info", INFO_SYNOPSIS)) return 1;
    cleave_model *m = NULL;
    cleave_status st = cleave_model_load(path, NULL, &m);
    if (st) return cli_fail("loading model", st);
    cleave_context_params cp = cli_context_params(&cx, &pl, (uint32_t)n_ctx);
    cp.keep_both_placements = keep_both;
    static cleave_placement_report r; /* large: not on the stack */
    st = cleave_placement_preview(m, &cp, &r);
    if (!st) {
        cleave_model_desc d;
        cleave_model_describe(m, &d);
        cleave_type vt = cx.kv_type_v == CLEAVE_KV_TYPE_AS_K ? cx.kv_type : cx.kv_type_v;
        char kv[64];
        snprintf(kv, sizeof kv, "%s/%s", cleave_type_name(cx.kv_type), cleave_type_name(vt));
        printf("model: %s (%s, %.2f M params, %u layers, training context %u)\n", path, d.arch, d.n_params / 1e6,
               d.n_layer, d.n_ctx_train);
        print_report(&r, &pl, kv, link_gbs);
    }
    cleave_model_free(m);
    return st ? cli_fail("placement", st) : 0;
}
