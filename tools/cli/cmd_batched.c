/* `cleave batched-bench`: llama-batched-bench semantics. For each prompt
 * length PP, generation length TG and parallel sequence count B: B
 * sequences' prompts of PP tokens go through the model together (in
 * passes of -b tokens), then TG steps each decode one token of every
 * sequence in one pass. S_PP = B*PP / T_PP, S_TG = B*TG / T_TG, and the
 * totals over both. One warm-up step first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_LIST 16

typedef struct {
    const char *model;
    cli_placement place;
    int npp[MAX_LIST], ntg[MAX_LIST], npl[MAX_LIST];
    size_t n_npp, n_ntg, n_npl;
    long long n_ctx;
    cli_context_opts cx;
    bool kv_unified; /* -kvu: one pool of cells for every sequence */
} batched_opts;

static void usage(FILE *out) {
    fprintf(out,
            "usage: cleave batched-bench -m MODEL.gguf [-npp 128] [-ntg 128] [-npl 1,2,4,8] [options]\n"
            "  -npp N[,N..]            prompt tokens per sequence (default 128)\n"
            "  -ntg N[,N..]            tokens generated per sequence (default 128)\n"
            "  -npl N[,N..]            sequences decoded in parallel (default 1,2,4,8)\n"
            "  -c, --ctx-size N        context (default: what the largest test needs)\n"
            "  -kvu, --kv-unified      one pool of cells for all sequences (default: each of the\n"
            "                          most sequences a test runs has c / npl cells of its own,\n"
            "                          and a step reads only its sequences' cells)\n"
            "  -b, --batch-size N      tokens per forward pass (default 2048)\n"
            "  -ub, --ubatch-size N    layer split: prefill as a pipeline of N-token micro-batches\n"
            "  -t, --threads N         CPU threads of each CPU device (default: the cores, divided\n"
            "                          among cpu:N's N devices)\n"
            "  -ctk T, -ctv T          K and V cache types: f16 (default), f32, bf16, q8_0, q5_0, q4_0\n" CLI_PLACEMENT_HELP);
}

static bool parse(int argc, char **argv, batched_opts *o) {
    o->npp[0] = 128, o->n_npp = 1;
    o->ntg[0] = 128, o->n_ntg = 1;
    const int npl[4] = {1, 2, 4, 8};
    memcpy(o->npl, npl, sizeof npl), o->n_npl = 4;
    o->cx = cli_context_default(2048);
    cli_usage_for("batched-bench", "-m MODEL [flags]");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int pr;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) {
            o->model = v, i++;
        } else if (!strcmp(a, "-kvu") || !strcmp(a, "--kv-unified")) {
            o->kv_unified = true;
        } else if (!strcmp(a, "-npp") || !strcmp(a, "-ntg") || !strcmp(a, "-npl")) {
            bool pp = !strcmp(a, "-npp"), tg = !strcmp(a, "-ntg");
            int *dst = pp ? o->npp : tg ? o->ntg : o->npl;
            size_t *n = pp ? &o->n_npp : tg ? &o->n_ntg : &o->n_npl;
            if (!cli_int_list(a, v, dst, MAX_LIST, n)) return false;
            for (size_t k = 0; k < *n; k++)
                if (dst == o->npl ? dst[k] < 1 : dst[k] < 0) {
                    fprintf(stderr, "cleave batched-bench: %s: %d is out of range\n", a, dst[k]);
                    return false;
                }
            i++;
        } else if ((pr = cli_bench_flag(a, v, &o->n_ctx, &o->cx, &o->place)) != 0) {
            if (pr < 0) return false;
            i++;
        } else {
            cli_bad_option("batched-bench", "-m MODEL [flags]", a);
            return false;
        }
    }
    if (!o->model) {
        cli_usage_error("batched-bench", "-m MODEL [flags]", "-m MODEL is required");
        return false;
    }
    return true;
}

/* B sequences of pp prompt tokens, then tg steps of one token each;
 * returns false (printed) on an error. */
static bool run_test(cleave_context *ctx, int32_t n_vocab, int pp, int tg, int b, double *t_pp,
                     double *t_tg) {
    size_t n = (size_t)pp * (size_t)b, cap = n > (size_t)b ? n : (size_t)b;
    int32_t *tok = malloc(cap * sizeof *tok), *pos = malloc(cap * sizeof *pos),
            *seq = malloc(cap * sizeof *seq);
    bool ok = tok && pos && seq;
    cleave_kv_clear(ctx);
    double t0 = cli_now();
    if (ok && n) {
        for (size_t i = 0; i < n; i++) {
            seq[i] = (int32_t)(i / (size_t)pp);
            pos[i] = (int32_t)(i % (size_t)pp);
            tok[i] = (int32_t)((i * 2654435761u) % (uint32_t)n_vocab);
        }
        cleave_status st = cleave_decode_batch(ctx, tok, pos, seq, n);
        if (st) ok = !cli_fail("prompt", st);
    }
    *t_pp = cli_now() - t0;
    t0 = cli_now();
    for (int s = 0; ok && s < tg; s++) {
        for (int k = 0; k < b; k++) tok[k] = (int32_t)((s * 31 + k * 7 + 1) % n_vocab), pos[k] = pp + s, seq[k] = k;
        cleave_status st = cleave_decode_batch(ctx, tok, pos, seq, (size_t)b);
        if (st) ok = !cli_fail("generation", st);
    }
    *t_tg = cli_now() - t0;
    free(tok);
    free(pos);
    free(seq);
    return ok;
}

int cmd_batched_bench(int argc, char **argv) {
    batched_opts o;
    memset(&o, 0, sizeof o);
    o.place = cli_placement_default();
    o.place.fit = 0; /* the context the tests need, or a clear refusal */
    if (!parse(argc, argv, &o)) return 1;
    long long need = 1, most_seqs = 1, longest = 1;
    for (size_t i = 0; i < o.n_npp; i++)
        for (size_t j = 0; j < o.n_ntg; j++)
            for (size_t k = 0; k < o.n_npl; k++) {
                long long kv = (long long)o.npl[k] * (o.npp[i] + o.ntg[j]);
                if (kv > need) need = kv;
                if (o.npl[k] > most_seqs) most_seqs = o.npl[k];
                if (o.npp[i] + o.ntg[j] > longest) longest = o.npp[i] + o.ntg[j];
            }
    if (!o.kv_unified && most_seqs * longest > need) need = most_seqs * longest; /* every region holds the longest */
    cleave_context_params cp = cli_context_params(&o.cx, &o.place, (uint32_t)(o.n_ctx > need ? o.n_ctx : need));
    if (!o.kv_unified) cp.seq_regions = (uint32_t)most_seqs;
    cleave_model *m;
    cleave_context *ctx;
    int rc = cli_open(o.model, &cp, &m, &ctx);
    if (rc) return rc;
    cleave_model_desc d;
    cleave_model_describe(m, &d);
    fprintf(stderr, "cleave batched-bench: %s on %s, context %u (%s), batch %lld, KV %s\n", o.model,
            cleave_context_device(ctx), cleave_context_n_ctx(ctx),
            o.kv_unified ? "one pool" : "a region per sequence", o.cx.n_batch, cleave_type_name(o.cx.kv_type));
    double w0, w1;
    /* warm-up: a decode step, and a prompt as long as the first test's
     * (its kernels' first launches and scratch growth are not the test's) */
    if (!run_test(ctx, (int32_t)d.n_vocab, 8, 2, 1, &w0, &w1) ||
        (o.npp[0] > 8 && !run_test(ctx, (int32_t)d.n_vocab, o.npp[0], 0, 1, &w0, &w1)))
        rc = 1;
    printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n");
    printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n");
    for (size_t i = 0; !rc && i < o.n_npp; i++)
        for (size_t j = 0; !rc && j < o.n_ntg; j++)
            for (size_t k = 0; !rc && k < o.n_npl; k++) {
                int pp = o.npp[i], tg = o.ntg[j], b = o.npl[k];
                double t_pp, t_tg;
                if (!run_test(ctx, (int32_t)d.n_vocab, pp, tg, b, &t_pp, &t_tg)) {
                    rc = 1;
                    break;
                }
                double t = t_pp + t_tg, n_pp = (double)pp * b, n_tg = (double)tg * b;
                printf("| %5d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", pp,
                       tg, b, b * (pp + tg), t_pp, t_pp > 0 ? n_pp / t_pp : 0.0, t_tg,
                       t_tg > 0 ? n_tg / t_tg : 0.0, t, t > 0 ? (n_pp + n_tg) / t : 0.0);
                fflush(stdout);
            }
    cleave_context_free(ctx);
    cleave_model_free(m);
    return rc;
}
